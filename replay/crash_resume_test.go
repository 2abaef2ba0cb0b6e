package replay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow/examples"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/replay"
	"github.com/pyrula/caseworker/runevent"
)

// errCrashed is what a crashing log answers once its run is cut off.
var errCrashed = errors.New("the worker died")

// crashingLog is a MemLog that accepts the case run's appends until the
// run's journal holds at least after events, then fails every write: the
// journal is left as a worker killed at that point leaves it.
type crashingLog struct {
	*host.MemLog
	runID string
	after int
}

func (l *crashingLog) full(runID string) bool {
	return runID == l.runID && len(l.MemLog.Events(runID)) >= l.after
}

func (l *crashingLog) Append(ctx context.Context, runID string, b host.Batch) (int64, error) {
	if l.full(runID) {
		return 0, errCrashed
	}
	return l.MemLog.Append(ctx, runID, b)
}

func (l *crashingLog) Finish(ctx context.Context, runID string, ev host.Event) (int64, error) {
	if l.full(runID) {
		return 0, errCrashed
	}
	return l.MemLog.Finish(ctx, runID, ev)
}

// outcomeShape is what must not depend on where a case run was cut off.
func outcomeShape(o replay.Outcome) string {
	o.RunID, o.LastSeq = "", 0
	raw, _ := json.Marshal(o)
	return string(raw)
}

// TestResumedCaseRunEndsAsUninterrupted cuts a case run off after each of
// its journal's events in turn and resumes it on the same journal, as a
// worker that reclaims the run of one that died does: every resumed run
// ends exactly as the uninterrupted run of the same case (the same
// outcome, provenance counts, live calls, changed calls and call lines),
// with one call:done per call, one case:outcome and one terminal event. Its
// cost is the same, or more when a model call was in flight at the cut
// (that call counts at its worst case).
func TestResumedCaseRunEndsAsUninterrupted(t *testing.T) {
	checkout := record(t, examples.Checkout, nil)
	agent := record(t, examples.SupportAgent, nil)
	cases := map[string]struct {
		b    *bundle.Bundle
		opts replay.Options
	}{
		"checkout, self signal changed": {checkout.bundleAt(checkout.seqAfter(t, "step:quote:0")), replay.Options{
			Inputs: map[string]json.RawMessage{"approval": json.RawMessage(`"rejected"`)}, AllowWrite: []string{"step:sigsend:0"}}},
		"checkout, replay-only":     {checkout.bundleAt(checkout.seqAfter(t, "step:quote:0")), replay.Options{ReplayOnly: true}},
		"checkout, from start":      {checkout.bundleAt(checkout.seqAfter(t, "step:reserve:0")), replay.Options{FromStart: true, Inputs: map[string]json.RawMessage{"qty": json.RawMessage(`5`)}, AllowWrite: []string{"step:reserve", "step:child:0"}}},
		"agent, another model":      {agent.bundleAt(agent.seqAfter(t, "model:0")), replay.Options{Model: "local-support-2", AllowWrite: []string{"tool:refund"}, Prices: replay.Prices{"local-support-2": {InputPerMTok: 1, OutputPerMTok: 2}}, MaxCostUSD: new(1.0)}},
		"agent, values, from start": {agent.bundleAt(agent.seqAfter(t, "model:1")), replay.Options{FromStart: true, Values: true}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ref, refLog := runCase(t, tc.b, tc.opts)
			n := len(refLog.Events("case"))
			for after := 1; after < n; after++ {
				mem := host.NewMemLog()
				crash := &crashingLog{MemLog: mem, runID: "case", after: after}
				p := replay.Params{Bundle: tc.b, RunID: "case", Registry: newRegistry(t), Log: crash, FixtureHash: "h", Options: tc.opts}
				if _, err := replay.Run(context.Background(), p); err == nil {
					// The cut came after the run's last write it needed.
					if len(mem.Events("case")) == n {
						continue
					}
					t.Fatalf("cut after %d of %d events: the run ended with no error", after, n)
				}
				lost := modelCallInFlight(mem.Events("case"))
				p.Log, p.Registry = mem, newRegistry(t)
				got, err := replay.Run(context.Background(), p)
				if err != nil {
					t.Fatalf("cut after %d: resume: %v", after, err)
				}
				// A model call in flight at the cut was made (and may have
				// been billed) and is made again: it counts at its worst
				// case on top of what the run spent.
				gotCost, refCost := got.Outcome.CostUSD, ref.Outcome.CostUSD
				if lost && gotCost <= refCost || !lost && gotCost != refCost {
					t.Errorf("cut after %d of %d events (a model call in flight: %v): resumed cost %v, uninterrupted %v", after, n, lost, gotCost, refCost)
				}
				got.Outcome.CostUSD, ref.Outcome.CostUSD = 0, 0
				a, b := outcomeShape(got.Outcome), outcomeShape(ref.Outcome)
				ref.Outcome.CostUSD = refCost
				if a != b {
					t.Errorf("cut after %d of %d events: resumed outcome\n%s\nuninterrupted\n%s", after, n, a, b)
				}
				if !reflect.DeepEqual(got.Calls, ref.Calls) {
					t.Errorf("cut after %d: call lines %+v, want %+v", after, got.Calls, ref.Calls)
				}
				checkJournal(t, fmt.Sprintf("cut after %d", after), mem.Events("case"), got.Outcome.LastSeq)
			}
		})
	}
}

