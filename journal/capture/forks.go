package capture

import (
	"fmt"

	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/runevent"
)

// ForkPoint says whether a run_seq of a run is a valid --fork-after-seq:
// what `pyrula events --fork-points` prints for each event.
type ForkPoint struct {
	// RunSeq is the event's run_seq.
	RunSeq int64 `json:"run_seq"`
	// Kind is the event's kind.
	Kind string `json:"kind"`
	// Call is the event's call identity (kind:key), for call events.
	Call string `json:"call,omitempty"`
	// Valid is true when a case saved with --fork-after-seq RunSeq can be
	// replayed: no call is in flight there and every call done by then has
	// a recorded result.
	Valid bool `json:"fork_point"`
	// Why says why RunSeq is not a fork point; empty when it is.
	Why string `json:"why,omitempty"`
}

// ForkPoints returns one ForkPoint per event of r, in run_seq order. Stream
// refuses exactly the forks that ForkPoints marks invalid, with the same
// reasons (capture_incomplete).
func ForkPoints(r *journal.Run) []ForkPoint {
	have := make(map[string]bool, len(r.Results))
	for _, res := range r.Results {
		have[journal.ResultID(res.Kind, res.Key)] = true
	}
	fs := newForkScan(func(id string) bool { return have[id] })
	out := make([]ForkPoint, 0, len(r.Events))
	for _, e := range r.Events {
		out = append(out, fs.step(e, true))
	}
	return out
}

// forkScan is ForkPoints one event at a time: which calls are in flight,
// and which calls done have no recorded result (has says which do).
type forkScan struct {
	has      func(id string) bool
	open     map[string]int64 // call id → run_seq of its call:start
	order    []string         // open calls in start order
	noResult []string         // calls done with no recorded result
}

func newForkScan(has func(id string) bool) *forkScan {
	return &forkScan{has: has, open: map[string]int64{}}
}

// step takes the run's next event e and returns its fork point; Why is
// written only when explain is set (Valid is always right).
func (fs *forkScan) step(e journal.Event, explain bool) ForkPoint {
	fp := ForkPoint{RunSeq: e.RunSeq, Kind: string(e.Kind)}
	if c, ok := journal.CallOf(e); ok {
		id := c.ID()
		fp.Call = id
		switch e.Kind {
		case runevent.CallStart:
			if _, seen := fs.open[id]; !seen {
				fs.order = append(fs.order, id)
			}
			fs.open[id] = e.RunSeq
		case runevent.CallDone:
			delete(fs.open, id)
			if !fs.has(id) {
				fs.noResult = append(fs.noResult, fmt.Sprintf("%s (done at run_seq %d) has no recorded result", id, e.RunSeq))
			}
		}
	}
	var why []string
	still := fs.order[:0] // keeps order to the open calls: linear, not quadratic, in the run's length
	for _, id := range fs.order {
		if seq, ok := fs.open[id]; ok {
			still = append(still, id)
			if explain {
				why = append(why, fmt.Sprintf("%s was in flight at run_seq %d (started at run_seq %d)", id, e.RunSeq, seq))
			}
		}
	}
	fs.order = still
	fp.Valid = len(still) == 0 && len(fs.noResult) == 0
	if !fp.Valid && explain {
		fp.Why = joinList(append(why, fs.noResult...))
	}
	return fp
}
