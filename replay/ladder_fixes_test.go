package replay_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/examples"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/replay"
)

// checkCounts asserts what the outcome's counts count: provenance counts
// the call lines by provenance, and live_calls the call lines that are
// live or changed and not pure (the calls that counted against
// --live-budget).
func checkCounts(t *testing.T, rep replay.Report) {
	t.Helper()
	o := rep.Outcome
	byProv := map[string]int{}
	live := 0
	for _, c := range rep.Calls {
		byProv[c.Provenance]++
		if (c.Provenance == replay.ProvLive || c.Provenance == replay.ProvChanged) && c.Effect != string(flow.Pure) {
			live++
		}
	}
	for _, p := range []string{replay.ProvReused, replay.ProvSimulated, replay.ProvLive, replay.ProvChanged} {
		if o.Provenance[p] != byProv[p] {
			t.Errorf("provenance %v, the call lines have %v", o.Provenance, byProv)
			break
		}
	}
	if o.LiveCalls != live {
		t.Errorf("live_calls %d, the call lines have %d non-pure live or changed calls", o.LiveCalls, live)
	}
	if len(o.ChangedCalls) != byProv[replay.ProvChanged] {
		t.Errorf("changed_calls %v, %d changed call lines", o.ChangedCalls, byProv[replay.ProvChanged])
	}
}

// TestFromStartModelIsChanged: with --from-start and --model every model
// call's input differs from the recording, so each runs live as changed;
// none is reused with the old model's answer. Without --model the same
// case reuses them under their recorded fingerprints.
func TestFromStartModelIsChanged(t *testing.T) {
	rec := record(t, examples.SupportAgent, nil)
	b := rec.bundleAt(rec.seqAfter(t, "model:0"))
	recorded := map[string]string{}
	for _, r := range b.Results {
		recorded[r.Kind+":"+r.Key] = r.Fingerprint
	}

	rep, _ := runCase(t, b, replay.Options{FromStart: true, Model: "local-support-2"})
	if rep.Outcome.Status != host.StatusComplete {
		t.Fatalf("outcome %+v", rep.Outcome)
	}
	models := 0
	for _, c := range rep.Calls {
		if c.Kind != string(host.KindModel) {
			continue
		}
		models++
		if c.Provenance != replay.ProvChanged || c.Fingerprint == recorded["model:"+c.Key] {
			t.Errorf("from start, --model: %s is %s with fingerprint %s (recorded %s)", c.Key, c.Provenance, c.Fingerprint, recorded["model:"+c.Key])
		}
	}
	if models == 0 || rep.Outcome.LiveCalls < models {
		t.Fatalf("%d model calls, outcome %+v", models, rep.Outcome)
	}
	checkCounts(t, rep)

	// The same without --model: every model call is reused as recorded.
	rep, _ = runCase(t, b, replay.Options{FromStart: true})
	for _, c := range rep.Calls {
		if c.Kind == string(host.KindModel) && (c.Provenance != replay.ProvReused || c.Fingerprint != recorded["model:"+c.Key]) {
			t.Errorf("from start: %s is %s with fingerprint %s (recorded %s)", c.Key, c.Provenance, c.Fingerprint, recorded["model:"+c.Key])
		}
	}
	if rep.Outcome.Status != host.StatusComplete || rep.Outcome.LiveCalls != 0 {
		t.Fatalf("outcome %+v", rep.Outcome)
	}
	checkCounts(t, rep)

	// Not from the start: the prefix model call still verifies under
	// --model (only model and system differ), the later ones are changed.
	rep, _ = runCase(t, b, replay.Options{Model: "local-support-2"})
	if rep.Outcome.Status != host.StatusComplete || rep.Outcome.PrefixCalls != 1 {
		t.Fatalf("outcome %+v", rep.Outcome)
	}
	for _, c := range rep.Calls {
		if c.Kind == string(host.KindModel) && c.Provenance != replay.ProvChanged {
			t.Errorf("post-fork %s is %s under --model", c.Key, c.Provenance)
		}
	}
	checkCounts(t, rep)
}

// checkoutStatus is the status of checkout's result (needs Values).
func checkoutStatus(t *testing.T, rep replay.Report) string {
	t.Helper()
	var res examples.CheckoutResult
	if err := json.Unmarshal(rep.Outcome.Result, &res); err != nil {
		t.Fatalf("result %s: %v (outcome %+v)", rep.Outcome.Result, err, rep.Outcome)
	}
	return res.Status
}

func provOf(rep replay.Report, id string) string {
	for _, c := range rep.Calls {
		if c.Kind+":"+c.Key == id {
			return c.Provenance
		}
	}
	return ""
}