// modelCallInFlight says whether events hold a model call's call:start
// without its call:done.
func modelCallInFlight(events []host.Event) bool {
	open := map[string]bool{}
	for _, ev := range events {
		if ev.Call == nil || ev.Call.Kind != host.KindModel {
			continue
		}
		switch ev.Kind {
		case runevent.CallStart:
			open[ev.Call.ID()] = true
		case runevent.CallDone:
			delete(open, ev.Call.ID())
		}
	}
	return len(open) > 0
}

// checkJournal checks a finished case run's journal: one call:done per
// call, as many case:call events as call:done events after the prefix is
// not checked here; one case:outcome, one terminal event, last.
func checkJournal(t *testing.T, what string, events []host.Event, lastSeq int64) {
	t.Helper()
	done := map[string]int{}
	var outcomes, terminals int
	for _, ev := range events {
		switch {
		case ev.Kind == runevent.CallDone:
			done[ev.Call.ID()]++
		case ev.Kind == runevent.CaseOutcome:
			outcomes++
		case ev.Kind.Terminal():
			terminals++
		}
	}
	for id, n := range done {
		if n != 1 {
			t.Errorf("%s: %s completed %d times", what, id, n)
		}
	}
	if outcomes != 1 || terminals != 1 || !events[len(events)-1].Kind.Terminal() {
		t.Errorf("%s: %d case:outcome and %d terminal events", what, outcomes, terminals)
	}
	if last := events[len(events)-1].RunSeq; last != lastSeq {
		t.Errorf("%s: the outcome says last_seq %d, the journal ends at %d", what, lastSeq, last)
	}
}

