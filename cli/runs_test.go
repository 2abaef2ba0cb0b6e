package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/internal/testwait"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
)

// journalEnv is a test's own journal: the real Redis of the test script
// under a namespace of its own, a file fixture store, and optionally the
// PostgreSQL archive.
type journalEnv struct {
	*fixture
	env []string
	ns  string
}

func newJournalEnv(t *testing.T, archive bool, extra ...string) *journalEnv {
	t.Helper()
	ns := testenv.UniqueName(t, "cli")
	e := &journalEnv{fixture: setup(t), ns: ns}
	e.env = append([]string{"PYRULA_VALKEY_URL=" + testenv.ValkeyURL(t), "PYRULA_NAMESPACE=" + ns}, extra...)
	if archive {
		e.env = append(e.env, "PYRULA_POSTGRES_DSN="+testenv.PostgresDSN(t))
	}
	return e
}

func (e *journalEnv) run(args ...string) result {
	e.t.Helper()
	return run(e.t, invocation{args: args, env: append([]string{"PYRULA_FIXTURE_STORE=" + e.dir}, e.env...)})
}

type runOut struct {
	RunID    string          `json:"run_id"`
	Status   string          `json:"status"`
	LastSeq  int64           `json:"last_seq"`
	Terminal json.RawMessage `json:"terminal"`
}

func (e *journalEnv) record(target string, args ...string) runOut {
	e.t.Helper()
	r := e.run(append([]string{"run", target}, args...)...)
	wantOK(e.t, r)
	var out runOut
	decodeOne(e.t, r, &out)
	if out.Status != "complete" || out.LastSeq < 3 || !strings.HasPrefix(out.RunID, "run_") {
		e.t.Fatalf("run %s: %+v", target, out)
	}
	return out
}

type event struct {
	RunSeq int64  `json:"run_seq"`
	Kind   string `json:"kind"`
	Call   *struct {
		Kind, Key string
	} `json:"call"`
}

type saveOut struct {
	FixtureHash     string `json:"fixture_hash"`
	FixtureStore    string `json:"fixture_store"`
	ManifestSummary struct {
		Format       int    `json:"format"`
		Kind         string `json:"kind"`
		TargetName   string `json:"target_name"`
		ForkAfterSeq *int64 `json:"fork_after_seq"`
		Capture      struct {
			Complete bool  `json:"complete"`
			Missing  []any `json:"missing"`
		} `json:"capture"`
		ResultCount  int `json:"result_count"`
		HistoryCount int `json:"history_count"`
	} `json:"manifest_summary"`
}

func TestTargets(t *testing.T) {
	t.Parallel()
	r := run(t, invocation{args: []string{"targets"}})
	wantOK(t, r)
	type target struct {
		Name         string          `json:"name"`
		Kind         string          `json:"kind"`
		Registration json.RawMessage `json:"registration"`
		Inputs       map[string]any  `json:"inputs"`
	}
	got := map[string]target{}
	for _, tg := range decodeLines[target](t, r) {
		got[tg.Name] = tg
	}
	co, ag := got["checkout"], got["support_agent"]
	if co.Kind != "workflow" || ag.Kind != "agent" || co.Inputs["sku"] == nil {
		t.Fatalf("targets: %+v", got)
	}
	for _, want := range []string{`"id":"reserve"`, `"effect":"write"`, `"id":"sigsend:0"`, `"id":"child:0"`} {
		if !strings.Contains(string(co.Registration), want) {
			t.Errorf("checkout registration %s lacks %s", co.Registration, want)
		}
	}
	if !strings.Contains(string(ag.Registration), `{"name":"refund","writes":true}`) ||
		!strings.Contains(string(ag.Registration), `{"name":"lookup_order","writes":false}`) {
		t.Errorf("agent registration %s", ag.Registration)
	}
}

