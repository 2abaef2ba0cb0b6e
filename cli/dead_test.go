package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/internal/testwait"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/memstore"
	"github.com/pyrula/caseworker/worker"
	"github.com/pyrula/caseworker/worker/client"
)

// outageStore fails every Stat and Open while down is set: a
// delete_case_bundle, or a run_case from a bundle, fails transiently until
// it is dead-lettered, and succeeds once the store is back.
type outageStore struct {
	store.Store
	down atomic.Bool
}

var errOutage = errors.New("injected store outage")

func (s *outageStore) Stat(ctx context.Context, h bundle.Hash) (store.Info, error) {
	if s.down.Load() {
		return store.Info{}, errOutage
	}
	return s.Store.Stat(ctx, h)
}

func (s *outageStore) Open(ctx context.Context, h bundle.Hash) (io.ReadCloser, error) {
	if s.down.Load() {
		return nil, errOutage
	}
	return s.Store.Open(ctx, h)
}

// deadEnv is a worker that dead-letters quickly (two deliveries, or two
// failures of a run), over an outageStore, on the Valkey at url.
type deadEnv struct {
	*workerEnv
	st *outageStore
}

func startDeadEnv(t *testing.T, url string) *deadEnv {
	t.Helper()
	st := &outageStore{Store: memstore.New(memstore.Options{})}
	w := startWorkerAt(t, url, st, func(c *worker.Config) {
		c.MaxDeliveries = 2
		c.ClaimIdle = 100 * time.Millisecond
		c.RunLease = 300 * time.Millisecond
	})
	return &deadEnv{workerEnv: w, st: st}
}

// dead runs `pyrula dead ARGS…` against the worker's Valkey and namespace.
func (e *deadEnv) dead(args ...string) result {
	e.t.Helper()
	return run(e.t, invocation{args: append([]string{"dead"}, args...), env: e.env})
}

// waitDead waits until stream holds n dead letters.
func (e *deadEnv) waitDead(stream string, n int64) {
	e.t.Helper()
	testwait.Eventually(e.t, 30*time.Second, fmt.Sprintf("%d dead letters on %s", n, stream), func() bool {
		got, err := e.c.Do(context.Background(), e.c.B().Xlen().Key(stream).Build()).AsInt64()
		return err == nil && got == n
	})
}

// deadLine is a line of dead list.
type deadLine struct {
	EntryID     string  `json:"entry_id"`
	RunID       string  `json:"run_id"`
	MessageID   string  `json:"message_id"`
	Type        string  `json:"type"`
	At          string  `json:"at"`
	Reason      string  `json:"reason"`
	Deliveries  *int64  `json:"deliveries"`
	Failures    *int64  `json:"failures"`
	ReplyStatus string  `json:"reply_status"`
	Redriven    *redone `json:"redriven"`
}

type redone struct {
	MessageID string `json:"message_id"`
	RunID     string `json:"run_id"`
	EntryID   string `json:"entry_id"`
	At        string `json:"at"`
}

// redriveLine is the first line of dead redrive.
type redriveLine struct {
	EntryID   string `json:"entry_id"`
	MessageID string `json:"message_id"`
	RunID     string `json:"run_id"`
	Redrive   redone `json:"redrive"`
	ReplyTo   string `json:"reply_to"`
}

// TestDeadMessages dead-letters messages with a real worker whose store is
// down, then lists, shows, redrives (once; two at once: one wins) and
// purges them through the binary, on Redis and on the cluster.
func TestDeadMessages(t *testing.T) {
	t.Parallel()
	t.Run("redis", func(t *testing.T) { t.Parallel(); deadMessages(t, testenv.ValkeyURL(t)) })
	t.Run("cluster", func(t *testing.T) { t.Parallel(); deadMessages(t, testenv.ValkeyClusterURL(t)) })
}

