package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/internal/testwait"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/memvalkey"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/memstore"
	"github.com/pyrula/caseworker/worker"
	"github.com/pyrula/caseworker/worker/client"
)

// The conformance suite: the same worker scenarios against real Valkey
// (Redis 7 at PYRULA_TEST_VALKEY_URL), against a real Valkey Cluster (three
// Redis 7 masters at PYRULA_TEST_VALKEY_CLUSTER_URL, where every command and
// script must keep its keys in one slot) and against the embedded in-memory
// server of `worker demo` (memvalkey), all over a real
// connection, so that "the in-memory queue behaves like the Valkey one" and
// "the worker runs on a cluster" are tested rather than claimed.

// backend connects one test to a server.
type backend struct {
	name    string
	connect func(t *testing.T) valkey.Client
}

var backends = []backend{
	{"valkey", func(t *testing.T) valkey.Client {
		t.Helper()
		return testenv.ValkeyClient(t)
	}},
	{"cluster", func(t *testing.T) valkey.Client {
		t.Helper()
		return testenv.ValkeyClusterClient(t)
	}},
	{"embedded", func(t *testing.T) valkey.Client {
		t.Helper()
		s, err := memvalkey.Start()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		c, err := s.NewClient()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close) // runs before s.Close
		return c
	}},
}

// newEnv starts a worker on the scenario's backend.
type newEnv func(t *testing.T, st store.Store, mod func(*worker.Config)) *env

var scenarios = []struct {
	name string
	run  func(t *testing.T, setup newEnv)
}{
	{"DeleteCaseBundle", confDelete},
	{"SaveCaseAndDuplicates", confSave},
	{"Refusals", confRefusals},
	{"StartRun", confStartRun},
	{"RunCaseFromBundle", confRunCaseBundle},
	{"RunCaseFromJournal", confRunCaseJournal},
	{"TransientFailureRetried", confTransient},
	{"DeadLetter", confDeadLetter},
	{"RunResumedAfterWorkerDied", confResume},
	{"ClientRequestAndFollow", confClient},
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			for _, sc := range scenarios {
				t.Run(sc.name, func(t *testing.T) {
					t.Parallel()
					sc.run(t, func(t *testing.T, st store.Store, mod func(*worker.Config)) *env {
						t.Helper()
						return setupWith(t, b.connect(t), st, mod)
					})
				})
			}
		})
	}
}

// byID indexes replies by message id.
func byID(rs []messages.Reply) map[string]messages.Reply {
	out := map[string]messages.Reply{}
	for _, r := range rs {
		out[r.MessageID] = r
	}
	return out
}

func confDelete(t *testing.T, setup newEnv) {
	e := setup(t, memstore.New(memstore.Options{}), nil)
	e.send("d1", "delete_case_bundle", map[string]any{"fixture_hash": zeroHash})
	e.send("d2", "delete_case_bundle", map[string]any{"fixture_hash": "XYZ"})
	e.send("d3", "delete_case_bundle", map[string]any{"fixture_hash": zeroHash, "fixture_store": "file:///elsewhere"})
	got := byID(e.waitReplies(3))
	wantReply(t, got["d1"], messages.StatusOK, "")
	if string(got["d1"].Result) != `{"deleted":false}` {
		t.Errorf("d1 result %s", got["d1"].Result)
	}
	wantReply(t, got["d2"], messages.StatusRefused, messages.InvalidFixtureHash)
	wantReply(t, got["d3"], messages.StatusRefused, messages.BindingMismatch)
}

