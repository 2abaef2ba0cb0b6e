package journallog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/flow/journallog"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/memjournal"
	"github.com/pyrula/caseworker/runevent"
)

// answered is the deferrable batch of answered call i: its call:start,
// call:done and result record.
func answered(i int) host.Batch {
	ref := &host.CallRef{Kind: host.KindStep, Key: "read:" + strconv.Itoa(i), Fingerprint: "f"}
	return host.Batch{Target: "t", Deferrable: true,
		Events:  []host.Event{{Kind: runevent.CallStart, Call: ref, Input: json.RawMessage(`{}`)}, {Kind: runevent.CallDone, Call: ref, Provenance: "reused"}},
		Results: []bundle.Result{{Key: ref.Key, Kind: string(ref.Kind), Fingerprint: "f", Result: json.RawMessage(`1`)}}}
}

// memLog is a Log of owner on a new memory journal.
func memLog(t *testing.T, owner string) (journal.Journal, *journallog.Log) {
	t.Helper()
	j, err := memjournal.New(memjournal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	log, err := journallog.New(j, journallog.Options{Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	return j, log
}

// heldLog is a Log on a memory journal with a run started (run:submitted
// and run:start written).
func heldLog(t *testing.T) (*journallog.Log, journal.Journal, string) {
	t.Helper()
	j, log := memLog(t, "test")
	runID := "run_held"
	if _, err := log.Append(context.Background(), runID, host.Batch{Target: "t", Events: []host.Event{{Kind: runevent.RunStart, Inputs: json.RawMessage(`{}`)}}}); err != nil {
		t.Fatal(err)
	}
	return log, j, runID
}

func lastSeq(t *testing.T, j journal.Journal, runID string) int64 {
	t.Helper()
	m, err := j.Meta(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	return m.LastSeq
}

// Deferrable batches are held and written, in order, with the next batch
// that is not; the run_seq Append returns for a held batch is the one its
// last event gets.
func TestHeldBatchesWrittenWithTheNext(t *testing.T) {
	ctx := context.Background()
	log, j, runID := heldLog(t)
	start := lastSeq(t, j, runID)
	var want []int64
	for i := range 3 {
		seq, err := log.Append(ctx, runID, answered(i))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, seq)
	}
	if got := lastSeq(t, j, runID); got != start {
		t.Fatalf("the journal has run_seq %d after three held batches, want %d (nothing written)", got, start)
	}
	seq, err := log.Append(ctx, runID, host.Batch{Target: "t", Events: []host.Event{{Kind: runevent.RunStart, Inputs: json.RawMessage(`{}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	if seq != start+7 || lastSeq(t, j, runID) != seq {
		t.Fatalf("the next batch got run_seq %d (journal %d), want %d", seq, lastSeq(t, j, runID), start+7)
	}
	r, err := j.Run(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range want {
		ev := r.Events[s-1]
		if ev.RunSeq != s || ev.Kind != runevent.CallDone || ev.Call.Key != "read:"+strconv.Itoa(i) {
			t.Errorf("event at the run_seq %d returned for batch %d: %+v", s, i, ev)
		}
	}
	if len(r.Results) != 3 {
		t.Errorf("%d results stored, want 3", len(r.Results))
	}
}

// A run the Log holds a lease on and whose last run_seq the caller read
// under it (Seen; a worker's run, created by its submission) has its
// deferrable run:start held from the first append on, and written with the
// next batch that is not; without Seen the first append is written at once
// (the Log does not know where the run's events go yet).
func TestSeenHoldsTheFirstBatch(t *testing.T) {
	ctx := context.Background()
	runStart := host.Batch{Target: "t", Deferrable: true, Events: []host.Event{{Kind: runevent.RunStart, Inputs: json.RawMessage(`{}`)}}}
	for _, seen := range []bool{true, false} {
		j, log := memLog(t, "exec")
		runID := fmt.Sprintf("run_seen_%v", seen)
		if _, err := j.Create(ctx, journal.CreateParams{RunID: runID, TargetName: "t"}); err != nil {
			t.Fatal(err)
		}
		lease, err := j.Acquire(ctx, journal.AcquireParams{RunID: runID, Owner: "exec"})
		if err != nil {
			t.Fatal(err)
		}
		if err := log.Adopt(lease); err != nil {
			t.Fatal(err)
		}
		submitted := lastSeq(t, j, runID)
		if seen {
			log.Seen(runID, submitted)
		}
		seq, err := log.Append(ctx, runID, runStart)
		if err != nil {
			t.Fatal(err)
		}
		written := lastSeq(t, j, runID)
		switch {
		case seq != submitted+1:
			t.Fatalf("seen %v: run:start got run_seq %d, want %d", seen, seq, submitted+1)
		case seen && written != submitted:
			t.Fatalf("seen: the journal ends at run_seq %d after the run:start, want %d (held)", written, submitted)
		case !seen && written != seq:
			t.Fatalf("not seen: the journal ends at run_seq %d after the run:start, want %d (written)", written, seq)
		}
		if _, err := log.Append(ctx, runID, host.Batch{Target: "t", Events: []host.Event{{Kind: runevent.CaseCall, Extra: map[string]json.RawMessage{"seq": json.RawMessage(`0`)}}}}); err != nil {
			t.Fatal(err)
		}
		r, err := j.Run(ctx, runID)
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, ev := range r.Events {
			kinds = append(kinds, fmt.Sprintf("%d %s", ev.RunSeq, ev.Kind))
		}
		want := []string{"1 run:submitted", "2 run:start", "3 case:call"}
		if strings.Join(kinds, ", ") != strings.Join(want, ", ") {
			t.Fatalf("seen %v: the journal holds %q, want %q", seen, kinds, want)
		}
	}
}

// Finish writes the held batches before the terminal event; Release writes
// them before it lets the run go.
func TestHeldBatchesOnFinishAndRelease(t *testing.T) {
	ctx := context.Background()
	for _, end := range []string{"finish", "release"} {
		t.Run(end, func(t *testing.T) {
			log, j, runID := heldLog(t)
			start := lastSeq(t, j, runID)
			for i := range 2 {
				if _, err := log.Append(ctx, runID, answered(i)); err != nil {
					t.Fatal(err)
				}
			}
			want := start + 4
			if end == "finish" {
				seq, err := log.Finish(ctx, runID, host.Event{Kind: runevent.RunComplete, Result: json.RawMessage(`null`)})
				if err != nil {
					t.Fatal(err)
				}
				if want++; seq != want {
					t.Errorf("the terminal event got run_seq %d, want %d", seq, want)
				}
			} else if err := log.Release(ctx, runID, journal.StatusSuspended); err != nil {
				t.Fatal(err)
			}
			if got := lastSeq(t, j, runID); got != want {
				t.Errorf("the journal ends at run_seq %d, want %d", got, want)
			}
		})
	}
}

// Runs that hold batches and finish one after another, on one Log, each
// keep their own events and results: what one run held is not touched by
// the runs after it (the slices that held it are reused).
func TestHeldBatchesOfSuccessiveRuns(t *testing.T) {
	ctx := context.Background()
	log, j, first := heldLog(t)
	runs := []string{first, "run_held_2", "run_held_3"}
	for r, runID := range runs {
		if r > 0 {
			if _, err := log.Append(ctx, runID, host.Batch{Target: "t", Events: []host.Event{{Kind: runevent.RunStart, Inputs: json.RawMessage(`{}`)}}}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 10 + r {
			if _, err := log.Append(ctx, runID, answered(100*r+i)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := log.Finish(ctx, runID, host.Event{Kind: runevent.RunComplete, Result: json.RawMessage(strconv.Itoa(r))}); err != nil {
			t.Fatal(err)
		}
	}
	for r, runID := range runs {
		run, err := j.Run(ctx, runID)
		if err != nil {
			t.Fatal(err)
		}
		calls, results := 10+r, 10+r
		if len(run.Events) != 3+2*calls || len(run.Results) != results {
			t.Fatalf("run %s: %d events and %d results, want %d and %d", runID, len(run.Events), len(run.Results), 3+2*calls, results)
		}
		keys := map[string]bool{}
		for _, res := range run.Results {
			keys[res.Key] = string(res.Result) == "1" && res.Fingerprint == "f"
		}
		for i := range calls {
			key := "read:" + strconv.Itoa(100*r+i)
			if !keys[key] {
				t.Errorf("run %s: no result %s as written among %v", runID, key, run.Results)
			}
			start, done := run.Events[2+2*i], run.Events[3+2*i]
			if start.Kind != runevent.CallStart || done.Kind != runevent.CallDone || start.Call == nil || done.Call == nil ||
				start.Call.Key != key || done.Call.Key != key || done.Provenance != "reused" {
				t.Errorf("run %s, call %d: %+v then %+v, want call:start and call:done of %s", runID, i, start, done, key)
			}
		}
		if last := run.Events[len(run.Events)-1]; last.Kind != runevent.RunComplete || string(last.Result) != strconv.Itoa(r) {
			t.Errorf("run %s ends with %+v, want run:complete with result %d", runID, last, r)
		}
	}
}

// The held batches are written once they reach MaxHeldEvents events, and by
// the first batch MaxHoldFor after the first held one.
func TestHeldBatchesBounds(t *testing.T) {
	ctx := context.Background()
	// Batches of two events: the one that brings them to MaxHeldEvents is
	// written with the ones held. The batches must all come within
	// MaxHoldFor, which a loaded machine (the race detector) may not
	// manage: a try that took longer and saw the batches written early is
	// tried again.
	n := journallog.MaxHeldEvents / 2
	var (
		log   *journallog.Log
		j     journal.Journal
		runID string
	)
	for try := 1; ; try++ {
		log, j, runID = heldLog(t)
		start := lastSeq(t, j, runID)
		began := time.Now()
		failure := ""
		for i := range n {
			if _, err := log.Append(ctx, runID, answered(i)); err != nil {
				t.Fatal(err)
			}
			if got := lastSeq(t, j, runID); (i < n-1 && got != start) || (i == n-1 && got != start+int64(journallog.MaxHeldEvents)) {
				failure = fmt.Sprintf("after batch %d the journal is at run_seq %d (from %d): want the batches written at %d events", i, got, start, journallog.MaxHeldEvents)
				break
			}
		}
		if failure == "" {
			break
		}
		if took := time.Since(began); took < journallog.MaxHoldFor || try == 5 {
			t.Fatalf("%s (the batches took %v)", failure, took)
		}
	}
	at := lastSeq(t, j, runID)
	if _, err := log.Append(ctx, runID, answered(n)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(journallog.MaxHoldFor + 10*time.Millisecond)
	if _, err := log.Append(ctx, runID, answered(n+1)); err != nil {
		t.Fatal(err)
	}
	if got := lastSeq(t, j, runID); got != at+4 {
		t.Errorf("a batch %v after the first held one: the journal is at %d, want %d", journallog.MaxHoldFor, got, at+4)
	}
}

// TestAfterFinish: Options.AfterFinish sees each run the Log finished,
// after its terminal event is in the journal, and its error fails the
// Finish (the run stays finished in the journal).
func TestAfterFinish(t *testing.T) {
	ctx := context.Background()
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail=%v", fail), func(t *testing.T) {
			j, err := memjournal.New(memjournal.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var seen []string
			var statusSeen journal.Status
			log, err := journallog.New(j, journallog.Options{Owner: "test", AfterFinish: func(ctx context.Context, runID string) error {
				seen = append(seen, runID)
				m, err := j.Meta(ctx, runID)
				if err != nil {
					return err
				}
				statusSeen = m.Status
				if fail {
					return errors.New("not on the replicas")
				}
				return nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			runID := "run_after"
			if _, err := log.Append(ctx, runID, host.Batch{Target: "t", Events: []host.Event{{Kind: runevent.RunStart, Inputs: json.RawMessage(`{}`)}}}); err != nil {
				t.Fatal(err)
			}
			_, err = log.Finish(ctx, runID, host.Event{Kind: runevent.RunComplete, Result: json.RawMessage(`null`)})
			if fail != (err != nil) || (fail && !strings.Contains(err.Error(), "not on the replicas")) {
				t.Fatalf("Finish: %v", err)
			}
			if len(seen) != 1 || seen[0] != runID || statusSeen != journal.StatusComplete {
				t.Errorf("AfterFinish saw %v, the run %q then", seen, statusSeen)
			}
		})
	}
}