// TestSelfSignalReachesReceive: checkout sends itself the "approval"
// signal and then receives it. When the case run sends it live with
// another payload, the receive gets that payload (changed), not the
// recorded one; when the send is reused, so is the receive.
func TestSelfSignalReachesReceive(t *testing.T) {
	rec := record(t, examples.Checkout, nil)
	rejected := map[string]json.RawMessage{"approval": json.RawMessage(`"rejected"`)}
	cases := []struct {
		name string
		b    func() replay.Options
		fork string
	}{
		{name: "fork before the send", fork: "random:0",
			b: func() replay.Options { return replay.Options{Inputs: rejected} }},
		{name: "from start", fork: "random:0",
			b: func() replay.Options {
				return replay.Options{Inputs: rejected, FromStart: true}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := rec.bundleAt(rec.seqAfter(t, tc.fork))
			opts := tc.b()
			opts.Values = true
			opts.AllowWrite = []string{"step:sigsend:0"}
			rep, log := runCase(t, b, opts)
			if rep.Outcome.Status != host.StatusComplete {
				t.Fatalf("outcome %+v", rep.Outcome)
			}
			if s := checkoutStatus(t, rep); s != "rejected" {
				t.Fatalf("checkout status %q, want rejected; calls %+v", s, rep.Calls)
			}
			if p := provOf(rep, "step:sigsend:0"); p != replay.ProvChanged {
				t.Errorf("sigsend:0 is %q", p)
			}
			if p := provOf(rep, "signal:approval:0"); p != replay.ProvChanged {
				t.Errorf("signal:approval:0 is %q, want changed", p)
			}
			for _, r := range log.Results("case") {
				if r.Kind == "signal" && string(r.Result) != `{"payload":{"decision":"rejected"}}` {
					t.Errorf("the receive got %s", r.Result)
				}
			}
			checkCounts(t, rep)
		})
	}

	// The send is reused (same payload, sent to the case run instead of
	// the recorded run): the recorded receive is consistent and reused.
	b := rec.bundleAt(rec.seqAfter(t, "random:0"))
	rep, _ := runCase(t, b, replay.Options{Values: true, AllowWrite: []string{"step:child:0"}})
	if rep.Outcome.Status != host.StatusComplete || checkoutStatus(t, rep) != "confirmed" ||
		provOf(rep, "step:sigsend:0") != replay.ProvReused || provOf(rep, "signal:approval:0") != replay.ProvReused {
		t.Fatalf("reused send: outcome %+v calls %+v", rep.Outcome, rep.Calls)
	}
	checkCounts(t, rep)

	// A supplied answer still wins over the case run's own signal.
	rep, _ = runCase(t, b, replay.Options{Values: true, Inputs: rejected, AllowWrite: []string{"step:sigsend:0", "step:child:0"},
		Supply: replay.Supply{Calls: map[string]json.RawMessage{"signal:approval:0": json.RawMessage(`{"payload":{"decision":"approved"}}`)}}})
	if rep.Outcome.Status != host.StatusComplete || checkoutStatus(t, rep) != "confirmed" || provOf(rep, "signal:approval:0") != replay.ProvSimulated {
		t.Fatalf("supplied: outcome %+v calls %+v", rep.Outcome, rep.Calls)
	}
	checkCounts(t, rep)

	// The receive answered from the run's own send counts against the
	// live budget like any live read: the send alone fits a budget of 1.
	rep, _ = runCase(t, b, replay.Options{Inputs: rejected, AllowWrite: []string{"step:sigsend:0"}, LiveBudget: intp(1)})
	if rep.Outcome.Code != "live_budget_exceeded" || string(rep.Outcome.StopKey) != `"signal:approval:0"` || rep.Outcome.LiveCalls != 1 {
		t.Fatalf("budget 1: outcome %+v", rep.Outcome)
	}
	checkCounts(t, rep)
}

// TestCountsOnStoppedRuns: the relation between live_calls and the call
// lines holds on runs that stop, too.
func TestCountsOnStoppedRuns(t *testing.T) {
	rec := record(t, examples.SupportAgent, nil)
	b := rec.bundleAt(rec.seqAfter(t, "model:0"))
	prices := replay.Prices{"local-support-1b": {InputPerMTok: 1000, OutputPerMTok: 2000}}
	for _, ceiling := range []float64{0, 5, 11, 120} {
		rep, _ := runCase(t, b, replay.Options{Model: "local-support-1b", MaxCostUSD: &ceiling, Prices: prices, AllowWrite: []string{"tool:refund"}})
		checkCounts(t, rep)
	}
	for _, budget := range []int{0, 1, 2, 3} {
		rep, _ := runCase(t, b, replay.Options{Model: "local-support-1b", LiveBudget: intp(budget), AllowWrite: []string{"tool:refund"}})
		checkCounts(t, rep)
		if rep.Outcome.LiveCalls > budget {
			t.Errorf("budget %d: %d live calls", budget, rep.Outcome.LiveCalls)
		}
	}
}

// TestCountsOnCancelledRun: a live read in flight when the case run is
// cancelled has no call line, and live_calls does not count it either.
func TestCountsOnCancelledRun(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	reg := flow.NewRegistry()
	err := flow.RegisterWorkflow(reg, flow.Workflow[struct{}, int]{
		Name: "cancelled", CodeVersion: "v1", Defaults: struct{}{},
		Run: func(ctx context.Context, _ struct{}) (int, error) {
			a, err := flow.Step(ctx, "a", stepIn{1}, func(_ context.Context, in stepIn) (int, error) { return in.N, nil }, flow.WithEffect(flow.Read))
			if err != nil {
				return 0, err
			}
			return flow.Step(ctx, "b", stepIn{a}, func(ctx context.Context, in stepIn) (int, error) {
				cancel(flow.ErrRunCancelled)
				return 0, context.Cause(ctx)
			}, flow.WithEffect(flow.Read))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	fork := int64(1)
	b := &bundle.Bundle{
		Manifest: bundle.Manifest{Format: 1, Kind: bundle.KindWorkflow, TargetName: "cancelled", CodeVersion: "v1",
			ForkAfterSeq: &fork, Inputs: json.RawMessage(`{}`), Source: bundle.Source{RunID: "rec"}},
		History: []json.RawMessage{json.RawMessage(`{"kind":"run:start","run_seq":1,"at":"2026-01-01T00:00:00.000Z","inputs":{},"code_version":"v1"}`)},
	}
	rep, err := replay.Run(ctx, replay.Params{Bundle: b, RunID: "case", Registry: reg, Log: host.NewMemLog(), FixtureHash: "h"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Outcome.Status != host.StatusCancelled || len(rep.Calls) != 1 || rep.Calls[0].Provenance != replay.ProvLive {
		t.Fatalf("outcome %+v calls %+v", rep.Outcome, rep.Calls)
	}
	checkCounts(t, rep)
}