func confSave(t *testing.T, setup newEnv) {
	st := memstore.New(memstore.Options{})
	e := setup(t, st, nil)
	runID := e.record("checkout")
	body := map[string]any{"target_name": "checkout", "run_id": runID, "fork_after_seq": 4}
	e.send("s1", "save_case", body)
	first := e.waitReplies(1)[0]
	wantReply(t, first, messages.StatusOK, "")
	var res messages.SaveCaseResult
	if err := json.Unmarshal(first.Result, &res); err != nil || res.FixtureStore != "memory:" || len(res.FixtureHash) != 64 {
		t.Fatalf("result %s: %v", first.Result, err)
	}
	// One at a time: messages are handled concurrently, so replies to
	// messages sent together may come in any order.
	e.send("s1", "save_case", body) // a duplicate: the same reply
	e.waitReplies(2)
	e.send("s1", "save_case", map[string]any{"target_name": "checkout", "run_id": runID})
	e.waitReplies(3)
	e.send("s2", "save_case", map[string]any{"target_name": "checkout", "run_id": "run_nope"})
	got := e.waitReplies(4)
	if got[1].Status != messages.StatusOK || string(got[1].Result) != string(first.Result) {
		t.Errorf("duplicate reply %+v, want %+v", got[1], first)
	}
	wantReply(t, got[2], messages.StatusRefused, messages.InvalidOverrides)
	wantReply(t, got[3], messages.StatusRefused, messages.CaptureIncomplete)
	n := 0
	for _, err := range st.List(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("the store holds %d bundles, want 1", n)
	}
}

func confRefusals(t *testing.T, setup newEnv) {
	e := setup(t, nil, func(c *worker.Config) { c.MaxMessageBytes = 300 })
	e.sendRaw("not json")
	e.sendRaw(`{"type":"delete_case_bundle","body":{}}`)
	e.send("f3", "frobnicate", map[string]any{})
	e.send("f4", "save_case", map[string]any{"target_name": "checkout"})
	e.sendRaw(`{"message_id":"f5","type":"delete_case_bundle","body":{"fixture_hash":"` + strings.Repeat("a", 300) + `"}}`)
	e.send("f6", "delete_case_bundle", map[string]any{"fixture_hash": zeroHash})
	e.send("f7", "start_run", map[string]any{"target_name": "nope"})
	got := e.waitReplies(7)
	byEntry := 0
	for _, r := range got {
		if r.MessageID == "" && r.EntryID != "" {
			byEntry++
		}
		want := messages.InvalidOverrides
		if r.MessageID == "f6" {
			want = messages.NoFixtureStore
		}
		wantReply(t, r, messages.StatusRefused, want)
	}
	if byEntry != 3 {
		t.Errorf("%d refusals name their entry, want 3 (not JSON, no id, too large)", byEntry)
	}
}

func confStartRun(t *testing.T, setup newEnv) {
	e := setup(t, nil, nil)
	body := map[string]any{"target_name": "checkout", "inputs": map[string]any{"qty": 3}}
	e.send("r1", "start_run", body)
	res := runResult(t, e.waitReplies(1)[0])
	events := e.waitRun(res.RunID, 20*time.Second)
	if kind, code := last(t, events); kind != runevent.RunComplete {
		t.Fatalf("run ended %s %s", kind, code)
	}
	e.send("r1", "start_run", body)
	got := e.waitReplies(2)
	if string(got[1].Result) != string(got[0].Result) {
		t.Errorf("duplicate reply %s, want %s", got[1].Result, got[0].Result)
	}
	testwait.Eventually(t, 10*time.Second, "nothing pending on the runs stream", func() bool { return e.runsPending() == 0 })
	n, err := e.client.Do(context.Background(), e.client.B().Xlen().Key(e.cfg.Namespace+":runs").Build()).AsInt64()
	if err != nil || n != 1 {
		t.Errorf("%d runs entries (%v), want 1: a duplicate starts nothing", n, err)
	}
}

