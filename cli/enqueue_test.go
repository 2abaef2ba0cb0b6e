package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/examples"
	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/memstore"
	"github.com/pyrula/caseworker/worker"
)

// workerEnv is a worker running in the test process on the test Redis,
// under a namespace of its own, with a memory fixture store; the binary
// talks to it through PYRULA_VALKEY_URL and PYRULA_NAMESPACE.
type workerEnv struct {
	t   *testing.T
	c   valkey.Client
	ns  string
	env []string
}

func startWorker(t *testing.T) *workerEnv {
	t.Helper()
	return startWorkerWith(t, memstore.New(memstore.Options{}), nil)
}

// failingStore fails every Stat (a delete_case_bundle's first store call),
// so delete_case_bundle is dead-lettered.
type failingStore struct{ store.Store }

func (failingStore) Stat(context.Context, bundle.Hash) (store.Info, error) {
	return store.Info{}, errors.New("injected store outage")
}

func startWorkerWith(t *testing.T, st store.Store, mod func(*worker.Config)) *workerEnv {
	t.Helper()
	return startWorkerAt(t, testenv.ValkeyURL(t), st, mod)
}

// startWorkerAt is startWorkerWith on the Valkey at url (the test Valkey or
// the test Valkey Cluster).
func startWorkerAt(t *testing.T, url string, st store.Store, mod func(*worker.Config)) *workerEnv {
	t.Helper()
	opt, err := valkey.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.DisableCache = true
	c, err := valkey.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ns := testenv.UniqueName(t, "enq")
	cleanupNamespace(t, c, ns)
	reg := flow.NewRegistry()
	if _, err := examples.Register(reg); err != nil {
		t.Fatal(err)
	}
	cfg := worker.Config{Namespace: ns, ConsumerName: "enqueue-test"}
	if mod != nil {
		mod(&cfg)
	}
	w, err := worker.New(cfg, worker.Params{
		Client: c, Store: st, Registry: reg,
		Registerer: prometheus.NewRegistry(), Logger: zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	return &workerEnv{t: t, c: c, ns: ns, env: []string{"PYRULA_VALKEY_URL=" + url, "PYRULA_NAMESPACE=" + ns}}
}

// cleanupNamespace deletes the keys of namespace ns when t ends (on every
// node of a cluster).
func cleanupNamespace(t *testing.T, c valkey.Client, ns string) {
	t.Cleanup(func() {
		if err := testenv.DeleteNamespace(context.Background(), c, ns); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
}

func (e *workerEnv) run(args ...string) result {
	e.t.Helper()
	return run(e.t, invocation{args: append([]string{"enqueue"}, args...), env: e.env})
}

type replyOut struct {
	MessageID string          `json:"message_id"`
	Type      string          `json:"type"`
	Status    string          `json:"status"`
	Code      string          `json:"code"`
	Message   string          `json:"message"`
	Result    json.RawMessage `json:"result"`
}

const zeroHash = "0000000000000000000000000000000000000000000000000000000000000000"

func TestEnqueueWait(t *testing.T) {
	t.Parallel()
	e := startWorker(t)
	body := `{"fixture_hash":"` + zeroHash + `"}`
	r := e.run("delete_case_bundle", "--body", body, "--wait", "--message-id", "m1", "--timeout", "20s")
	wantOK(t, r)
	var got replyOut
	decodeOne(t, r, &got)
	if got.MessageID != "m1" || got.Status != "ok" || string(got.Result) != `{"deleted":false}` {
		t.Fatalf("reply %+v\n%s", got, r)
	}
	// The same id again: the same reply.
	r2 := e.run("delete_case_bundle", "--body", body, "--wait", "--message-id", "m1", "--timeout", "20s")
	wantOK(t, r2)
	if r2.stdout != r.stdout {
		t.Errorf("resend printed %s, want %s", r2.stdout, r.stdout)
	}
	// A refusal exits 2 with the reply (code and message) on stdout.
	r = e.run("delete_case_bundle", "--body", `{"fixture_hash":"XYZ"}`, "--wait", "--timeout", "20s")
	if r.code != 2 || r.stderr != "" {
		t.Fatalf("want exit 2\n%s", r)
	}
	decodeOne(t, r, &got)
	if got.Status != "refused" || got.Code != "invalid_fixture_hash" || got.Message == "" || !strings.HasPrefix(got.MessageID, "msg_") {
		t.Fatalf("reply %+v", got)
	}
	// --body @FILE.
	f := filepath.Join(t.TempDir(), "body.json")
	if err := os.WriteFile(f, []byte(body+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantOK(t, e.run("delete_case_bundle", "--body", "@"+f, "--wait", "--timeout", "20s"))
}

func TestEnqueueFollow(t *testing.T) {
	t.Parallel()
	e := startWorker(t)
	r := e.run("start_run", "--body", `{"target_name":"checkout","inputs":{"qty":3}}`, "--follow", "--timeout", "30s")
	wantOK(t, r)
	lines := decodeLines[map[string]any](t, r)
	if len(lines) < 3 || lines[0]["status"] != "ok" {
		t.Fatalf("want a reply then events\n%s", r)
	}
	for i, ev := range lines[1:] {
		if seq, _ := ev["run_seq"].(float64); int(seq) != i+1 {
			t.Fatalf("event %d has run_seq %v\n%s", i+1, ev["run_seq"], r)
		}
	}
	if k := lines[len(lines)-1]["kind"]; k != "run:complete" {
		t.Fatalf("last event %v, want run:complete\n%s", k, r)
	}
	// A what-if run from a journal run that is not there: the run ends
	// whatif_source_missing, exit 3.
	r = e.run("run_case", "--body", `{"target_name":"checkout","source":{"journal":{"run_id":"run_gone","fork_after_seq":null}}}`, "--follow", "--timeout", "30s")
	if r.code != 3 || r.stderr != "" {
		t.Fatalf("want exit 3\n%s", r)
	}
	lines = decodeLines[map[string]any](t, r)
	end := lines[len(lines)-1]
	if lines[0]["status"] != "ok" || end["kind"] != "run:error" || end["code"] != "whatif_source_missing" {
		t.Fatalf("want an ok reply and run:error whatif_source_missing\n%s", r)
	}
}

func TestEnqueueNoWaitAndErrors(t *testing.T) {
	t.Parallel()
	e := startWorker(t)
	r := e.run("start_run", "--body", `{"target_name":"checkout"}`, "--message-id", "nw1")
	wantOK(t, r)
	var sent map[string]string
	decodeOne(t, r, &sent)
	if sent["message_id"] != "nw1" || sent["type"] != "start_run" || sent["entry_id"] == "" ||
		sent["stream"] != e.ns+":case-messages" || sent["reply_to"] != e.ns+":case-replies" {
		t.Fatalf("sent %+v", sent)
	}
	wantError(t, e.run("frobnicate", "--body", "{}"), "unknown message type")
	wantError(t, e.run("start_run", "--body", "[1]"), "not a JSON object")
	wantError(t, e.run("start_run"), "--body is required")
	wantError(t, e.run("start_run", "--body", "@/nonexistent/body.json"), "read --body")
	// Nobody consumes this namespace's stream: no reply within the timeout.
	nobody := testenv.UniqueName(t, "nobody")
	cleanupNamespace(t, e.c, nobody)
	start := time.Now()
	r = run(t, invocation{args: []string{"enqueue", "start_run", "--body", `{"target_name":"checkout"}`, "--wait", "--timeout", "1500ms"},
		env: []string{e.env[0], "PYRULA_NAMESPACE=" + nobody}})
	wantError(t, r, "no reply")
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("gave up after %v, want about 1.5 s", d)
	}
}

// TestEnqueueTraceparent: a W3C trace context in TRACEPARENT and TRACESTATE
// goes with the message as its entry's fields; an invalid one is warned
// about on stderr and the message goes without it.
func TestEnqueueTraceparent(t *testing.T) {
	t.Parallel()
	e := startWorker(t)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	fieldsOf := func(r result) map[string]string {
		t.Helper()
		if r.code != 0 {
			t.Fatalf("want exit 0\n%s", r)
		}
		var sent map[string]string
		decodeOne(t, r, &sent)
		entries, err := e.c.Do(context.Background(), e.c.B().Xrange().Key(sent["stream"]).Start(sent["entry_id"]).End(sent["entry_id"]).Build()).AsXRange()
		if err != nil || len(entries) != 1 {
			t.Fatalf("the sent entry %s: %v, %v", sent["entry_id"], entries, err)
		}
		return entries[0].FieldValues
	}
	args := []string{"enqueue", "start_run", "--body", `{"target_name":"checkout"}`}
	r := run(t, invocation{args: args, env: append([]string{"TRACEPARENT=" + tp, "TRACESTATE=vendor=abc"}, e.env...)})
	if f := fieldsOf(r); f["traceparent"] != tp || f["tracestate"] != "vendor=abc" || r.stderr != "" {
		t.Errorf("the entry's fields: %v, stderr %q", f, r.stderr)
	}
	r = run(t, invocation{args: args, env: append([]string{"TRACEPARENT=not-a-traceparent"}, e.env...)})
	if f := fieldsOf(r); f["traceparent"] != "" || !strings.Contains(r.stderr, "TRACEPARENT is not a W3C traceparent") {
		t.Errorf("an invalid TRACEPARENT: fields %v, stderr %q", f, r.stderr)
	}
}

// TestEnqueueErrorReply: a message dead-lettered after its deliveries gets
// an error reply: exit 3, the reply on stdout.
func TestEnqueueErrorReply(t *testing.T) {
	t.Parallel()
	e := startWorkerWith(t, failingStore{memstore.New(memstore.Options{})}, func(c *worker.Config) {
		c.MaxDeliveries, c.ClaimIdle = 2, 50*time.Millisecond
	})
	r := e.run("delete_case_bundle", "--body", `{"fixture_hash":"`+zeroHash+`"}`, "--wait", "--timeout", "30s")
	if r.code != 3 || r.stderr != "" {
		t.Fatalf("want exit 3\n%s", r)
	}
	var got replyOut
	decodeOne(t, r, &got)
	if got.Status != "error" || got.Code != "runtime_error" || !strings.Contains(got.Message, "injected store outage") {
		t.Fatalf("reply %+v", got)
	}
}

// storedCheckout is a memory store holding the sample case
// checkout-recorded.json, and the case.
func storedCheckout(t *testing.T) (store.Store, *bundle.Canonical) {
	t.Helper()
	st := memstore.New(memstore.Options{})
	f, err := os.Open("../testdata/cases/checkout-recorded.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := bundle.Read(f, bundle.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Save(context.Background(), st, c); err != nil {
		t.Fatal(err)
	}
	return st, c
}

// TestEnqueueRunSuite follows a run_suite: the JSON lines end with the
// suite's suite:outcome and run:error suite_failed (exit 3) when an arm
// diverges; the table groups the failure by code and call and totals the
// arms.
func TestEnqueueRunSuite(t *testing.T) {
	t.Parallel()
	st, c := storedCheckout(t)
	e := startWorkerWith(t, st, nil)
	body := `{"target_name":"checkout","cases":{"bundles":["` + string(c.Hash()) + `"]},"arms":[` +
		`{"name":"as-recorded","options":{"replay_only":true}},` +
		`{"name":"qty5","options":{"replay_only":true,"inputs":{"qty":5}}}]}`
	r := e.run("run_suite", "--body", body, "--follow", "--timeout", "60s")
	if r.code != 3 || r.stderr != "" {
		t.Fatalf("want exit 3\n%s", r)
	}
	lines := decodeLines[map[string]any](t, r)
	end := lines[len(lines)-1]
	if lines[0]["status"] != "ok" || end["kind"] != "run:error" || end["code"] != "suite_failed" {
		t.Fatalf("want an ok reply and run:error suite_failed\n%s", r)
	}
	var outcome map[string]any
	for _, l := range lines {
		if l["kind"] == "suite:outcome" {
			outcome = l
		}
	}
	byStatus, _ := outcome["by_status"].(map[string]any)
	if outcome == nil || byStatus["pass"] != 1.0 || byStatus["pass"].(float64)+byStatus["fail"].(float64)+byStatus["error"].(float64) != 2 {
		t.Fatalf("suite:outcome %v\n%s", outcome, r)
	}
	// The same suite again (a new message) as a table.
	r = e.run("run_suite", "--body", body, "--follow", "--format", "table", "--timeout", "60s")
	if r.code != 3 {
		t.Fatalf("want exit 3\n%s", r)
	}
	for _, want := range []string{"suite:plan", "1 case × 2 arms = 2 children", "fail suite_failed", "2 (1 case × 2 arms): 1 pass",
		"COUNT", "step:quote:0", "qty5", "as-recorded  1", "qty5 against as-recorded: 1 case differ"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table lacks %q\n%s", want, r.stdout)
		}
	}
}

// enqueue --follow --html: a suite's page shows its failure group with the
// example child's divergence and timeline (read from the child's events)
// and its arms; a run_case's page is the case run's report; --html without
// --follow is refused before anything is sent.
func TestEnqueueHTML(t *testing.T) {
	t.Parallel()
	st, c := storedCheckout(t)
	e := startWorkerWith(t, st, nil)
	dir := t.TempDir()

	html := filepath.Join(dir, "suite.html")
	body := `{"target_name":"checkout","cases":{"bundles":["` + string(c.Hash()) + `"]},"arms":[` +
		`{"name":"as-recorded","options":{"replay_only":true}},` +
		`{"name":"qty5","options":{"replay_only":true,"inputs":{"qty":5}}}]}`
	r := e.run("run_suite", "--body", body, "--follow", "--timeout", "60s", "--html", html)
	if r.code != 3 {
		t.Fatalf("want exit 3\n%s", r)
	}
	p := openReport(t, html)
	for stat, want := range map[string]string{"status": "fail", "children": "2", "passed": "1", "failed": "0", "errors": "1", "live-calls": "0"} {
		if got := p.texts(`#summary .stat[data-stat="` + stat + `"] .stat-value`); len(got) != 1 || got[0] != want {
			t.Errorf("summary %s = %v, want %s", stat, got, want)
		}
	}
	if got := p.attrs("#groups .suite-group", "data-count"); len(got) != 1 || got[0] != "1" {
		t.Fatalf("groups %v, want one of 1 child", got)
	}
	group := p.texts("#groups .suite-group > summary")[0]
	for _, want := range []string{"prefix_diverged", "step:quote:0", "$.qty", "qty5"} {
		if !strings.Contains(group, want) {
			t.Errorf("the group %q lacks %q", group, want)
		}
	}
	// The example child, with its outcome and timeline.
	if n := p.count("#groups .example .case-row"); n != 1 {
		t.Fatalf("%d example rows, want 1", n)
	}
	p.Click(t, "#groups .example .case-row > summary")
	if got := p.texts("#groups .case-detail .divergence .div-call"); len(got) == 0 || got[0] != "step:quote:0" {
		t.Errorf("the example's divergence is at %v, want step:quote:0", got)
	}
	if n := p.count("#groups .case-detail .timeline .call"); n == 0 {
		t.Error("the example's timeline is empty")
	}
	if got := p.attrs("#suite-arms tr.suite-arm", "data-arm"); strings.Join(got, ",") != "as-recorded,qty5" {
		t.Errorf("arms %v", got)
	}
	if got := p.texts(`#suite-arms tr.suite-arm[data-arm="qty5"] td[data-col="errors"]`); len(got) != 1 || got[0] != "1" {
		t.Errorf("qty5 errors = %v, want 1", got)
	}
	if got := p.texts(`#arm-diffs .arm-diff[data-arm="qty5"] .differ`); len(got) != 1 || got[0] != "1 case differs" {
		t.Errorf("arm diff %v", got)
	}

	// A run_case: the case run's page.
	html = filepath.Join(dir, "run.html")
	r = e.run("run_case", "--body", `{"target_name":"checkout","source":{"bundle":{"fixture_hash":"`+string(c.Hash())+`"}},"options":{"replay_only":true,"inputs":{"qty":5}}}`,
		"--follow", "--timeout", "60s", "--html", html)
	if r.code != 3 {
		t.Fatalf("want exit 3\n%s", r)
	}
	p = openReport(t, html)
	if got := p.texts(`#summary .stat[data-stat="code"] .stat-value`); len(got) != 1 || got[0] != "prefix_diverged" {
		t.Errorf("run code = %v", got)
	}
	if got := p.texts(".case-row .case-detail .divergence .div-call"); len(got) == 0 || got[0] != "step:quote:0" {
		t.Errorf("the run's divergence is at %v, want step:quote:0", got)
	}
	if n := p.count(".case-row .timeline .call"); n == 0 {
		t.Error("the run's timeline is empty")
	}

	// Refused before sending.
	r = e.run("run_suite", "--body", body, "--wait", "--html", filepath.Join(dir, "x.html"))
	if r.code != 1 || !strings.Contains(r.stderr, "--html needs --follow") {
		t.Errorf("--html without --follow: want exit 1 and the reason\n%s", r)
	}
	if _, err := os.Stat(filepath.Join(dir, "x.html")); err == nil {
		t.Error("a refused --html wrote its file")
	}
}
