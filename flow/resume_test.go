package flow_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/flowtest"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/messages"
)

// abc is the test workflow "abc": steps a (write), b (write), c (read).
// A step named in crash cancels the run's context and fails, as a crash in
// the middle of the step would; variant changes the code between runs.
type abc struct {
	a, b, c atomic.Int64 // side effects
	crash   atomic.Pointer[crashPoint]
	variant atomic.Int64
}

type crashPoint struct {
	step   string
	cancel context.CancelFunc
}

func (w *abc) maybeCrash(ctx context.Context, step string) error {
	if p := w.crash.Load(); p != nil && p.step == step && w.crash.CompareAndSwap(p, nil) {
		p.cancel()
		return ctx.Err()
	}
	return nil
}

func (w *abc) register(t *testing.T, reg *flow.Registry) {
	t.Helper()
	mustRegister(t, flow.RegisterWorkflow(reg, flow.Workflow[map[string]int, []int]{CodeVersion: "test/v1",
		Name: "abc", Defaults: map[string]int{"x": 1},
		Run: func(ctx context.Context, in map[string]int) ([]int, error) {
			a, err := flow.Step(ctx, "a", in["x"], func(ctx context.Context, x int) (int, error) {
				return int(w.a.Add(1)) * 100, w.maybeCrash(ctx, "a")
			})
			if err != nil {
				return nil, err
			}
			name, input := "b", a
			switch w.variant.Load() {
			case 1: // b with a different input
				input = a + 1
			case 2: // another call where b was
				name = "b2"
			}
			b, err := flow.Step(ctx, name, input, func(ctx context.Context, x int) (int, error) {
				w.b.Add(1)
				return x + 1, w.maybeCrash(ctx, "b")
			})
			if err != nil {
				return nil, err
			}
			if w.variant.Load() == 3 { // ends before c
				return []int{a, b}, nil
			}
			c, err := flow.Step(ctx, "c", b, func(ctx context.Context, x int) (int, error) {
				w.c.Add(1)
				return x * 2, w.maybeCrash(ctx, "c")
			}, flow.WithEffect(flow.Read))
			return []int{a, b, c}, err
		},
	}))
}

// crashIn runs abc until the step crashes and checks the run was abandoned.
func (w *abc) crashIn(t *testing.T, e *env, runID, step string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.crash.Store(&crashPoint{step: step, cancel: cancel})
	out, err := e.rt.Run(ctx, host.RunParams{RunID: runID, Target: "abc"})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("crashed run: %+v, %v; want context.Canceled", out, err)
	}
	if out.Terminal != nil {
		t.Fatalf("a crashed run has a terminal event: %+v", out.Terminal)
	}
}

func TestResumeAfterCrash(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var w abc
	w.register(t, e.reg)
	w.crashIn(t, e, "r1", "b")
	checkTrace(t, e, "r1", []string{"run:start", "call:start step:a:0", "call:done step:a:0", "call:start step:b:0"})

	out := e.run(t, "r1", "abc")
	if out.Status != host.StatusComplete || string(out.Result) != `[100,101,202]` {
		t.Fatalf("resumed: %+v", out)
	}
	// a finished before the crash: not run again. b was in flight: run again.
	if a, b, c := w.a.Load(), w.b.Load(), w.c.Load(); a != 1 || b != 2 || c != 1 {
		t.Errorf("side effects a=%d b=%d c=%d, want 1 2 1", a, b, c)
	}
	// No second call:start for b.
	checkTrace(t, e, "r1", []string{
		"run:start", "call:start step:a:0", "call:done step:a:0", "call:start step:b:0",
		"call:done step:b:0", "call:start step:c:0", "call:done step:c:0", "run:complete",
	})
	checkFingerprints(t, e.log)

	// Running a finished run again runs nothing and returns its outcome.
	again := e.run(t, "r1", "abc")
	if again.Status != host.StatusComplete || string(again.Result) != `[100,101,202]` || again.LastSeq != 8 {
		t.Errorf("finished run again: %+v", again)
	}
	if w.a.Load() != 1 || w.b.Load() != 2 {
		t.Error("a finished run ran again")
	}
}

func TestResumeCrashBetweenCalls(t *testing.T) {
	t.Parallel()
	var w abc
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := setup(t, withResolver(crashAt("step:c:0", cancel)))
	w.register(t, e.reg)
	if _, err := e.rt.Run(ctx, host.RunParams{RunID: "r", Target: "abc"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	checkTrace(t, e, "r", []string{"run:start", "call:start step:a:0", "call:done step:a:0", "call:start step:b:0", "call:done step:b:0"})

	// A new runtime on the same log (another worker) resumes the run.
	rt, err := host.NewRuntime(host.Config{Registry: e.reg, Log: e.log, Clock: flowtest.NewAutoClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	out, err := rt.Run(context.Background(), host.RunParams{RunID: "r", Target: "abc"})
	if err != nil || out.Status != host.StatusComplete {
		t.Fatalf("resume: %+v, %v", out, err)
	}
	if a, b, c := w.a.Load(), w.b.Load(), w.c.Load(); a != 1 || b != 1 || c != 1 {
		t.Errorf("side effects a=%d b=%d c=%d, want 1 1 1", a, b, c)
	}
}

func TestResumeDivergence(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		crashIn string
		variant int64
		want    []string // in the message
		stopKey string
		trace   []string
	}{
		{"changed input", "b", 1,
			[]string{"call 1 step:b:0: the journal recorded fingerprint ", ", the resumed run made it with fingerprint ", "(input 101)"},
			"step:b:0",
			[]string{"run:start", "call:start step:a:0", "call:done step:a:0", "call:start step:b:0", "run:error replay_input_changed"}},
		{"changed call", "b", 2,
			[]string{"call 1: the journal recorded step:b:0 (fingerprint ", "), the resumed run made step:b2:0 (fingerprint "},
			"step:b2:0",
			[]string{"run:start", "call:start step:a:0", "call:done step:a:0", "call:start step:b:0", "run:error replay_input_changed"}},
		{"recorded call not made", "c", 3,
			[]string{"the journal recorded call 2 step:c:0 (fingerprint ", ") but the resumed run ended without making it"},
			"step:c:0",
			[]string{"run:start", "call:start step:a:0", "call:done step:a:0", "call:start step:b:0", "call:done step:b:0",
				"call:start step:c:0", "run:error replay_input_changed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			var w abc
			w.register(t, e.reg)
			w.crashIn(t, e, "r", tt.crashIn)
			b := w.b.Load()
			w.variant.Store(tt.variant)
			out := e.run(t, "r", "abc")
			if out.Status != host.StatusError || out.Code != messages.ReplayInputChanged || out.StopKey != tt.stopKey || out.StopToken != "" {
				t.Fatalf("outcome %+v", out)
			}
			for _, s := range tt.want {
				if !strings.Contains(out.Message, s) {
					t.Errorf("message %q does not contain %q", out.Message, s)
				}
			}
			if w.b.Load() != b {
				t.Error("a diverged call ran")
			}
			checkTrace(t, e, "r", tt.trace)
		})
	}
}
