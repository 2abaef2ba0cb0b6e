package journallog_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/examples"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/flow/journallog"
	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/capture"
	"github.com/pyrula/caseworker/journal/memjournal"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
	"github.com/pyrula/caseworker/runevent"
)

func setup(t *testing.T) (*host.Runtime, journal.Journal, *examples.Effects) {
	return setupClock(t, time.Now)
}

func setupClock(t *testing.T, now func() time.Time) (*host.Runtime, journal.Journal, *examples.Effects) {
	t.Helper()
	j, err := memjournal.New(memjournal.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	reg := flow.NewRegistry()
	fx, err := examples.Register(reg)
	if err != nil {
		t.Fatal(err)
	}
	log, err := journallog.New(j, journallog.Options{Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := host.NewRuntime(host.Config{Registry: reg, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	return rt, j, fx
}

// TestRecordAndCapture runs every example target into the journal, reads the
// run back and captures it at its last event: a valid bundle of the right
// kind, whose history and results are the journal's.
func TestRecordAndCapture(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		target string
		kind   bundle.Kind
	}{{"checkout", bundle.KindWorkflow}, {"support_agent", bundle.KindAgent}} {
		t.Run(tc.target, func(t *testing.T) {
			rt, j, _ := setup(t)
			out, err := rt.Run(ctx, host.RunParams{RunID: "run_" + tc.target, Target: tc.target})
			if err != nil || out.Status != host.StatusComplete {
				t.Fatalf("run: %+v, %v", out, err)
			}
			r, err := j.Run(ctx, out.RunID)
			if err != nil {
				t.Fatal(err)
			}
			if r.Meta.Status != journal.StatusComplete || r.Meta.TargetName != tc.target || r.Events[0].Kind != runevent.RunSubmitted ||
				r.Events[1].Kind != runevent.RunStart || r.Meta.LastSeq != int64(len(r.Events)) {
				t.Fatalf("journal meta %+v, first events %s %s", r.Meta, r.Events[0].Kind, r.Events[1].Kind)
			}
			info, _ := rt.Registry().Lookup(tc.target)
			fork := r.Meta.LastSeq
			c, err := capture.Encode(r, capture.Params{ForkAfterSeq: &fork, Registration: info.Registration, PyrulaVersion: "test"})
			if err != nil {
				t.Fatalf("capture is not a valid bundle: %v", err)
			}
			s := c.Summary()
			if s.Kind != tc.kind || s.HistoryCount != len(r.Events)-1 || s.ResultCount != len(r.Results) || s.ResultCount == 0 {
				t.Fatalf("summary %+v (events %d, results %d)", s, len(r.Events), len(r.Results))
			}
		})
	}
}

// TestResumeFromJournal: a run whose context is cancelled mid-way is resumed
// from the journal by a new runtime (a new process) without repeating the
// writes it completed.
func TestResumeFromJournal(t *testing.T) {
	ctx := context.Background()
	var skew atomic.Int64 // the journal's clock runs ahead once the first process "died"
	rt, j, fx := setupClock(t, func() time.Time { return time.Now().Add(time.Duration(skew.Load())) })
	stopAfter := 3
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// Cancel the run once a few calls are journaled.
	go func() {
		for {
			r, err := j.Run(ctx, "run_resume")
			if err == nil && len(r.Results) >= stopAfter {
				cancel(errors.New("crash"))
				return
			}
			if cctx.Err() != nil {
				return
			}
		}
	}()
	first, err := rt.Run(cctx, host.RunParams{RunID: "run_resume", Target: "checkout"})
	if err == nil && first.Status == host.StatusComplete {
		t.Skip("the run finished before it could be cancelled")
	}
	firstReservations := fx.Reservations.Load()

	// The first process is gone: its lease expires. A new process (new
	// registry, runtime and log over the same journal) resumes the run.
	skew.Store(int64(time.Hour))
	reg := flow.NewRegistry()
	fx2, _ := examples.Register(reg)
	log, _ := journallog.New(j, journallog.Options{Owner: "second"})
	rt2, _ := host.NewRuntime(host.Config{Registry: reg, Log: log})
	out, err := rt2.Run(ctx, host.RunParams{RunID: "run_resume", Target: "checkout"})
	if err != nil || out.Status != host.StatusComplete {
		t.Fatalf("resume: %+v, %v", out, err)
	}
	r, _ := j.Run(ctx, "run_resume")
	if r.Meta.LeaseEpoch < 2 {
		t.Fatalf("the resumed run did not take the lease over: epoch %d", r.Meta.LeaseEpoch)
	}
	if total := firstReservations + fx2.Reservations.Load(); total != 1 {
		t.Fatalf("reserve ran %d times in all (first process %d)", total, firstReservations)
	}
}

func TestUnknownRunLoadsEmpty(t *testing.T) {
	_, j, _ := setup(t)
	log, _ := journallog.New(j, journallog.Options{Owner: "x"})
	rec, err := log.Load(context.Background(), "nope")
	if err != nil || len(rec.Events) != 0 {
		t.Fatalf("Load of an unknown run = %+v, %v", rec, err)
	}
	if _, err := journallog.New(j, journallog.Options{}); err == nil {
		t.Fatal("a Log without an owner")
	}
}

// TestResumeOnValkey: the same crash and resume against real Redis. The
// first process's lease is short, so the second takes the run over once it
// lapses (as a worker reclaims a run whose worker died).
func TestResumeOnValkey(t *testing.T) {
	ctx := context.Background()
	ns := testenv.UniqueName(t, "resume")
	j, err := valkeyjournal.New(testenv.ValkeyClientAt(t, testenv.ValkeyURL(t), ns), valkeyjournal.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	newRuntime := func(owner string, ttl time.Duration) (*host.Runtime, *examples.Effects) {
		reg := flow.NewRegistry()
		fx, err := examples.Register(reg)
		if err != nil {
			t.Fatal(err)
		}
		log, err := journallog.New(j, journallog.Options{Owner: owner, LeaseTTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		rt, err := host.NewRuntime(host.Config{Registry: reg, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		return rt, fx
	}
	rt1, fx1 := newRuntime("first", 300*time.Millisecond)
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		for cctx.Err() == nil {
			if r, err := j.Run(ctx, "run_valkey_resume"); err == nil && len(r.Results) >= 3 {
				cancel(errors.New("crash"))
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	if out, err := rt1.Run(cctx, host.RunParams{RunID: "run_valkey_resume", Target: "checkout"}); err == nil && out.Status == host.StatusComplete {
		t.Skip("the run finished before it could be cancelled")
	}
	before, err := j.Run(ctx, "run_valkey_resume")
	if err != nil {
		t.Fatal(err)
	}
	rt2, fx2 := newRuntime("second", 0)
	deadline := time.Now().Add(5 * time.Second)
	var out host.Outcome
	for {
		out, err = rt2.Run(ctx, host.RunParams{RunID: "run_valkey_resume", Target: "checkout"})
		if !errors.Is(err, journal.ErrLeaseHeld) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // the first lease has not lapsed yet
	}
	if err != nil || out.Status != host.StatusComplete {
		t.Fatalf("resume: %+v, %v", out, err)
	}
	after, _ := j.Run(ctx, "run_valkey_resume")
	if after.Meta.LeaseEpoch != before.Meta.LeaseEpoch+1 || after.Meta.Status != journal.StatusComplete {
		t.Fatalf("meta after resume: %+v", after.Meta)
	}
	// Completed calls were answered from the journal: reserve ran once.
	if total := fx1.Reservations.Load() + fx2.Reservations.Load(); total != 1 {
		t.Fatalf("reserve ran %d times", total)
	}
	// The results recorded before the crash are unchanged.
	for i, r := range before.Results {
		got := after.Results
		found := false
		for _, a := range got {
			if a.Kind == r.Kind && a.Key == r.Key {
				found = string(a.Result) == string(r.Result) && string(a.Error) == string(r.Error)
			}
		}
		if !found {
			t.Fatalf("result %d (%s:%s) changed on resume", i, r.Kind, r.Key)
		}
	}
}

// TestAdoptAndRenew: a run created without an owner (as the worker submits
// it) is leased by the executor, adopted by the Log, renewed while it
// runs, and executed through the Log under that same lease.
func TestAdoptAndRenew(t *testing.T) {
	ctx := context.Background()
	j, err := memjournal.New(memjournal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := flow.NewRegistry()
	if _, err := examples.Register(reg); err != nil {
		t.Fatal(err)
	}
	log, err := journallog.New(j, journallog.Options{Owner: "exec"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Create(ctx, journal.CreateParams{RunID: "run_sub", TargetName: "checkout"}); err != nil {
		t.Fatal(err)
	}
	if held, err := log.Renew(ctx, "run_sub"); held || err != nil {
		t.Fatalf("renew before adopt: %v %v", held, err)
	}
	other, err := j.Acquire(ctx, journal.AcquireParams{RunID: "run_sub", Owner: "other", TTL: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := log.Adopt(other); err == nil {
		t.Fatal("adopted another owner's lease")
	}
	time.Sleep(5 * time.Millisecond)
	lease, err := j.Acquire(ctx, journal.AcquireParams{RunID: "run_sub", Owner: "exec"})
	if err != nil {
		t.Fatal(err)
	}
	if err := log.Adopt(lease); err != nil {
		t.Fatal(err)
	}
	if held, err := log.Renew(ctx, "run_sub"); !held || err != nil {
		t.Fatalf("renew: %v %v", held, err)
	}
	rt, err := host.NewRuntime(host.Config{Registry: reg, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	out, err := rt.Run(ctx, host.RunParams{RunID: "run_sub", Target: "checkout"})
	if err != nil || out.Status != host.StatusComplete {
		t.Fatalf("run: %v %+v", err, out)
	}
	m, err := j.Meta(ctx, "run_sub")
	if err != nil || m.LeaseEpoch != lease.Epoch || m.Status != journal.StatusComplete {
		t.Fatalf("meta %+v (%v), want epoch %d complete", m, err, lease.Epoch)
	}
	if held, err := log.Renew(ctx, "run_sub"); held || err != nil {
		t.Fatalf("renew after finish: %v %v", held, err)
	}
}

// TestLostRunCreatedAgain: a run this Log created (and holds the lease of)
// is lost from Valkey, as a failover that rolls its creation back loses
// it. Loading it finds nothing, and the next append creates it again
// instead of failing for ever on the lease the Log kept; an append that
// finds it lost fails once, and the one after creates it again.
func TestLostRunCreatedAgain(t *testing.T) {
	ctx := context.Background()
	ns := testenv.UniqueName(t, "lost")
	client := testenv.ValkeyClientAt(t, testenv.ValkeyURL(t), ns)
	j, err := valkeyjournal.New(client, valkeyjournal.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	log, err := journallog.New(j, journallog.Options{Owner: "w", LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	const runID = "run_lost"
	start := host.Batch{Target: "checkout", Events: []host.Event{{Kind: runevent.RunStart, Inputs: json.RawMessage(`{}`), CodeVersion: "v1"}}}
	lose := func() {
		meta, events, results := valkeyjournal.Keys(ns, runID)
		if err := client.Do(ctx, client.B().Del().Key(meta, events, results).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	appended := func(what string) {
		t.Helper()
		if _, err := log.Append(ctx, runID, start); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if r, err := j.Run(ctx, runID); err != nil || len(r.Events) < 2 {
			t.Fatalf("%s: the run in the journal: %v, %+v", what, err, r)
		}
	}
	appended("the first append")
	lose()
	if rec, err := log.Load(ctx, runID); err != nil || len(rec.Events) != 0 {
		t.Fatalf("load of the lost run: %v, %d events", err, len(rec.Events))
	}
	appended("the append after the load")
	lose()
	if _, err := log.Append(ctx, runID, start); err == nil {
		t.Fatal("an append to the lost run under the kept lease succeeded")
	}
	appended("the append after the failed one")
}
