package replay_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/replay"
	"github.com/pyrula/caseworker/runevent"
)

type stepIn struct {
	N int `json:"n"`
}

// resumable registers a workflow of three steps: a (read, input {"n": first}),
// b (pure, input {"n": second}; a case run runs it live when its input
// differs from the recording, and then it calls crash), c (read).
func resumable(t *testing.T, first, second int, crash func()) *flow.Registry {
	t.Helper()
	reg := flow.NewRegistry()
	err := flow.RegisterWorkflow(reg, flow.Workflow[struct{}, int]{
		Name: "resumable", CodeVersion: "v1", Defaults: struct{}{},
		Run: func(ctx context.Context, _ struct{}) (int, error) {
			a, err := flow.Step(ctx, "a", stepIn{first}, func(_ context.Context, in stepIn) (int, error) { return in.N, nil }, flow.WithEffect(flow.Read))
			if err != nil {
				return 0, err
			}
			b, err := flow.Step(ctx, "b", stepIn{second}, func(_ context.Context, in stepIn) (int, error) {
				if crash != nil {
					crash()
				}
				return in.N, nil
			}, flow.WithEffect(flow.Pure))
			if err != nil {
				return 0, err
			}
			c, err := flow.Step(ctx, "c", stepIn{3}, func(_ context.Context, in stepIn) (int, error) { return in.N, nil }, flow.WithEffect(flow.Read))
			return a + b + c, err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// resumableCase records a run of resumable(1, 2) live and saves it after
// its run:start (every call after the fork).
func resumableCase(t *testing.T) *bundle.Bundle {
	t.Helper()
	recLog := host.NewMemLog()
	rt, err := host.NewRuntime(host.Config{Registry: resumable(t, 1, 2, nil), Log: recLog})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := rt.Run(context.Background(), host.RunParams{RunID: "rec", Target: "resumable"}); err != nil || out.Status != host.StatusComplete {
		t.Fatalf("record: %+v %v", out, err)
	}
	start := recLog.Events("rec")[0]
	raw, err := json.Marshal(start)
	if err != nil {
		t.Fatal(err)
	}
	fork := int64(1)
	return &bundle.Bundle{
		Manifest: bundle.Manifest{Format: 1, Kind: bundle.KindWorkflow, TargetName: "resumable", CodeVersion: "v1",
			ForkAfterSeq: &fork, Inputs: start.Inputs, Source: bundle.Source{RunID: "rec"}},
		History: []json.RawMessage{raw},
		Results: recLog.Results("rec"),
	}
}

// TestResumeFindsChangedInput: a case run that crashed is resumed on its own
// journal by changed code whose first call has another input: the run stops
// with replay_input_changed (exit 3) instead of mixing the two versions.
func TestResumeFindsChangedInput(t *testing.T) {
	b := resumableCase(t)

	// The case run crashes inside b: its context ends, no terminal event.
	caseLog := host.NewMemLog()
	ctx, cancel := context.WithCancelCause(context.Background())
	crashed, err := replay.Run(ctx, replay.Params{Bundle: b, RunID: "case", Registry: resumable(t, 1, 5, func() { cancel(errors.New("crash")) }),
		Log: caseLog, FixtureHash: "h", Options: replay.Options{}})
	if err == nil {
		t.Fatalf("the crashed case run returned no error: %+v", crashed.Outcome)
	}
	for _, ev := range caseLog.Events("case") {
		if ev.Kind.Terminal() {
			t.Fatalf("a crashed run has a terminal event: %+v", ev)
		}
	}

	// Resumed by code whose step a now has another input.
	rep, err := replay.Run(context.Background(), replay.Params{Bundle: b, RunID: "case", Registry: resumable(t, 7, 5, nil),
		Log: caseLog, FixtureHash: "h", Options: replay.Options{}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Outcome.Code != "replay_input_changed" || rep.ExitStatus() != 3 {
		t.Fatalf("resume with changed input: %+v", rep.Outcome)
	}
	events := caseLog.Events("case")
	if last := events[len(events)-1]; last.Kind != runevent.RunError || last.Code != "replay_input_changed" {
		t.Fatalf("last event %+v", last)
	}

	// Resumed by the same code instead, it completes.
	log2 := host.NewMemLog()
	ctx2, cancel2 := context.WithCancelCause(context.Background())
	replay.Run(ctx2, replay.Params{Bundle: b, RunID: "case", Registry: resumable(t, 1, 5, func() { cancel2(errors.New("crash")) }),
		Log: log2, FixtureHash: "h", Options: replay.Options{}})
	rep, err = replay.Run(context.Background(), replay.Params{Bundle: b, RunID: "case", Registry: resumable(t, 1, 5, nil),
		Log: log2, FixtureHash: "h", Options: replay.Options{}})
	if err != nil || rep.Outcome.Status != host.StatusComplete {
		t.Fatalf("resume with the same code: %+v %v", rep.Outcome, err)
	}
}

// loadCounter is a MemLog that counts the loads of each run.
type loadCounter struct {
	*host.MemLog
	loads map[string]int
}

func (l *loadCounter) Load(ctx context.Context, runID string) (host.Recorded, error) {
	l.loads[runID]++
	return l.MemLog.Load(ctx, runID)
}

// TestCaseRunLoadsItsJournalOnce: a case run reads its journal once, for
// the engine and the runtime both, when it starts and when it is resumed
// after a crash, and ends as it would have.
func TestCaseRunLoadsItsJournalOnce(t *testing.T) {
	b := resumableCase(t)
	log := &loadCounter{MemLog: host.NewMemLog(), loads: map[string]int{}}
	rep, err := replay.Run(context.Background(), replay.Params{Bundle: b, RunID: "fresh", Registry: resumable(t, 1, 2, nil),
		Log: log, FixtureHash: "h", Options: replay.Options{ReplayOnly: true}})
	if err != nil || rep.Outcome.Status != host.StatusComplete {
		t.Fatalf("case run: %+v %v", rep.Outcome, err)
	}
	if log.loads["fresh"] != 1 {
		t.Errorf("a case run loaded its journal %d times, want once", log.loads["fresh"])
	}
	// Crashed inside b (its input changed, so it runs live), then resumed.
	ctx, cancel := context.WithCancelCause(context.Background())
	if _, err := replay.Run(ctx, replay.Params{Bundle: b, RunID: "crashed", Registry: resumable(t, 1, 5, func() { cancel(errors.New("crash")) }),
		Log: log, FixtureHash: "h", Options: replay.Options{}}); err == nil {
		t.Fatal("the crashed case run returned no error")
	}
	rep, err = replay.Run(context.Background(), replay.Params{Bundle: b, RunID: "crashed", Registry: resumable(t, 1, 5, nil),
		Log: log, FixtureHash: "h", Options: replay.Options{}})
	if err != nil || rep.Outcome.Status != host.StatusComplete || rep.Outcome.Provenance["changed"] != 1 {
		t.Fatalf("resumed case run: %+v %v", rep.Outcome, err)
	}
	if log.loads["crashed"] != 2 {
		t.Errorf("a case run and its resumption loaded its journal %d times, want twice", log.loads["crashed"])
	}
}
