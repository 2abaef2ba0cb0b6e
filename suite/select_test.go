package suite_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/memjournal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
	"github.com/pyrula/caseworker/suite"
)

// wholeReads counts the runs a memory journal reads whole (Events).
type wholeReads struct {
	*memjournal.Journal
	events atomic.Int64
}

func (w *wholeReads) Events(ctx context.Context, runID string) ([]journal.Event, journal.Origin, error) {
	w.events.Add(1)
	return w.Journal.Events(ctx, runID)
}

// tailsOnly is a journal that reads tails and not heads.
type tailsOnly struct {
	journal.Journal
	t journal.TailReader
	l journal.Lister
}

func (j tailsOnly) Tail(ctx context.Context, runID string, n int) ([]journal.Event, error) {
	return j.t.Tail(ctx, runID, n)
}

func (j tailsOnly) Finished(ctx context.Context, q journal.FinishedQuery) ([]journal.RunRef, error) {
	return j.l.Finished(ctx, q)
}

// TestSelectRunsReadsHeads: a journal selection finds the recordings among
// a target's finished runs (not its case runs, not its suites) and their
// forks (the first run:start), reading a recording's first events and not
// the whole run, and selects the same runs from a journal that reads only
// tails.
func TestSelectRunsReadsHeads(t *testing.T) {
	ctx := context.Background()
	mem, err := memjournal.New(memjournal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ev := func(kind runevent.Kind, fields any) journal.Event {
		e, err := journal.NewEvent(kind, fields)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	calls := func(n int) []journal.Event {
		var out []journal.Event
		for i := range n {
			c := journal.Call{Kind: "step", Key: fmt.Sprintf("read:%d", i), Fingerprint: fmt.Sprintf("%064x", i), Effect: "read"}
			out = append(out, ev(runevent.CallStart, map[string]any{"call": c, "input": map[string]int{"i": i}}), ev(runevent.CallDone, map[string]any{"call": c}))
		}
		return out
	}
	start := ev(runevent.RunStart, map[string]any{"inputs": map[string]int{"n": 1}})
	write := func(id string, events ...journal.Event) {
		l, err := mem.Create(ctx, journal.CreateParams{RunID: id, TargetName: "t", Owner: "w"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mem.Finish(ctx, l, journal.Batch{Events: append(events, ev(runevent.RunComplete, map[string]any{"result": 1}))}); err != nil {
			t.Fatal(err)
		}
	}
	write("a-recording", append([]journal.Event{start}, calls(10)...)...)
	write("b-short-recording", start)
	write("c-case-run", append(append([]journal.Event{start}, calls(10)...), ev(runevent.CaseOutcome, map[string]any{"status": "passed"}))...)
	write("d-suite", append([]journal.Event{ev(runevent.SuitePlan, map[string]any{"cases": []string{}})}, slices.Repeat([]journal.Event{ev(runevent.SuiteProgress, map[string]any{"done": 0})}, 10)...)...)
	write("e-no-start", calls(10)...)
	write("f-late-start", append(calls(5), append([]journal.Event{start}, calls(2)...)...)...)

	want := suite.Selection{Source: suite.SourceJournal, Cases: []string{"a-recording", "b-short-recording", "f-late-start"}, Forks: []int64{2, 2, 12}}
	j := &wholeReads{Journal: mem}
	got, err := suite.SelectRuns(ctx, j, "t", messages.SuiteJournalCases{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("selection %+v, want %+v", got, want)
	}
	// Read whole: the runs whose first events hold no run:start (e, f).
	if n := j.events.Load(); n != 2 {
		t.Errorf("%d runs read whole, want 2 (the runs without run:start in their first events)", n)
	}
	got, err = suite.SelectRuns(ctx, tailsOnly{Journal: mem, t: mem, l: mem}, "t", messages.SuiteJournalCases{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("from a journal without heads: selection %+v, want %+v", got, want)
	}
}