func deadMessages(t *testing.T, url string) {
	e := startDeadEnv(t, url)
	deadStream := e.ns + ":case-messages:dead"
	body := `{"fixture_hash":"` + zeroHash + `"}`

	// Nothing yet.
	r := e.dead("list")
	wantOK(t, r)
	if r.stdout != "" {
		t.Fatalf("list of no dead letter\n%s", r)
	}
	r = e.dead("list", "--format", "table")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "(no dead letter)") {
		t.Fatalf("table of no dead letter\n%s", r)
	}

	// Two messages dead-lettered while the store is down: an error reply
	// (exit 3), then the dead letter.
	e.st.down.Store(true)
	for _, id := range []string{"d1", "d2"} {
		r := e.run("delete_case_bundle", "--body", body, "--message-id", id, "--wait", "--timeout", "30s")
		if r.code != 3 {
			t.Fatalf("want the error reply of a dead letter (exit 3)\n%s", r)
		}
	}
	e.waitDead(deadStream, 2)
	e.st.down.Store(false)

	r = e.dead("list")
	wantOK(t, r)
	lines := decodeLines[deadLine](t, r)
	if len(lines) != 2 || lines[0].MessageID != "d1" || lines[1].MessageID != "d2" {
		t.Fatalf("want d1 and d2, oldest first\n%s", r)
	}
	d1 := lines[0]
	at, err := time.Parse(time.RFC3339Nano, d1.At)
	if d1.Type != "delete_case_bundle" || d1.Deliveries == nil || *d1.Deliveries != 2 || d1.ReplyStatus != "error" ||
		!strings.Contains(d1.Reason, "injected store outage") || d1.Redriven != nil || err != nil || time.Since(at) > time.Minute {
		t.Fatalf("dead letter %+v\n%s", d1, r)
	}
	if strings.Contains(r.stdout, `"run_id"`) || strings.Contains(r.stdout, `"failures"`) || !strings.Contains(r.stdout, `"redriven":null`) {
		t.Fatalf("a message's line has a run's fields, or no redriven\n%s", r)
	}
	r = e.dead("list", "--format", "table")
	wantOK(t, r)
	tl := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(tl) != 3 || strings.Join(strings.Fields(tl[0]), " ") != "ENTRY MESSAGE TYPE AT DELIVERIES REPLY REDRIVEN REASON" ||
		!strings.HasPrefix(strings.Join(strings.Fields(tl[1]), " "), d1.EntryID+" d1 delete_case_bundle "+at.Format(time.RFC3339)+" 2 error - ") ||
		!strings.HasSuffix(tl[1], "injected store outage") {
		t.Fatalf("table\n%s", r)
	}

	// show: the reason, the deliveries, the recorded reply; the body's size
	// and keys, its values only with --values (and a warning).
	r = e.dead("show", d1.EntryID)
	wantOK(t, r)
	var shown map[string]json.RawMessage
	decodeOne(t, r, &shown)
	if _, ok := shown["body"]; ok {
		t.Fatalf("show printed the body without --values\n%s", r)
	}
	var reply replyOut
	if err := json.Unmarshal(shown["reply"], &reply); err != nil || reply.MessageID != "d1" || reply.Status != "error" || reply.Code != "runtime_error" {
		t.Fatalf("recorded reply %s\n%s", shown["reply"], r)
	}
	if string(shown["body_keys"]) != `["fixture_hash"]` || string(shown["body_bytes"]) != fmt.Sprint(len(body)) ||
		string(shown["deliveries"]) != "2" || string(shown["stream"]) != `"`+deadStream+`"` || len(shown["source_entry_id"]) < 5 {
		t.Fatalf("show\n%s", r)
	}
	r = e.dead("show", d1.EntryID, "--values")
	wantOKWarned(t, r)
	decodeOne(t, r, &shown)
	if string(shown["body"]) != body {
		t.Fatalf("show --values: body %s, want %s\n%s", shown["body"], body, r)
	}

	// redrive: the message goes back under d1.redrive-1 and gets its own
	// reply; d1 keeps its error reply.
	r = e.dead("redrive", d1.EntryID, "--wait", "--timeout", "30s")
	wantOK(t, r)
	out := strings.SplitN(r.stdout, "\n", 2)
	var rd redriveLine
	if err := json.Unmarshal([]byte(out[0]), &rd); err != nil || rd.EntryID != d1.EntryID || rd.MessageID != "d1" ||
		rd.Redrive.MessageID != "d1.redrive-1" || rd.Redrive.EntryID == "" || rd.ReplyTo != e.ns+":case-replies" {
		t.Fatalf("redrive line %+v (%v)\n%s", rd, err, r)
	}
	if err := json.Unmarshal([]byte(out[1]), &reply); err != nil || reply.MessageID != "d1.redrive-1" || reply.Status != "ok" ||
		string(reply.Result) != `{"deleted":false}` {
		t.Fatalf("redrive reply %+v (%v)\n%s", reply, err, r)
	}
	// Once: a second redrive is refused, naming the first.
	r = e.dead("redrive", d1.EntryID)
	wantError(t, r, "redriven already")
	if !strings.Contains(r.stderr, "d1.redrive-1") {
		t.Fatalf("the refusal does not name the redrive\n%s", r)
	}
	r = e.dead("list")
	lines = decodeLines[deadLine](t, r)
	if lines[0].Redriven == nil || lines[0].Redriven.MessageID != "d1.redrive-1" || lines[1].Redriven != nil {
		t.Fatalf("list after the redrive\n%s", r)
	}
	r = e.dead("show", d1.EntryID)
	wantOK(t, r)
	decodeOne(t, r, &shown)
	if err := json.Unmarshal(shown["redrive_reply"], &reply); err != nil || reply.MessageID != "d1.redrive-1" || reply.Status != "ok" {
		t.Fatalf("show after the redrive: redrive_reply %s\n%s", shown["redrive_reply"], r)
	}
	if err := json.Unmarshal(shown["reply"], &reply); err != nil || reply.MessageID != "d1" || reply.Status != "error" {
		t.Fatalf("show after the redrive: reply %s\n%s", shown["reply"], r)
	}

	// Two operators redrive d2 at once: one succeeds, the other is refused;
	// the redrive's id gets one reply.
	var wg sync.WaitGroup
	res := make([]result, 2)
	for i := range res {
		wg.Add(1)
		go func() { defer wg.Done(); res[i] = e.dead("redrive", lines[1].EntryID) }()
	}
	wg.Wait()
	if res[0].code+res[1].code != 1 {
		t.Fatalf("want one redrive to succeed and one refused\n%s\n%s", res[0], res[1])
	}
	for _, r := range res {
		if r.code == 1 {
			wantError(t, r, "redriven already")
		} else {
			wantOK(t, r)
		}
	}
	cl, err := client.New(e.c, client.Options{Namespace: e.ns})
	if err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "the reply of d2.redrive-1", func() bool {
		r := e.dead("show", lines[1].EntryID)
		decodeOne(t, r, &shown)
		return json.Unmarshal(shown["redrive_reply"], &reply) == nil && reply.MessageID == "d2.redrive-1" && reply.Status == "ok"
	})

	// Errors: a bad id, an id that is not there, purge without ids.
	wantError(t, e.dead("show", "d1"), "not a stream entry id")
	wantError(t, e.dead("redrive", "1-0"), "no such dead letter")
	wantError(t, e.dead("show", "1-0", "--runs"), "no such dead letter")
	wantError(t, e.dead("purge"), "missing argument ID (or --all)")
	wantError(t, e.dead("purge", "1-0", "--all"), "not both")
	wantError(t, e.dead("list", "--format", "yaml"), "want json or table")
	wantError(t, e.dead(), "needs a command")

	// purge: a dry run lists, --yes deletes (with the redrive marks).
	type purged struct {
		EntryID   string `json:"entry_id"`
		MessageID string `json:"message_id"`
		Redriven  bool   `json:"redriven"`
		Action    string `json:"action"`
	}
	r = e.dead("purge", d1.EntryID, "1-0")
	wantOK(t, r)
	p := decodeLines[purged](t, r)
	if len(p) != 2 || p[0] != (purged{d1.EntryID, "d1", true, "candidate"}) || p[1] != (purged{"1-0", "", false, "missing"}) {
		t.Fatalf("purge dry run %+v\n%s", p, r)
	}
	r = e.dead("purge", "--all")
	wantOK(t, r)
	if p = decodeLines[purged](t, r); len(p) != 2 || p[0].Action != "candidate" || p[1].Action != "candidate" {
		t.Fatalf("purge --all dry run\n%s", r)
	}
	if r = e.dead("list"); len(decodeLines[deadLine](t, r)) != 2 {
		t.Fatalf("a dry run deleted\n%s", r)
	}
	r = e.dead("purge", d1.EntryID, "--yes")
	wantOK(t, r)
	if p = decodeLines[purged](t, r); len(p) != 1 || p[0].Action != "deleted" {
		t.Fatalf("purge --yes\n%s", r)
	}
	r = e.dead("purge", "--all", "--yes")
	wantOK(t, r)
	if p = decodeLines[purged](t, r); len(p) != 1 || p[0].MessageID != "d2" || p[0].Action != "deleted" {
		t.Fatalf("purge --all --yes\n%s", r)
	}
	if r = e.dead("list"); r.stdout != "" {
		t.Fatalf("dead letters left after purge --all --yes\n%s", r)
	}
	marks, err := cl.RedriveMarksKey(client.DeadMessages)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := e.c.Do(context.Background(), e.c.B().Hlen().Key(marks).Build()).AsInt64(); err != nil || n != 0 {
		t.Fatalf("%d redrive marks left (%v)", n, err)
	}
}