func confRunCaseBundle(t *testing.T, setup newEnv) {
	st := memstore.New(memstore.Options{})
	hash := saveRecorded(t, st)
	e := setup(t, st, nil)
	src := map[string]any{"bundle": map[string]any{"fixture_hash": hash}}
	e.send("c1", "run_case", map[string]any{"target_name": "checkout", "source": src, "options": map[string]any{"replay_only": true}})
	e.send("c2", "run_case", map[string]any{"target_name": "checkout", "source": src, "options": map[string]any{"inputs": map[string]any{"qty": 5}}})
	e.send("c3", "run_case", map[string]any{"target_name": "checkout",
		"source": map[string]any{"bundle": map[string]any{"fixture_hash": zeroHash}}})
	got := byID(e.waitReplies(3))
	want := map[string]struct {
		kind journal.Kind
		code messages.Code
	}{
		"c1": {runevent.RunComplete, ""},
		"c2": {runevent.RunError, messages.PrefixDiverged}, // the seed: --input only for inputs that keep the prefix
		"c3": {runevent.RunError, messages.BundleMissing},
	}
	for id, w := range want {
		events := e.waitRun(runResult(t, got[id]).RunID, 20*time.Second)
		if kind, code := last(t, events); kind != w.kind || code != w.code || count(events, runevent.CaseOutcome) != 1 {
			t.Errorf("%s ended %s %q, want %s %q with one case:outcome", id, kind, code, w.kind, w.code)
		}
	}
}

