package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/internal/testwait"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/memstore"
	"github.com/pyrula/caseworker/worker"
)

// journalOf is the env's journal, as the worker sees it.
func (e *env) journalOf() *valkeyjournal.Journal {
	e.t.Helper()
	j, err := valkeyjournal.New(e.client, valkeyjournal.Options{Namespace: e.cfg.Namespace})
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

// runResult decodes an ok reply's {run_id, events}.
func runResult(t *testing.T, r messages.Reply) messages.RunResult {
	t.Helper()
	wantReply(t, r, messages.StatusOK, "")
	var res messages.RunResult
	if err := json.Unmarshal(r.Result, &res); err != nil || res.RunID == "" {
		t.Fatalf("result %s: %v", r.Result, err)
	}
	return res
}

// waitRun polls the journal until run runID ended and returns its events.
func (e *env) waitRun(runID string, limit time.Duration) []journal.Event {
	e.t.Helper()
	j := e.journalOf()
	testwait.Eventually(e.t, limit, "the run's terminal status", func() bool {
		m, err := j.Meta(context.Background(), runID)
		return err == nil && m.Status.Terminal()
	})
	events, _, err := j.Events(context.Background(), runID)
	if err != nil {
		e.t.Fatal(err)
	}
	return events
}

// last returns the run's terminal event and its code.
func last(t *testing.T, events []journal.Event) (journal.Kind, messages.Code) {
	t.Helper()
	ev := events[len(events)-1]
	return ev.Kind, ev.Code
}

func count(events []journal.Event, kind journal.Kind) int {
	n := 0
	for _, ev := range events {
		if ev.Kind == kind {
			n++
		}
	}
	return n
}

// runsPending is the number of runs entries not yet acked.
func (e *env) runsPending() int64 {
	res, err := e.client.Do(context.Background(), e.client.B().Xpending().Key(e.cfg.Namespace+":runs").Group("run-workers").Build()).ToArray()
	if err != nil {
		e.t.Fatal(err)
	}
	n, _ := res[0].AsInt64()
	return n
}

func TestStartRun(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	body := map[string]any{"target_name": "checkout", "inputs": map[string]any{"qty": 3}}
	e.send("r1", "start_run", body)
	res := runResult(t, e.waitReplies(1)[0])
	if res.Events != valkeyjournal.EventsKey(e.cfg.Namespace, res.RunID) {
		t.Errorf("events %q", res.Events)
	}
	events := e.waitRun(res.RunID, 20*time.Second)
	if kind, code := last(t, events); kind != "run:complete" {
		t.Fatalf("run ended %s %s", kind, code)
	}
	if events[0].Kind != "run:submitted" || count(events, "run:start") != 1 {
		t.Errorf("events %v", events)
	}
	// The same message again: the same reply, no second run.
	e.send("r1", "start_run", body)
	got := e.waitReplies(2)
	if string(got[1].Result) != string(got[0].Result) {
		t.Errorf("duplicate reply %s, want %s", got[1].Result, got[0].Result)
	}
	testwait.Eventually(t, 10*time.Second, "nothing pending on the runs stream", func() bool { return e.runsPending() == 0 })
	n, err := e.client.Do(context.Background(), e.client.B().Xlen().Key(e.cfg.Namespace+":runs").Build()).AsInt64()
	if err != nil || n != 1 {
		t.Errorf("%d runs entries (%v), want 1", n, err)
	}
	// Unknown targets and bad inputs are refused before anything is submitted.
	e.send("r2", "start_run", map[string]any{"target_name": "nope"})
	e.send("r3", "start_run", map[string]any{"target_name": "checkout", "inputs": []int{1}})
	// A run id that names a run another message submitted is refused.
	e.send("r4", "start_run", map[string]any{"target_name": "checkout", "run_id": res.RunID})
	got = e.waitReplies(5)
	for _, r := range got[2:] {
		wantReply(t, r, messages.StatusRefused, messages.InvalidOverrides)
	}
}

// saveRecorded imports the recorded checkout case into st.
func saveRecorded(t *testing.T, st store.Store) string {
	t.Helper()
	return saveSample(t, st, "checkout-recorded.json")
}

func TestRunCaseFromBundle(t *testing.T) {
	t.Parallel()
	st := memstore.New(memstore.Options{})
	hash := saveRecorded(t, st)
	e := setup(t, st, nil)
	e.send("c1", "run_case", map[string]any{"target_name": "checkout",
		"source": map[string]any{"bundle": map[string]any{"fixture_hash": hash}}, "options": map[string]any{"replay_only": true}})
	e.send("c2", "run_case", map[string]any{"target_name": "checkout",
		"source": map[string]any{"bundle": map[string]any{"fixture_hash": zeroHash}}})
	e.send("c3", "run_case", map[string]any{"target_name": "checkout",
		"source": map[string]any{"bundle": map[string]any{"fixture_hash": hash}}, "fixture_store": "file:///elsewhere"})
	got := map[string]messages.RunResult{}
	for _, r := range e.waitReplies(3) {
		got[r.MessageID] = runResult(t, r)
	}
	events := e.waitRun(got["c1"].RunID, 20*time.Second)
	if kind, code := last(t, events); kind != "run:complete" || count(events, "case:outcome") != 1 {
		t.Fatalf("c1 ended %s %s: %v", kind, code, events)
	}
	for id, want := range map[string]messages.Code{"c2": messages.BundleMissing, "c3": messages.BindingMismatch} {
		events := e.waitRun(got[id].RunID, 20*time.Second)
		if kind, code := last(t, events); kind != "run:error" || code != want || count(events, "case:outcome") != 1 {
			t.Errorf("%s ended %s %s, want run:error %s: %v", id, kind, code, want, events)
		}
	}
	testwait.Eventually(t, 10*time.Second, "nothing pending on the runs stream", func() bool { return e.runsPending() == 0 })
}

func TestRunCaseNoStore(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	e.send("n1", "run_case", map[string]any{"target_name": "checkout",
		"source": map[string]any{"bundle": map[string]any{"fixture_hash": zeroHash}}})
	res := runResult(t, e.waitReplies(1)[0])
	if kind, code := last(t, e.waitRun(res.RunID, 20*time.Second)); kind != "run:error" || code != messages.NoFixtureStore {
		t.Errorf("ended %s %s, want run:error no_fixture_store", kind, code)
	}
}

func TestRunCaseFromJournal(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	src := e.record("checkout")
	m, err := e.journalOf().Meta(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	// Forked after its last event: every call is recorded, so a
	// replay-only run completes.
	e.send("j1", "run_case", map[string]any{"target_name": "checkout",
		"source":  map[string]any{"journal": map[string]any{"run_id": src, "fork_after_seq": m.LastSeq}},
		"options": map[string]any{"replay_only": true}})
	e.send("j2", "run_case", map[string]any{"target_name": "checkout",
		"source": map[string]any{"journal": map[string]any{"run_id": "run_gone", "fork_after_seq": nil}}})
	e.send("j3", "run_case", map[string]any{"target_name": "checkout",
		"source": map[string]any{"journal": map[string]any{"run_id": src, "fork_after_seq": nil, "expected_hash": zeroHash}}})
	e.send("j4", "run_case", map[string]any{"target_name": "checkout",
		"source": map[string]any{"journal": map[string]any{"run_id": src}, "bundle": map[string]any{"fixture_hash": zeroHash}}})
	got := map[string]messages.Reply{}
	for _, r := range e.waitReplies(4) {
		got[r.MessageID] = r
	}
	wantReply(t, got["j4"], messages.StatusRefused, messages.InvalidOverrides)
	events := e.waitRun(runResult(t, got["j1"]).RunID, 20*time.Second)
	if kind, code := last(t, events); kind != "run:complete" || count(events, "case:outcome") != 1 {
		t.Errorf("j1 ended %s %s: %v", kind, code, events)
	}
	for id, want := range map[string]messages.Code{"j2": messages.WhatifSourceMissing, "j3": messages.WhatifSourceChanged} {
		events := e.waitRun(runResult(t, got[id]).RunID, 20*time.Second)
		if kind, code := last(t, events); kind != "run:error" || code != want {
			t.Errorf("%s ended %s %s, want run:error %s", id, kind, code, want)
		}
	}
}

// A run whose worker died mid-run (its lease still held, its runs entry
// pending to the dead consumer) is reclaimed once idle and resumed from its
// journal by another worker once the lease lapsed.
func TestRunResumedAfterWorkerDied(t *testing.T) {
	t.Parallel()
	lease := 500 * time.Millisecond
	e := setup(t, nil, func(c *worker.Config) { c.RunLease = lease; c.ConsumerName = "dead" })
	// The dead worker submits a slow run and starts executing it.
	e.send("k1", "start_run", map[string]any{"target_name": "checkout", "inputs": map[string]any{"delay_ms": 3000}})
	res := runResult(t, e.waitReplies(1)[0])
	j := e.journalOf()
	testwait.Eventually(t, 10*time.Second, "the run's run:start event", func() bool {
		events, _, err := j.Events(context.Background(), res.RunID)
		return err == nil && count(events, "run:start") == 1
	})
	// Kill it: cancel its work without releasing anything (Stop with an
	// expired context cancels in-flight work at once).
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e.w.Stop(ctx)
	// Take the lease as the dead process would still hold it.
	m, err := j.Meta(context.Background(), res.RunID)
	if err != nil || m.Status.Terminal() {
		t.Fatalf("meta %+v: %v", m, err)
	}
	if m.LeaseOwner == "" {
		if _, err := j.Acquire(context.Background(), journal.AcquireParams{RunID: res.RunID, Owner: "dead/zombie", TTL: lease}); err != nil {
			t.Fatal(err)
		}
	}
	e.cfg.ConsumerName = "alive"
	e.start(nil)
	events := e.waitRun(res.RunID, 30*time.Second)
	if kind, code := last(t, events); kind != "run:complete" {
		t.Fatalf("ended %s %s", kind, code)
	}
	if n := count(events, "run:start"); n != 1 {
		t.Errorf("%d run:start events, want 1 (resumed, not restarted)", n)
	}
	testwait.Eventually(t, 10*time.Second, "nothing pending on the runs stream", func() bool { return e.runsPending() == 0 })
}

// setupScripted is setup with a model client registered as "scripted" and
// named by PYRULA_LLM_REF: it answers every call "done" with usage 10 in,
// 2 out, and counts the calls it answered.
func setupScripted(t *testing.T, st store.Store) (*env, *atomic.Int64) {
	t.Helper()
	calls := new(atomic.Int64)
	answer := flow.ModelClientFunc(func(ctx context.Context, req flow.ModelRequest) (flow.ModelResponse, error) {
		calls.Add(1)
		return flow.ModelResponse{Role: "assistant", Content: []flow.Block{flow.TextBlock("done")},
			Usage: &flow.Usage{InputTokens: 10, OutputTokens: 2}}, nil
	})
	e := setupRegistered(t, st, func(cfg *worker.Config) { cfg.LLMRef = "scripted" }, func(reg *flow.Registry) error {
		return reg.RegisterModelClient("scripted", answer)
	})
	return e, calls
}

// TestRunCaseLLMRef checks llm_ref: a client the binary registered answers
// the live model calls of a case run (named by the message, else by
// PYRULA_LLM_REF), the case:outcome names it, and a name that names no
// client, or model options on a workflow, are refused before anything is
// submitted.
func TestRunCaseLLMRef(t *testing.T) {
	t.Parallel()
	st := memstore.New(memstore.Options{})
	hash := saveSample(t, st, "support-agent-recorded.json")
	e, calls := setupScripted(t, st)
	source := map[string]any{"bundle": map[string]any{"fixture_hash": hash}}
	options := map[string]any{"model": "local-support-2", "from_start": true, "allow_write": []string{"tool:refund"}}
	e.send("m1", "run_case", map[string]any{"target_name": "support_agent", "source": source, "options": options})
	e.send("m2", "run_case", map[string]any{"target_name": "support_agent", "source": source,
		"options": map[string]any{"model": "local-support-2", "llm_ref": "nope"}})
	e.send("m3", "run_case", map[string]any{"target_name": "checkout", "source": source, "options": map[string]any{"model": "x"}})
	e.send("m4", "start_run", map[string]any{"target_name": "support_agent", "llm_ref": "anthropic"})
	// A replay-only case run sends no model call: naming a built-in
	// client needs no key.
	e.send("m5", "run_case", map[string]any{"target_name": "support_agent", "source": source,
		"options": map[string]any{"replay_only": true, "llm_ref": "anthropic"}})
	replies := map[string]messages.Reply{}
	for _, r := range e.waitReplies(5) {
		replies[r.MessageID] = r
	}
	m5 := e.waitRun(runResult(t, replies["m5"]).RunID, 20*time.Second)
	if kind, code := last(t, m5); kind != "run:complete" {
		t.Errorf("m5 (replay-only, llm_ref anthropic, no key) ended %s %s", kind, code)
	}
	wantReply(t, replies["m2"], messages.StatusRefused, messages.InvalidOverrides)
	if !strings.Contains(replies["m2"].Message, `"nope" names no model client (have anthropic, openai, scripted)`) {
		t.Errorf("m2: %s", replies["m2"].Message)
	}
	wantReply(t, replies["m3"], messages.StatusRefused, messages.InvalidOverrides)
	wantReply(t, replies["m4"], messages.StatusRefused, messages.InvalidOverrides)
	if !strings.Contains(replies["m4"].Message, "ANTHROPIC_API_KEY") {
		t.Errorf("m4: %s", replies["m4"].Message)
	}
	events := e.waitRun(runResult(t, replies["m1"]).RunID, 20*time.Second)
	if kind, code := last(t, events); kind != "run:complete" {
		t.Fatalf("m1 ended %s %s", kind, code)
	}
	var outcome struct {
		LLMRef    *string `json:"llm_ref"`
		LiveCalls int     `json:"live_calls"`
	}
	for _, ev := range events {
		if ev.Kind == "case:outcome" {
			raw, _ := json.Marshal(ev.Extra)
			_ = json.Unmarshal(raw, &outcome)
		}
	}
	if outcome.LLMRef == nil || *outcome.LLMRef != "scripted" || outcome.LiveCalls == 0 || calls.Load() == 0 {
		t.Errorf("case:outcome llm_ref %v, %d live calls; the client answered %d", outcome.LLMRef, outcome.LiveCalls, calls.Load())
	}
}
