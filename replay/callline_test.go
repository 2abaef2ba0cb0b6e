package replay_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pyrula/caseworker/flow/examples"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/replay"
	"github.com/pyrula/caseworker/runevent"
)

// callLineLog is a MemLog whose case:call appends fail, noting whether each
// came with a deadline.
type callLineLog struct {
	*host.MemLog
	appends, unbounded atomic.Int64
}

var errCallLine = errors.New("injected case:call append failure")

func (l *callLineLog) Append(ctx context.Context, runID string, b host.Batch) (int64, error) {
	for _, ev := range b.Events {
		if ev.Kind == runevent.CaseCall {
			l.appends.Add(1)
			if _, ok := ctx.Deadline(); !ok {
				l.unbounded.Add(1)
			}
			return 0, errCallLine
		}
	}
	return l.MemLog.Append(ctx, runID, b)
}

// A case:call line that cannot be written does not stop the run, but Run
// reports the first such failure as its error; each append has a deadline.
func TestCallLineAppendFailureReported(t *testing.T) {
	rec := record(t, examples.Checkout, nil)
	log := &callLineLog{MemLog: host.NewMemLog()}
	_, err := replay.Run(context.Background(), replay.Params{Bundle: rec.bundleAt(rec.seqAfter(t, "step:quote:0")),
		RunID: "case", Registry: newRegistry(t), Log: log, FixtureHash: "h", Options: replay.Options{ReplayOnly: true}})
	if !errors.Is(err, errCallLine) || !strings.Contains(err.Error(), "case:call") {
		t.Fatalf("Run: %v, want the case:call append failure", err)
	}
	if n := log.appends.Load(); n < 2 {
		t.Errorf("%d case:call appends, want one per post-fork call (the run goes on)", n)
	}
	if n := log.unbounded.Load(); n != 0 {
		t.Errorf("%d case:call appends without a deadline", n)
	}
}
