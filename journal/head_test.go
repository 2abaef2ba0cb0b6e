package journal_test

import (
	"context"
	"errors"
	"testing"

	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/memjournal"
	"github.com/pyrula/caseworker/runevent"
)

// withoutHeads is a journal that does not read heads.
type withoutHeads struct{ journal.Journal }

// TestReadHead: a run's meta and first events, through the journal's
// HeadReader or from the run read whole, the same either way.
func TestReadHead(t *testing.T) {
	ctx := context.Background()
	mem, err := memjournal.New(memjournal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := mem.Create(ctx, journal.CreateParams{RunID: "run_1", TargetName: "t", Owner: "w"})
	if err != nil {
		t.Fatal(err)
	}
	start, _ := journal.NewEvent(runevent.RunStart, map[string]any{"inputs": map[string]int{}})
	if _, err := mem.Append(ctx, l, journal.Batch{Events: []journal.Event{start, start}}); err != nil {
		t.Fatal(err)
	}
	for _, j := range []journal.Journal{mem, withoutHeads{mem}} {
		for n, kinds := range map[int][]runevent.Kind{
			0: {}, 1: {runevent.RunSubmitted}, 2: {runevent.RunSubmitted, runevent.RunStart},
			9: {runevent.RunSubmitted, runevent.RunStart, runevent.RunStart},
		} {
			meta, events, err := journal.ReadHead(ctx, j, "run_1", n)
			if err != nil || meta.RunID != "run_1" || meta.LastSeq != 3 || len(events) != len(kinds) {
				t.Fatalf("%T: ReadHead(%d) = %+v, %d events, %v; want run_1's meta, last_seq 3, %d events", j, n, meta, len(events), err, len(kinds))
			}
			for i, k := range kinds {
				if events[i].Kind != k || events[i].RunSeq != int64(i+1) {
					t.Errorf("%T: ReadHead(%d)[%d] = %s at %d, want %s at %d", j, n, i, events[i].Kind, events[i].RunSeq, k, i+1)
				}
			}
		}
		if _, _, err := journal.ReadHead(ctx, j, "run_missing", 1); !errors.Is(err, journal.ErrRunNotFound) {
			t.Errorf("%T: ReadHead of an unknown run: %v, want ErrRunNotFound", j, err)
		}
	}
}