// TestDeadRuns dead-letters a case run with a real worker whose store is
// down, then lists, shows, redrives (as a new run, which completes; once)
// and purges it through the binary, on Redis and on the cluster.
func TestDeadRuns(t *testing.T) {
	t.Parallel()
	t.Run("redis", func(t *testing.T) { t.Parallel(); deadRuns(t, testenv.ValkeyURL(t)) })
	t.Run("cluster", func(t *testing.T) { t.Parallel(); deadRuns(t, testenv.ValkeyClusterURL(t)) })
}

func deadRuns(t *testing.T, url string) {
	e := startDeadEnv(t, url)
	ctx := context.Background()
	deadStream := e.ns + ":runs:dead"

	// A recorded run and its case, saved while the store works.
	r := e.run("start_run", "--body", `{"target_name":"checkout"}`, "--follow", "--timeout", "30s")
	wantOK(t, r)
	followed := decodeLines[map[string]json.RawMessage](t, r)
	var started struct {
		RunID string `json:"run_id"`
	}
	if err := json.Unmarshal(followed[0]["result"], &started); err != nil {
		t.Fatal(err)
	}
	lastSeq := string(followed[len(followed)-1]["run_seq"])
	r = e.run("save_case", "--body", `{"target_name":"checkout","run_id":"`+started.RunID+`","fork_after_seq":`+lastSeq+`}`, "--wait", "--timeout", "30s")
	wantOK(t, r)
	var saved replyOut
	decodeOne(t, r, &saved)
	var res struct {
		FixtureHash string `json:"fixture_hash"`
	}
	if err := json.Unmarshal(saved.Result, &res); err != nil || len(res.FixtureHash) != 64 {
		t.Fatalf("save_case\n%s", r)
	}

	// The case run fails while the store is down: dead-lettered after two
	// failures, ended run:error runtime_error (exit 3).
	e.st.down.Store(true)
	caseBody := `{"target_name":"checkout","source":{"bundle":{"fixture_hash":"` + res.FixtureHash + `"}},"options":{"replay_only":true}}`
	r = e.run("run_case", "--body", caseBody, "--message-id", "rc1", "--follow", "--timeout", "60s")
	if r.code != 3 || !strings.Contains(r.stdout, `"code":"runtime_error"`) {
		t.Fatalf("want the case run dead-lettered (run:error runtime_error, exit 3)\n%s", r)
	}
	e.waitDead(deadStream, 1)
	e.st.down.Store(false)

	r = e.dead("list", "--runs")
	wantOK(t, r)
	lines := decodeLines[deadLine](t, r)
	if len(lines) != 1 {
		t.Fatalf("want one dead run\n%s", r)
	}
	l := lines[0]
	if !strings.HasPrefix(l.RunID, "case_") || l.MessageID != "rc1" || l.Type != "run_case" || l.Failures == nil || *l.Failures != 2 ||
		!strings.Contains(l.Reason, "injected store outage") || l.Deliveries != nil || l.Redriven != nil {
		t.Fatalf("dead run %+v\n%s", l, r)
	}
	r = e.dead("list", "--runs", "--format", "table")
	wantOK(t, r)
	if tl := strings.Split(r.stdout, "\n"); len(tl) != 3 || !strings.Contains(tl[0], "FAILURES") ||
		!strings.HasPrefix(strings.Join(strings.Fields(tl[1]), " "), l.EntryID+" "+l.RunID+" rc1 run_case ") {
		t.Fatalf("table\n%s", r)
	}
	// The message dead letters are another stream.
	if r = e.dead("list"); r.stdout != "" {
		t.Fatalf("a dead run listed with the messages\n%s", r)
	}

	r = e.dead("show", l.EntryID, "--runs")
	wantOK(t, r)
	var shown map[string]json.RawMessage
	decodeOne(t, r, &shown)
	var terminal struct {
		Kind string `json:"kind"`
		Code string `json:"code"`
	}
	if _, ok := shown["body"]; ok || string(shown["body_keys"]) != `["options","source","target_name"]` ||
		string(shown["status"]) != `"error"` || string(shown["target_name"]) != `"checkout"` ||
		json.Unmarshal(shown["terminal"], &terminal) != nil || terminal.Kind != "run:error" || terminal.Code != "runtime_error" {
		t.Fatalf("show --runs\n%s", r)
	}
	r = e.dead("show", l.EntryID, "--runs", "--values")
	wantOKWarned(t, r)
	decodeOne(t, r, &shown)
	if !strings.Contains(string(shown["body"]), res.FixtureHash) {
		t.Fatalf("show --runs --values\n%s", r)
	}

	// redrive: a new run of the same request, under new ids, which
	// completes now that the store is back.
	r = e.dead("redrive", l.EntryID, "--runs", "--wait", "--timeout", "30s")
	wantOK(t, r)
	out := strings.SplitN(strings.TrimSuffix(r.stdout, "\n"), "\n", 2)
	var rd redriveLine
	if err := json.Unmarshal([]byte(out[0]), &rd); err != nil || rd.RunID != l.RunID || rd.MessageID != "rc1" ||
		rd.Redrive.MessageID != "rc1.redrive-1" || rd.Redrive.RunID != l.RunID+".redrive-1" {
		t.Fatalf("redrive line %+v\n%s", rd, r)
	}
	var reply replyOut
	var runRes struct {
		RunID  string `json:"run_id"`
		Events string `json:"events"`
	}
	if err := json.Unmarshal([]byte(out[1]), &reply); err != nil || reply.MessageID != "rc1.redrive-1" || reply.Status != "ok" ||
		json.Unmarshal(reply.Result, &runRes) != nil || runRes.RunID != l.RunID+".redrive-1" {
		t.Fatalf("redrive reply\n%s", r)
	}
	cl, err := client.New(e.c, client.Options{Namespace: e.ns})
	if err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	end, err := cl.Follow(fctx, runRes.Events, func(journal.Event) error { return nil })
	if err != nil || end.Status != journal.StatusComplete {
		t.Fatalf("the redriven run ended %+v, %v; want complete", end, err)
	}
	wantError(t, e.dead("redrive", l.EntryID, "--runs"), "redriven already")

	// A dead run whose journal is gone cannot be redriven.
	gone, err := e.c.Do(ctx, e.c.B().Xadd().Key(deadStream).Id("*").FieldValue().FieldValue("run_id", "run_gone").
		FieldValue("entry_id", "1-1").FieldValue("error", "boom").FieldValue("failures", "2").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	wantError(t, e.dead("redrive", gone, "--runs"), "in neither Valkey nor the archive")

	r = e.dead("purge", "--all", "--runs", "--yes")
	wantOK(t, r)
	if n := len(decodeLines[map[string]any](t, r)); n != 2 {
		t.Fatalf("purge --all --runs --yes: %d lines, want 2\n%s", n, r)
	}
	if r = e.dead("list", "--runs"); r.stdout != "" {
		t.Fatalf("dead runs left\n%s", r)
	}
}