// TestRunEventsSave records runs of the example targets in real Redis, lists
// their events and saves them at several forks.
func TestRunEventsSave(t *testing.T) {
	t.Parallel()
	e := newJournalEnv(t, false)
	co := e.record("checkout")

	r := e.run("events", co.RunID)
	wantOK(t, r)
	events := decodeLines[event](t, r)
	if int64(len(events)) != co.LastSeq || events[0].Kind != "run:submitted" || events[len(events)-1].Kind != "run:complete" {
		t.Fatalf("events: %d, last_seq %d\n%s", len(events), co.LastSeq, r)
	}
	// The fork inside the reserve step: after its call:start.
	var inCall, afterQuote int64
	for _, ev := range events {
		if ev.Call != nil && ev.Call.Key == "reserve:0" && ev.Kind == "call:start" {
			inCall = ev.RunSeq
		}
		if ev.Call != nil && ev.Call.Key == "quote:0" && ev.Kind == "call:done" {
			afterQuote = ev.RunSeq
		}
	}

	save := func(args ...string) saveOut {
		t.Helper()
		r := e.run(append([]string{"case", "save", "checkout", co.RunID}, args...)...)
		wantOK(t, r)
		var out saveOut
		decodeOne(t, r, &out)
		return out
	}
	last := save("--fork-after-seq", fmt.Sprint(co.LastSeq))
	s := last.ManifestSummary
	if last.FixtureStore != e.identity() || s.Format != 1 || s.Kind != "workflow" || s.TargetName != "checkout" ||
		*s.ForkAfterSeq != co.LastSeq || !s.Capture.Complete || s.HistoryCount != int(co.LastSeq)-1 || s.ResultCount < 5 {
		t.Fatalf("save at the last event: %+v", last)
	}
	if again := save("--fork-after-seq", fmt.Sprint(co.LastSeq)); again.FixtureHash != last.FixtureHash {
		t.Fatal("saving twice gave two hashes")
	}
	early := save("--fork-after-seq", fmt.Sprint(afterQuote))
	if early.ManifestSummary.HistoryCount != int(afterQuote) || early.ManifestSummary.ResultCount != s.ResultCount {
		t.Fatalf("save after quote: %+v", early)
	}
	inputsOnly := save()
	if inputsOnly.ManifestSummary.ForkAfterSeq != nil || inputsOnly.ManifestSummary.HistoryCount != 0 || inputsOnly.ManifestSummary.ResultCount != 0 {
		t.Fatalf("save without a fork: %+v", inputsOnly)
	}
	if n := len(decodeLines[map[string]any](t, e.run("case", "list"))); n != 3 {
		t.Fatalf("the store holds %d bundles, want 3 (one per distinct save)", n)
	}
	// The bundle holds the run's events and results.
	r = e.run("case", "show", last.FixtureHash)
	wantOK(t, r)
	if !strings.Contains(r.stdout, `"key":"reserve:0"`) || !strings.Contains(r.stdout, co.RunID) {
		t.Fatalf("show: %s", r)
	}

	msg := wantRefusal(t, e.run("case", "save", "checkout", co.RunID, "--fork-after-seq", fmt.Sprint(inCall)), "capture_incomplete")
	if !strings.Contains(msg, "step:reserve:0") || !strings.Contains(msg, "in flight") {
		t.Fatalf("capture_incomplete message: %s", msg)
	}

	ag := e.record("support_agent")
	wantRefusal(t, e.run("case", "save", "support_agent", ag.RunID, "--fork-after-seq", "3", "--kind", "workflow"), "kind_mismatch")
	// And the other way: --kind agent on a run without model or tool calls.
	msg = wantRefusal(t, e.run("case", "save", "checkout", co.RunID, "--fork-after-seq", fmt.Sprint(co.LastSeq), "--kind", "agent"), "kind_mismatch")
	if !strings.Contains(msg, co.RunID+" made no model or tool calls") {
		t.Fatalf("kind_mismatch message: %s", msg)
	}
	r = e.run("case", "save", "support_agent", ag.RunID, "--fork-after-seq", fmt.Sprint(ag.LastSeq))
	wantOK(t, r)
	if !strings.Contains(r.stdout, `"kind":"agent"`) {
		t.Fatalf("agent save: %s", r)
	}

	wantError(t, e.run("case", "save", "checkout", "run_nope"), "neither Valkey")
	wantError(t, e.run("events", "run_nope"), "neither Valkey")
	wantError(t, e.run("case", "save", "support_agent", co.RunID), "is a run of checkout")
	wantError(t, e.run("case", "save", "checkout", co.RunID, "--fork-after-seq", "9999"), "outside the run's events")
	wantError(t, e.run("run", "no_such_target"), "no target")
	wantError(t, e.run("run", "checkout", "--input", "sku=SKU-1"), "not JSON")
	wantRefusal(t, run(t, invocation{args: []string{"case", "save", "checkout", co.RunID}, env: e.env}), "no_fixture_store")
}