func confRunCaseJournal(t *testing.T, setup newEnv) {
	e := setup(t, nil, nil)
	src := e.record("checkout")
	m, err := e.journalOf().Meta(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	e.send("j1", "run_case", map[string]any{"target_name": "checkout",
		"source":  map[string]any{"journal": map[string]any{"run_id": src, "fork_after_seq": m.LastSeq}},
		"options": map[string]any{"replay_only": true}})
	e.send("j2", "run_case", map[string]any{"target_name": "checkout",
		"source": map[string]any{"journal": map[string]any{"run_id": "run_gone", "fork_after_seq": nil}}})
	e.send("j3", "run_case", map[string]any{"target_name": "checkout",
		"source": map[string]any{"journal": map[string]any{"run_id": src, "fork_after_seq": nil, "expected_hash": zeroHash}}})
	got := byID(e.waitReplies(3))
	want := map[string]struct {
		kind journal.Kind
		code messages.Code
	}{
		"j1": {runevent.RunComplete, ""},
		"j2": {runevent.RunError, messages.WhatifSourceMissing},
		"j3": {runevent.RunError, messages.WhatifSourceChanged},
	}
	for id, w := range want {
		events := e.waitRun(runResult(t, got[id]).RunID, 20*time.Second)
		if kind, code := last(t, events); kind != w.kind || code != w.code {
			t.Errorf("%s ended %s %q, want %s %q", id, kind, code, w.kind, w.code)
		}
	}
}

func confTransient(t *testing.T, setup newEnv) {
	st := &countingStore{Store: memstore.New(memstore.Options{})}
	st.fails.Store(2)
	e := setup(t, st, nil)
	e.send("t1", "delete_case_bundle", map[string]any{"fixture_hash": zeroHash})
	wantReply(t, e.waitReplies(1)[0], messages.StatusOK, "")
	if n := st.fails.Load(); n >= 0 {
		t.Errorf("%d injected failures left, want all used (the message was retried)", n+1)
	}
}

// confResume: a run whose worker died mid-run (lease held, runs entry
// pending to the dead consumer) is reclaimed (XCLAIM) and resumed from
// its journal by another worker once the lease lapsed.
func confResume(t *testing.T, setup newEnv) {
	lease := 500 * time.Millisecond
	e := setup(t, nil, func(c *worker.Config) { c.RunLease = lease; c.ConsumerName = "dead" })
	e.send("k1", "start_run", map[string]any{"target_name": "checkout", "inputs": map[string]any{"delay_ms": 2000}})
	res := runResult(t, e.waitReplies(1)[0])
	j := e.journalOf()
	testwait.Eventually(t, 10*time.Second, "the run's run:start event", func() bool {
		events, _, err := j.Events(context.Background(), res.RunID)
		return err == nil && count(events, runevent.RunStart) == 1
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e.w.Stop(ctx) // cancels the run at once, releasing nothing
	if m, err := j.Meta(context.Background(), res.RunID); err != nil || m.Status.Terminal() {
		t.Fatalf("meta %+v: %v", m, err)
	} else if m.LeaseOwner == "" {
		if _, err := j.Acquire(context.Background(), journal.AcquireParams{RunID: res.RunID, Owner: "dead/zombie", TTL: lease}); err != nil {
			t.Fatal(err)
		}
	}
	e.cfg.ConsumerName = "alive"
	e.start(nil)
	events := e.waitRun(res.RunID, 30*time.Second)
	if kind, code := last(t, events); kind != runevent.RunComplete {
		t.Fatalf("ended %s %s", kind, code)
	}
	if n := count(events, runevent.RunStart); n != 1 {
		t.Errorf("%d run:start events, want 1 (resumed, not restarted)", n)
	}
	testwait.Eventually(t, 10*time.Second, "nothing pending on the runs stream", func() bool { return e.runsPending() == 0 })
}

func confDeadLetter(t *testing.T, setup newEnv) {
	st := &countingStore{Store: memstore.New(memstore.Options{})}
	st.fails.Store(1000)
	e := setup(t, st, nil) // MaxDeliveries 3, ClaimIdle 100 ms
	e.send("x1", "delete_case_bundle", map[string]any{"fixture_hash": zeroHash})
	r := e.waitReplies(1)[0]
	wantReply(t, r, messages.StatusError, messages.RuntimeError)
	if !strings.Contains(r.Message, "injected store outage") || !strings.Contains(r.Message, "after 3 deliveries") {
		t.Errorf("message %q lacks the deliveries or the last error", r.Message)
	}
	dead, err := e.client.Do(context.Background(), e.client.B().Xrange().Key(e.cfg.CaseStream+":dead").Start("-").End("+").Build()).AsXRange()
	if err != nil || len(dead) != 1 || dead[0].FieldValues["deliveries"] != "3" {
		t.Fatalf("dead letters %+v, %v", dead, err)
	}
}

// confClient drives the worker through the platform client: a request and
// its reply among others' replies, and a run followed to its end.
func confClient(t *testing.T, setup newEnv) {
	e := setup(t, nil, nil)
	cl, err := client.New(e.client, client.Options{Namespace: e.cfg.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Another message's reply on the same stream, before and after ours.
	e.send("other-1", "delete_case_bundle", map[string]any{"fixture_hash": zeroHash})
	e.waitReplies(1)
	sent, err := cl.Send(ctx, client.Message{Type: messages.StartRun, Body: json.RawMessage(`{"target_name":"checkout"}`)})
	if err != nil {
		t.Fatal(err)
	}
	e.send("other-2", "delete_case_bundle", map[string]any{"fixture_hash": zeroHash})
	r, err := cl.Reply(ctx, sent)
	if err != nil {
		t.Fatal(err)
	}
	if r.MessageID != sent.MessageID || !strings.HasPrefix(sent.MessageID, "msg_") {
		t.Fatalf("reply %+v to %+v", r, sent)
	}
	res, err := client.RunResult(r)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	end, err := cl.Follow(ctx, res.Events, func(ev journal.Event) error {
		seqs = append(seqs, ev.RunSeq)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if end.Status != journal.StatusComplete || end.Last.Kind != runevent.RunComplete {
		t.Fatalf("end %+v", end)
	}
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("run_seqs %v, want 1…n in order", seqs)
		}
	}
	// A refusal is a reply like any other.
	_, r, err = cl.Request(ctx, client.Message{MessageID: "bad", Type: messages.StartRun, Body: json.RawMessage(`{"target_name":"nope"}`)})
	if err != nil {
		t.Fatal(err)
	}
	wantReply(t, r, messages.StatusRefused, messages.InvalidOverrides)
	// A run whose keys are gone cannot be followed.
	if _, err := cl.Follow(ctx, e.cfg.Namespace+":{run_gone}:events", func(journal.Event) error { return nil }); err == nil || !strings.Contains(err.Error(), "not in Valkey") {
		t.Fatalf("follow of a missing run: %v", err)
	}
}
