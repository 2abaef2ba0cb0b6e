package replay_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/pyrula/caseworker/flow/examples"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/replay"
	"github.com/pyrula/caseworker/runevent"
)

// callLineLog is a MemLog that checks that every case:call event comes in
// the append of its call's call:done and result record, and fails the
// append of the line of failAt (a call id).
type callLineLog struct {
	*host.MemLog
	failAt       string
	lines, alone atomic.Int64
}

var errCallLine = errors.New("injected append failure")

func (l *callLineLog) Append(ctx context.Context, runID string, b host.Batch) (int64, error) {
	for i, ev := range b.Events {
		if ev.Kind != runevent.CaseCall {
			continue
		}
		l.lines.Add(1)
		if i == 0 || b.Events[i-1].Kind != runevent.CallDone || b.Events[i-1].Call == nil || ev.Call == nil ||
			b.Events[i-1].Call.ID() != ev.Call.ID() || len(b.Results) != 1 {
			l.alone.Add(1)
		}
		if ev.Call != nil && ev.Call.ID() == l.failAt {
			return 0, errCallLine
		}
	}
	return l.MemLog.Append(ctx, runID, b)
}

// A case:call line goes in one append with its call's call:done and result
// record, so that the journal never holds one without the other; when that
// append fails the run stops at once with the journal's error, and the
// journal holds nothing of the call.
func TestCallLineInTheCallsAppend(t *testing.T) {
	rec := record(t, examples.Checkout, nil)
	b := rec.bundleAt(rec.seqAfter(t, "step:quote:0"))
	for _, failAt := range []string{"", "step:reserve:0"} {
		log := &callLineLog{MemLog: host.NewMemLog(), failAt: failAt}
		rep, err := replay.Run(context.Background(), replay.Params{Bundle: b,
			RunID: "case", Registry: newRegistry(t), Log: log, FixtureHash: "h", Options: replay.Options{ReplayOnly: true}})
		if n := log.alone.Load(); n != 0 {
			t.Errorf("fail at %q: %d case:call events outside their call's append", failAt, n)
		}
		if failAt == "" {
			if err != nil || rep.Outcome.Status != host.StatusComplete || int64(len(rep.Calls)) != log.lines.Load() || len(rep.Calls) < 2 {
				t.Fatalf("Run: %v, outcome %+v, %d lines for %d case:call events", err, rep.Outcome, len(rep.Calls), log.lines.Load())
			}
			continue
		}
		if !errors.Is(err, errCallLine) {
			t.Fatalf("Run: %v, want the append's failure", err)
		}
		for _, ev := range log.Events("case") {
			if ev.Call != nil && ev.Call.ID() == failAt {
				t.Errorf("the journal holds %s of %s, whose append failed", ev.Kind, failAt)
			}
		}
	}
}