func TestRunInputs(t *testing.T) {
	t.Parallel()
	e := newJournalEnv(t, false)
	out := e.record("checkout", "--input", `sku="SKU-7"`, "--input", "qty=3", "--run-id", "run_inputs_1")
	if out.RunID != "run_inputs_1" || !strings.Contains(string(out.Terminal), "SKU-7") {
		t.Fatalf("run with inputs: %+v", out)
	}
	// Running the same run id again does not run it twice: the recorded
	// outcome comes back.
	again := e.record("checkout", "--run-id", "run_inputs_1")
	if again.LastSeq != out.LastSeq {
		t.Fatalf("rerun of a finished run: %+v vs %+v", again, out)
	}
}

// TestSaveFromArchive: a finished run leaves Valkey after the completed TTL;
// saved from the PostgreSQL archive it gives the same hash.
func TestSaveFromArchive(t *testing.T) {
	t.Parallel()
	e := newJournalEnv(t, true, "PYRULA_COMPLETED_TTL=300ms")
	wantOK(t, e.run("db", "migrate"))
	co := e.record("checkout")
	fork := fmt.Sprint(co.LastSeq)
	before := e.run("case", "save", "checkout", co.RunID, "--fork-after-seq", fork)
	wantOK(t, before)

	client, err := valkey.NewClient(valkey.MustParseURL(testenv.ValkeyURL(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	meta, _, _ := valkeyjournal.Keys(e.ns, co.RunID)
	testwait.Eventually(t, 10*time.Second, "the run's keys expired", func() bool {
		n, err := client.Do(context.Background(), client.B().Exists().Key(meta).Build()).AsInt64()
		return err == nil && n == 0
	})
	after := e.run("case", "save", "checkout", co.RunID, "--fork-after-seq", fork)
	wantOK(t, after)
	if before.stdout != after.stdout {
		t.Fatalf("save from Valkey and from the archive differ:\n%s\n%s", before.stdout, after.stdout)
	}
	r := e.run("events", co.RunID)
	wantOK(t, r)
	if n := len(decodeLines[event](t, r)); int64(n) != co.LastSeq {
		t.Fatalf("archived events: %d, want %d", n, co.LastSeq)
	}
}

// TestDBMigrateConcurrently: two pods running migrate at once both succeed.
func TestDBMigrateConcurrently(t *testing.T) {
	t.Parallel()
	env := []string{"PYRULA_POSTGRES_DSN=" + testenv.PostgresDSN(t)}
	var wg sync.WaitGroup
	results := make([]result, 3)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = run(t, invocation{args: []string{"db", "migrate"}, env: env})
		}()
	}
	wg.Wait()
	for _, r := range results {
		wantOK(t, r)
		var out struct {
			Applied []string `json:"applied"`
		}
		decodeOne(t, r, &out)
		if out.Applied == nil {
			t.Fatalf("applied is not a list: %s", r)
		}
	}
	wantError(t, run(t, invocation{args: []string{"db", "migrate"}}), "PYRULA_POSTGRES_DSN")
}
