package suite

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
	"github.com/pyrula/caseworker/store"
)

// SelectStored selects the cases of target in the fixture store s, in
// hash order, the first limit when limit is above 0. A bundle deleted
// meanwhile, or one that cannot be read, is left out.
func SelectStored(ctx context.Context, s store.Store, target string, limit int) (Selection, error) {
	sel := Selection{Source: SourceBundles, Cases: []string{}}
	for info, err := range s.List(ctx) {
		if err != nil {
			return Selection{}, fmt.Errorf("list the fixture store: %w", err)
		}
		cb, err := store.Load(ctx, s, info.Hash)
		if errors.Is(err, store.ErrNotFound) || messages.AsError(err) != nil {
			continue
		}
		if err != nil {
			return Selection{}, fmt.Errorf("read %s: %w", info.Hash, err)
		}
		if cb.Manifest().TargetName == target {
			sel.Cases = append(sel.Cases, string(info.Hash))
		}
	}
	slices.Sort(sel.Cases)
	if limit > 0 && len(sel.Cases) > limit {
		sel.Cases = sel.Cases[:limit]
	}
	return sel, nil
}

// ReadConcurrency is how many runs SelectRuns reads at once (and a suite's
// coordinator reads its children's outcomes at once).
const ReadConcurrency = 16

// SelectRuns selects the completed runs of target in journal j (live and
// archived; j must list them: journal.Lister) that finished in q's bounds,
// leaving out case runs and suites (their events hold a case:outcome or a
// suite:plan: they are not recordings of the target) and runs gone since
// they were listed; then a sample of them when q asks for one, drawn with
// q.Seed from the runs in run id order and kept in that order, so that the
// same runs and seed draw the same sample. Each case forks after its run's
// first run:start unless q keeps the inputs only.
func SelectRuns(ctx context.Context, j journal.Journal, target string, q messages.SuiteJournalCases) (Selection, error) {
	l, ok := j.(journal.Lister)
	if !ok {
		return Selection{}, messages.Errorf(messages.InvalidOverrides, "this journal cannot list its runs")
	}
	refs, err := l.Finished(ctx, journal.FinishedQuery{Target: target, After: q.After, Before: q.Before})
	if err != nil {
		return Selection{}, err
	}
	// Each run is read (ReadConcurrency at once) to tell a recording from
	// a case run and find its fork: its last events, then its first; the
	// order stays the listing's.
	fork := make([]int64, len(refs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(ReadConcurrency)
	for i, r := range refs {
		g.Go(func() error {
			fork[i] = -1
			// A finished case run or suite says so in its last events: those
			// are read first, alone, where the journal can (a journal that
			// served suites holds many more case runs than recordings).
			t, tailed := j.(journal.TailReader)
			if tailed {
				tail, err := t.Tail(gctx, r.RunID, OutcomeTail)
				if errors.Is(err, journal.ErrRunNotFound) {
					return nil
				}
				if err != nil {
					return fmt.Errorf("read run %s: %w", r.RunID, err)
				}
				if !mayBeRecording(tail) {
					return nil
				}
			}
			// Then its first events, where a recording's fork is: its
			// first run:start, which follows run:submitted. A case run's
			// case:outcome is in its tail, a suite's suite:plan in its
			// head; so the run is read whole only when its head has no
			// run:start and there is more.
			if h, ok := j.(journal.HeadReader); ok && tailed {
				_, head, err := h.Head(gctx, r.RunID, selectHead)
				if errors.Is(err, journal.ErrRunNotFound) {
					return nil
				}
				if err != nil {
					return fmt.Errorf("read run %s: %w", r.RunID, err)
				}
				f, ok := recordedRun(head)
				if ok {
					fork[i] = f
				}
				if ok || f == notRecorded || len(head) < selectHead {
					return nil
				}
			}
			events, _, err := j.Events(gctx, r.RunID)
			if errors.Is(err, journal.ErrRunNotFound) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("read run %s: %w", r.RunID, err)
			}
			if f, ok := recordedRun(events); ok {
				fork[i] = f
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return Selection{}, err
	}
	var recorded []string
	var forks []int64
	for i, r := range refs {
		if fork[i] >= 0 {
			recorded, forks = append(recorded, r.RunID), append(forks, fork[i])
		}
	}
	keep := make([]int, len(recorded))
	for i := range keep {
		keep[i] = i
	}
	if q.Sample > 0 && q.Sample < len(recorded) {
		rng := rand.New(rand.NewPCG(q.Seed, q.Seed^0x9e3779b97f4a7c15))
		keep = rng.Perm(len(recorded))[:q.Sample]
		slices.Sort(keep)
	}
	sel := Selection{Source: SourceJournal, Cases: []string{}}
	for _, i := range keep {
		sel.Cases = append(sel.Cases, recorded[i])
		if q.Fork != messages.ForkInputsOnly {
			sel.Forks = append(sel.Forks, forks[i])
		}
	}
	return sel, nil
}

// OutcomeTail is how many last events of a finished run hold its outcome,
// with room to spare: a case run ends with its case:outcome and terminal
// event, a suite with its suite:outcome and terminal event. SelectRuns
// reads them first, and a suite's coordinator reads its children's so.
const OutcomeTail = 4

// mayBeRecording reports whether a run whose last events are tail may be a
// recording of its target: false when they hold a case:outcome, a
// suite:plan or a suite:outcome (which only a suite, whose events begin
// with its suite:plan, writes).
func mayBeRecording(tail []journal.Event) bool {
	for _, ev := range tail {
		switch ev.Kind {
		case runevent.CaseOutcome, runevent.SuitePlan, runevent.SuiteOutcome:
			return false
		}
	}
	return true
}

// selectHead is how many first events of a run SelectRuns reads for its
// fork before it reads the whole run.
const selectHead = 8

// notRecorded is recordedRun's fork of events that hold a case:outcome or
// a suite:plan.
const notRecorded = -2

// recordedRun reports whether a finished run's events (or its first
// events) are a recording of its target (no case:outcome, no suite:plan),
// and the run_seq of its first run:start; the fork is notRecorded when
// they hold a case:outcome or suite:plan, -1 when they hold no run:start.
func recordedRun(events []journal.Event) (int64, bool) {
	fork := int64(-1)
	for _, ev := range events {
		switch ev.Kind {
		case runevent.CaseOutcome, runevent.SuitePlan:
			return notRecorded, false
		case runevent.RunStart:
			if fork < 0 {
				fork = ev.RunSeq
			}
		}
	}
	return fork, fork >= 0
}