// TestLostCallCountsAfterASecondCut: a case run cut off with a model call
// in flight, resumed (the call made again) and cut off once more after
// that call's answer reached the journal, then resumed again: its cost
// still counts the request lost at the first cut at its worst case (the
// resumption journals it as a case:charge), so it is at least the cost of
// the run cut once there, and above the uninterrupted run's.
func TestLostCallCountsAfterASecondCut(t *testing.T) {
	agent := record(t, examples.SupportAgent, nil)
	b := agent.bundleAt(agent.seqAfter(t, "model:0"))
	opts := replay.Options{Model: "local-support-2", AllowWrite: []string{"tool:refund"},
		Prices: replay.Prices{"local-support-2": {InputPerMTok: 1, OutputPerMTok: 2}}, MaxCostUSD: new(1.0)}
	ref, refLog := runCase(t, b, opts)
	n := len(refLog.Events("case"))
	cuts := 0
	for first := 1; first < n; first++ {
		mem := host.NewMemLog()
		p := replay.Params{Bundle: b, RunID: "case", Registry: newRegistry(t), Log: &crashingLog{MemLog: mem, runID: "case", after: first}, FixtureHash: "h", Options: opts}
		if _, err := replay.Run(context.Background(), p); err == nil || !modelCallInFlight(mem.Events("case")) {
			continue
		}
		// The run cut once here, for its cost.
		once := host.NewMemLog()
		for _, ev := range mem.Events("case") {
			if _, err := once.Append(context.Background(), "case", host.Batch{Events: []host.Event{ev}}); err != nil {
				t.Fatal(err)
			}
		}
		p1 := p
		p1.Log, p1.Registry = once, newRegistry(t)
		cutOnce, err := replay.Run(context.Background(), p1)
		if err != nil {
			t.Fatalf("cut after %d: resume: %v", first, err)
		}
		// The second cut: once the call made again is done.
		open := inFlightCall(mem.Events("case"))
		p.Log, p.Registry = &cutAfterDone{MemLog: mem, call: open}, newRegistry(t)
		if _, err := replay.Run(context.Background(), p); err == nil || !callDone(mem.Events("case"), open) {
			t.Fatalf("cut after %d with %s in flight, resumed: %v, want a cut once %s is done", first, open, err, open)
		}
		p.Log, p.Registry = mem, newRegistry(t)
		got, err := replay.Run(context.Background(), p)
		if err != nil {
			t.Fatalf("cut after %d and after %s was done: resume: %v", first, open, err)
		}
		cuts++
		if got.Outcome.CostUSD < cutOnce.Outcome.CostUSD || got.Outcome.CostUSD <= ref.Outcome.CostUSD {
			t.Errorf("cut after %d with %s in flight, then after it was done: cost %v, cut once %v, uninterrupted %v",
				first, open, got.Outcome.CostUSD, cutOnce.Outcome.CostUSD, ref.Outcome.CostUSD)
		}
		checkJournal(t, fmt.Sprintf("cut after %d, then after %s", first, open), mem.Events("case"), got.Outcome.LastSeq)
	}
	if cuts == 0 {
		t.Fatal("no cut left a model call in flight that was then made again")
	}
}

// cutAfterDone is a MemLog that fails every write once call's call:done
// is in it.
type cutAfterDone struct {
	*host.MemLog
	call string
}

func (l *cutAfterDone) Append(ctx context.Context, runID string, b host.Batch) (int64, error) {
	if callDone(l.MemLog.Events(runID), l.call) {
		return 0, errCrashed
	}
	return l.MemLog.Append(ctx, runID, b)
}

func (l *cutAfterDone) Finish(ctx context.Context, runID string, ev host.Event) (int64, error) {
	if callDone(l.MemLog.Events(runID), l.call) {
		return 0, errCrashed
	}
	return l.MemLog.Finish(ctx, runID, ev)
}

// inFlightCall is the id of the model call events started and did not
// finish.
func inFlightCall(events []host.Event) string {
	open := ""
	for _, ev := range events {
		if ev.Call == nil || ev.Call.Kind != host.KindModel {
			continue
		}
		switch ev.Kind {
		case runevent.CallStart:
			open = ev.Call.ID()
		case runevent.CallDone:
			if ev.Call.ID() == open {
				open = ""
			}
		}
	}
	return open
}

// callDone says whether events hold call id's call:done.
func callDone(events []host.Event, id string) bool {
	for _, ev := range events {
		if ev.Kind == runevent.CallDone && ev.Call != nil && ev.Call.ID() == id {
			return true
		}
	}
	return false
}
