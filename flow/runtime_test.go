package flow_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/flowtest"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/internal/testwait"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
)

// runAsync runs a run in a goroutine; the returned function waits for it.
func runAsync(ctx context.Context, rt *host.Runtime, p host.RunParams) func() (host.Outcome, error) {
	var out host.Outcome
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		out, err = rt.Run(ctx, p)
	}()
	return func() (host.Outcome, error) { <-done; return out, err }
}

func TestNowRandomDeterministicAcrossResume(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var w abc
	mustRegister(t, flow.RegisterWorkflow(e.reg, flow.Workflow[none, []string]{CodeVersion: "test/v1",
		Name: "clocky",
		Run: func(ctx context.Context, _ none) ([]string, error) {
			now, err := flow.Now(ctx)
			if err != nil {
				return nil, err
			}
			x, err := flow.Random(ctx)
			if err != nil {
				return nil, err
			}
			_, err = flow.Step(ctx, "after", 0, func(ctx context.Context, _ int) (int, error) { return 0, w.maybeCrash(ctx, "after") })
			now2, _ := flow.Now(ctx)
			return []string{now.Format(time.RFC3339Nano), jsonOf(x), now2.Format(time.RFC3339)}, err
		},
	}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.crash.Store(&crashPoint{step: "after", cancel: cancel})
	if _, err := e.rt.Run(ctx, host.RunParams{RunID: "r", Target: "clocky"}); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	// Resume on another runtime whose clock and randomness differ.
	later := t0.Add(time.Hour)
	rt, err := host.NewRuntime(host.Config{Registry: e.reg, Log: e.log, Clock: flowtest.NewAutoClock(later),
		Random: func() float64 { return 0.875 }})
	if err != nil {
		t.Fatal(err)
	}
	out, err := rt.Run(context.Background(), host.RunParams{RunID: "r", Target: "clocky"})
	if err != nil || out.Status != host.StatusComplete {
		t.Fatalf("%+v %v", out, err)
	}
	want := `["2026-11-30T10:00:00Z","0.125","2026-11-30T11:00:00Z"]`
	if string(out.Result) != want {
		t.Errorf("result %s, want %s (now:0 and random:0 from the journal, now:1 live)", out.Result, want)
	}
	if got := result(t, e.log, "r", "now:0"); string(got) != `"2026-11-30T10:00:00Z"` {
		t.Errorf("now:0 recorded %s", got)
	}
}

func jsonOf(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestSleepResumeWaitsRemainingTime(t *testing.T) {
	t.Parallel()
	e := setup(t, withManualClock())
	var steps atomic.Int64
	mustRegister(t, flow.RegisterWorkflow(e.reg, flow.Workflow[none, string]{
		CodeVersion: "test/v1",
		Name:        "sleepy",
		Run: func(ctx context.Context, _ none) (string, error) {
			if _, err := flow.Step(ctx, "a", 0, func(context.Context, int) (int64, error) { return steps.Add(1), nil }); err != nil {
				return "", err
			}
			if err := flow.Sleep(ctx, 10*time.Second); err != nil {
				return "", err
			}
			now, err := flow.Now(ctx)
			return now.Format(time.RFC3339), err
		},
	}))
	ctx, cancel := context.WithCancel(context.Background())
	wait := runAsync(ctx, e.rt, host.RunParams{RunID: "r", Target: "sleepy"})
	testwait.Eventually(t, 5*time.Second, "the sleep", func() bool { return e.clock.Sleepers() == 1 })
	e.clock.Advance(7 * time.Second)
	cancel() // crash 7s into the 10s sleep
	if _, err := wait(); !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	checkTrace(t, e, "r", []string{"run:start", "call:start step:a:0", "call:done step:a:0", "call:start sleep:0"})

	wait = runAsync(context.Background(), e.rt, host.RunParams{RunID: "r", Target: "sleepy"})
	testwait.Eventually(t, 5*time.Second, "the resumed sleep", func() bool { return e.clock.Sleepers() == 1 })
	e.clock.Advance(3 * time.Second)
	out, err := wait()
	if err != nil || out.Status != host.StatusComplete {
		t.Fatalf("%+v %v", out, err)
	}
	if got := e.clock.Waits(); !slices.Equal(got, []time.Duration{10 * time.Second, 3 * time.Second}) {
		t.Errorf("waits %v, want [10s 3s]", got)
	}
	if string(out.Result) != `"2026-11-30T10:00:10Z"` {
		t.Errorf("woke at %s", out.Result)
	}
	if steps.Load() != 1 {
		t.Errorf("step a ran %d times", steps.Load())
	}
	if got := result(t, e.log, "r", "sleep:0"); string(got) != "null" {
		t.Errorf("sleep result %s", got)
	}
}

func TestRecordedErrorsReplayAsErrors(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var w abc
	var runs atomic.Int64
	var seen [][]*flow.CallError
	var mu sync.Mutex
	mustRegister(t, flow.RegisterWorkflow(e.reg, flow.Workflow[none, []string]{CodeVersion: "test/v1",
		Name: "errs",
		Run: func(ctx context.Context, _ none) ([]string, error) {
			_, err1 := flow.Step(ctx, "coupon", "SPRING-24", func(_ context.Context, c string) (int, error) {
				runs.Add(1)
				return 0, flow.Errorf("CouponExpired", "coupon %s expired", c)
			}, flow.WithEffect(flow.Read))
			_, err2 := flow.Step(ctx, "plain", 1, func(context.Context, int) (int, error) {
				runs.Add(1)
				return 0, errors.New("boom")
			})
			var ce1, ce2 *flow.CallError
			if !errors.As(err1, &ce1) || !errors.As(err2, &ce2) {
				t.Errorf("errors are not *CallError: %T %T", err1, err2)
				return nil, errors.New("bad errors")
			}
			mu.Lock()
			seen = append(seen, []*flow.CallError{ce1, ce2})
			mu.Unlock()
			_, err := flow.Step(ctx, "after", 0, func(ctx context.Context, _ int) (int, error) { return 0, w.maybeCrash(ctx, "after") })
			return []string{err1.Error(), err2.Error()}, err
		},
	}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.crash.Store(&crashPoint{step: "after", cancel: cancel})
	if _, err := e.rt.Run(ctx, host.RunParams{RunID: "r", Target: "errs"}); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	out := e.run(t, "r", "errs")
	if out.Status != host.StatusComplete || string(out.Result) != `["CouponExpired: coupon SPRING-24 expired","error: boom"]` {
		t.Fatalf("%+v", out)
	}
	if runs.Load() != 2 {
		t.Errorf("failing steps ran %d times, want 2 (once each)", runs.Load())
	}
	if len(seen) != 2 || *seen[0][0] != *seen[1][0] || *seen[0][1] != *seen[1][1] {
		t.Errorf("replayed errors differ from live ones: %+v", seen)
	}
	if got := result(t, e.log, "r", "step:coupon:0"); string(got) != `{"message":"coupon SPRING-24 expired","type":"CouponExpired"}` {
		t.Errorf("recorded error %s", got)
	}
	for _, r := range e.log.Results("r") {
		if r.Key == "plain:0" && (r.Result != nil || string(r.Error) != `{"message":"boom","type":"error"}`) {
			t.Errorf("plain:0 record %+v", r)
		}
	}
}

func registerApproval(t *testing.T, reg *flow.Registry, a *atomic.Int64) {
	t.Helper()
	mustRegister(t, flow.RegisterWorkflow(reg, flow.Workflow[none, string]{
		CodeVersion: "test/v1",
		Name:        "approval",
		Run: func(ctx context.Context, _ none) (string, error) {
			if _, err := flow.Step(ctx, "a", 0, func(context.Context, int) (int64, error) { return a.Add(1), nil }); err != nil {
				return "", err
			}
			ans, err := flow.Interrupt(ctx, "approve", map[string]string{"question": "refund?"})
			if err != nil {
				return "", err
			}
			return ans.Action + " " + string(ans.Value), nil
		},
	}))
}

func TestInterruptSuspendsAndResumes(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var a atomic.Int64
	registerApproval(t, e.reg, &a)
	out := e.run(t, "r", "approval")
	if out.Status != host.StatusSuspended || out.SuspendedAt != "interrupt:approve:0" || out.Terminal != nil {
		t.Fatalf("%+v", out)
	}
	if !errors.Is(out.Err(), flow.ErrSuspended) {
		t.Errorf("Err() = %v", out.Err())
	}
	checkTrace(t, e, "r", []string{"run:start", "call:start step:a:0", "call:done step:a:0", "call:start interrupt:approve:0"})
	// Still no answer: still suspended, nothing appended.
	if out := e.run(t, "r", "approval"); out.Status != host.StatusSuspended || len(trace(e, "r")) != 4 {
		t.Fatalf("%+v", out)
	}
	e.inbox.SetAnswer("r", "approve:0", flow.InterruptAnswer{Action: "approve", Value: json.RawMessage(`"yes"`)})
	out = e.run(t, "r", "approval")
	if out.Status != host.StatusComplete || string(out.Result) != `"approve \"yes\""` {
		t.Fatalf("%+v", out)
	}
	if a.Load() != 1 {
		t.Errorf("a ran %d times", a.Load())
	}
	checkTrace(t, e, "r", []string{"run:start", "call:start step:a:0", "call:done step:a:0", "call:start interrupt:approve:0",
		"call:done interrupt:approve:0", "run:complete"})
}

func TestChildSuspensionSuspendsParent(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var a atomic.Int64
	registerApproval(t, e.reg, &a)
	mustRegister(t, flow.RegisterWorkflow(e.reg, flow.Workflow[none, string]{
		CodeVersion: "test/v1",
		Name:        "parent", Steps: []flow.Decl{flow.DeclareChild("approval")},
		Run: func(ctx context.Context, _ none) (string, error) {
			return flow.Child[string](ctx, flow.ChildParams{Target: "approval"})
		},
	}))
	if out := e.run(t, "p", "parent"); out.Status != host.StatusSuspended || out.SuspendedAt != "step:child:0" {
		t.Fatalf("%+v", out)
	}
	e.inbox.SetAnswer("p/child:0", "approve:0", flow.InterruptAnswer{Action: "ok", Value: json.RawMessage(`1`)})
	if out := e.run(t, "p", "parent"); out.Status != host.StatusComplete || string(out.Result) != `"ok 1"` {
		t.Fatalf("%+v", out)
	}
	if a.Load() != 1 {
		t.Errorf("the child's step ran %d times", a.Load())
	}
	checkTrace(t, e, "p", []string{"run:start", "call:start step:child:0", "call:done step:child:0", "run:complete"})
}

func TestCancelWritesRunCancelled(t *testing.T) {
	t.Parallel()
	e := setup(t, withManualClock())
	mustRegister(t, flow.RegisterWorkflow(e.reg, flow.Workflow[none, int]{
		CodeVersion: "test/v1",
		Name:        "long",
		Run: func(ctx context.Context, _ none) (int, error) {
			return 0, flow.Sleep(ctx, time.Hour)
		},
	}))
	ctx, cancel := context.WithCancelCause(context.Background())
	wait := runAsync(ctx, e.rt, host.RunParams{RunID: "r", Target: "long"})
	testwait.Eventually(t, 5*time.Second, "the sleep", func() bool { return e.clock.Sleepers() == 1 })
	cancel(flow.ErrRunCancelled)
	out, err := wait()
	if err != nil || out.Status != host.StatusCancelled || out.Code != messages.Cancelled {
		t.Fatalf("%+v %v", out, err)
	}
	checkTrace(t, e, "r", []string{"run:start", "call:start sleep:0", "run:cancelled"})
}

func TestTargetFailures(t *testing.T) {
	t.Parallel()
	e := setup(t)
	mustRegister(t, flow.RegisterWorkflow(e.reg, flow.Workflow[none, int]{
		CodeVersion: "test/v1",
		Name:        "fails", Run: func(context.Context, none) (int, error) { return 0, errors.New("out of stock") },
	}))
	mustRegister(t, flow.RegisterWorkflow(e.reg, flow.Workflow[none, int]{
		CodeVersion: "test/v1",
		Name:        "panics", Run: func(context.Context, none) (int, error) { panic("oops") },
	}))
	mustRegister(t, flow.RegisterWorkflow(e.reg, flow.Workflow[none, int]{
		CodeVersion: "test/v1",
		Name:        "nested", Steps: []flow.Decl{flow.DeclareStep("outer", flow.Read)},
		Run: func(ctx context.Context, _ none) (int, error) {
			_, err := flow.Step(ctx, "outer", 0, func(ctx context.Context, _ int) (int, error) {
				_, err := flow.Step(ctx, "inner", 0, func(context.Context, int) (int, error) { return 0, nil })
				return 0, err
			})
			if _, err := flow.Step(ctx, "outer", 1, func(context.Context, int) (int, error) { return 0, nil }, flow.WithEffect(flow.Write)); err == nil {
				t.Error("an effect that differs from the declaration was accepted")
			}
			return 0, err
		},
	}))
	tests := []struct {
		target, code, message string
	}{
		{"fails", "runtime_error", "out of stock"},
		{"panics", "runtime_error", "panic: oops"},
		{"nested", "runtime_error", "step outer: effect write at the call, but nested declared read"},
	}
	for _, tt := range tests {
		out := e.run(t, tt.target, tt.target)
		if out.Status != host.StatusError || string(out.Code) != tt.code || out.Message != tt.message || out.StopKey != "" {
			t.Errorf("%s: %+v", tt.target, out)
		}
		raw := e.log.EventsJSON(tt.target)
		if last := string(raw[len(raw)-1]); !strings.Contains(last, `"stop_key":null,"stop_token":null`) {
			t.Errorf("%s: terminal %s", tt.target, last)
		}
	}
	if got := result(t, e.log, "nested", "step:outer:0"); !strings.Contains(string(got), "flow: call outside a run") {
		t.Errorf("a call inside a step: %s", got)
	}
	if _, err := flow.Now(context.Background()); !errors.Is(err, flow.ErrNoRun) {
		t.Errorf("a call outside a run: %v", err)
	}
}

func TestInputs(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var w abc
	w.register(t, e.reg)
	ctx := context.Background()
	for _, in := range []map[string]json.RawMessage{{"y": json.RawMessage(`1`)}, {"x": json.RawMessage(`"one"`)}, {"x": json.RawMessage(`{`)}} {
		if _, err := e.rt.Run(ctx, host.RunParams{RunID: "bad", Target: "abc", Inputs: in}); !errors.Is(err, host.ErrInvalidInputs) {
			t.Errorf("inputs %s: %v", in, err)
		}
	}
	if e.log.Events("bad") != nil {
		t.Error("a refused run was journaled")
	}
	if _, err := e.rt.Run(ctx, host.RunParams{RunID: "x", Target: "nope"}); !errors.Is(err, host.ErrUnknownTarget) {
		t.Errorf("unknown target: %v", err)
	}
	out, err := e.rt.Run(ctx, host.RunParams{RunID: "ok", Target: "abc", Inputs: map[string]json.RawMessage{"x": json.RawMessage(`5`)}})
	if err != nil || out.Status != host.StatusComplete {
		t.Fatal(out, err)
	}
	if ev := e.log.Events("ok")[0]; string(ev.Inputs) != `{"x":5}` || ev.Kind != runevent.RunStart {
		t.Errorf("run:start %+v", ev)
	}
}

func TestSignalTimeout(t *testing.T) {
	t.Parallel()
	e := setup(t, withManualClock())
	mustRegister(t, flow.RegisterWorkflow(e.reg, flow.Workflow[none, []any]{CodeVersion: "test/v1",
		Name: "waits",
		Run: func(ctx context.Context, _ none) ([]any, error) {
			p, ok, err := flow.ReceiveSignal[string](ctx, "go", 5*time.Second)
			return []any{p, ok}, err
		},
	}))
	wait := runAsync(context.Background(), e.rt, host.RunParams{RunID: "r", Target: "waits"})
	testwait.Eventually(t, 5*time.Second, "the signal timer", func() bool { return e.clock.Sleepers() == 1 })
	e.clock.Advance(5 * time.Second)
	out, err := wait()
	if err != nil || string(out.Result) != `["",false]` {
		t.Fatalf("%+v %v", out, err)
	}
	if got := result(t, e.log, "r", "signal:go:0"); string(got) != `{"payload":null,"timed_out":true}` {
		t.Errorf("recorded %s", got)
	}
	// A signal sent in time wins.
	if err := e.inbox.Send(context.Background(), flow.SignalParams{RunID: "r2", Name: "go", Payload: "now"}); err != nil {
		t.Fatal(err)
	}
	if out := e.run(t, "r2", "waits"); string(out.Result) != `["now",true]` {
		t.Errorf("%+v", out)
	}
}

// TestUndeclaredChildStops checks that a body starting a child run, sending
// a signal or gathering under a name its registration does not declare
// stops with runtime_error naming the target and the declaration to add.
func TestUndeclaredChildStops(t *testing.T) {
	t.Parallel()
	e := setup(t)
	registerLeaf(t, e.reg)
	bodies := map[string]func(ctx context.Context) error{
		"child": func(ctx context.Context) error {
			_, err := flow.Child[int](ctx, flow.ChildParams{Target: "leaf"})
			return err
		},
		"sigsend": func(ctx context.Context) error {
			return flow.SendSignal(ctx, flow.SignalParams{RunID: "elsewhere", Name: "go", Payload: 1})
		},
		"gather": func(ctx context.Context) error {
			_, err := flow.Gather[int](ctx, "fan", []flow.ChildParams{{Target: "leaf"}})
			return err
		},
	}
	want := map[string]string{
		"child":   `undeclared_child: a child run of "leaf" is not declared: add flow.DeclareChild("leaf") to the target's Steps`,
		"sigsend": `undeclared_sigsend: a signal send of "go" is not declared: add flow.DeclareSignalSend("go") to the target's Steps`,
		"gather":  `undeclared_gather: the gather "fan" is not declared: add flow.DeclareGather("fan") to the target's Steps`,
	}
	for name, body := range bodies {
		mustRegister(t, flow.RegisterWorkflow(e.reg, flow.Workflow[none, int]{CodeVersion: "test/v1",
			Name: "undeclared_" + name,
			Run:  func(ctx context.Context, _ none) (int, error) { return 0, body(ctx) },
		}))
		out := e.run(t, "r-"+name, "undeclared_"+name)
		if out.Status != host.StatusError || out.Code != messages.RuntimeError || out.Message != want[name] {
			t.Errorf("%s: %s %s %q, want error runtime_error %q", name, out.Status, out.Code, out.Message, want[name])
		}
	}
}

func TestGatherAndChildErrors(t *testing.T) {
	t.Parallel()
	e := setup(t)
	registerLeaf(t, e.reg)
	mustRegister(t, flow.RegisterWorkflow(e.reg, flow.Workflow[map[string]int, int]{CodeVersion: "test/v1",
		Name: "broken", Defaults: map[string]int{"x": 0},
		Run: func(context.Context, map[string]int) (int, error) { return 0, errors.New("no") },
	}))
	mustRegister(t, flow.RegisterWorkflow(e.reg, flow.Workflow[none, []string]{CodeVersion: "test/v1",
		Name: "fan", Steps: []flow.Decl{flow.DeclareGather("g"), flow.DeclareChild("leaf")},
		Run: func(ctx context.Context, _ none) ([]string, error) {
			_, err1 := flow.Gather[int](ctx, "g", []flow.ChildParams{{Target: "leaf"}, {Target: "broken"}})
			_, err2 := flow.Child[int](ctx, flow.ChildParams{Target: "leaf", Inputs: map[string]int{"nope": 1}})
			return []string{err1.Error(), err2.Error()}, nil
		},
	}))
	out := e.run(t, "r", "fan")
	want := `["runtime_error: child 1: child run r/gather:g/1: no","invalid_inputs: flow: invalid inputs: leaf accepts no input \"nope\" (it accepts x)"]`
	if string(out.Result) != want {
		t.Errorf("result %s\nwant %s", out.Result, want)
	}
}

func TestMemLogErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	log := host.NewMemLog()
	res := bundle.Result{Key: "a:0", Kind: "step", Fingerprint: "f", Result: json.RawMessage(`1`)}
	if _, err := log.Append(ctx, "r", host.Batch{Results: []bundle.Result{res}}); err != nil {
		t.Fatal(err)
	}
	if _, err := log.Append(ctx, "r", host.Batch{Results: []bundle.Result{res}}); !errors.Is(err, host.ErrResultExists) {
		t.Errorf("duplicate result: %v", err)
	}
	if _, err := log.Finish(ctx, "r", host.Event{Kind: runevent.CallDone}); err == nil {
		t.Error("Finish with a call:done")
	}
	if seq, err := log.Finish(ctx, "r", host.Event{Kind: runevent.RunCancelled, At: t0}); err != nil || seq != 1 {
		t.Errorf("finish: %d %v", seq, err)
	}
	if _, err := log.Append(ctx, "r", host.Batch{Events: []host.Event{{Kind: runevent.CaseCall, At: t0}}}); !errors.Is(err, host.ErrFinished) {
		t.Errorf("append after finish: %v", err)
	}
	if rec, err := log.Load(ctx, "unknown"); err != nil || rec.Events != nil || rec.Results != nil {
		t.Errorf("load unknown: %+v %v", rec, err)
	}
}

// failingLog fails the n-th Append (1-based) and every Finish when told.
type failingLog struct {
	*host.MemLog
	failAppend int64
	appends    atomic.Int64
	failFinish bool
}

var errDisk = errors.New("disk on fire")

func (l *failingLog) Append(ctx context.Context, runID string, b host.Batch) (int64, error) {
	if l.appends.Add(1) == l.failAppend {
		return 0, errDisk
	}
	return l.MemLog.Append(ctx, runID, b)
}

func (l *failingLog) Finish(ctx context.Context, runID string, ev host.Event) (int64, error) {
	if l.failFinish {
		return 0, errDisk
	}
	return l.MemLog.Finish(ctx, runID, ev)
}

func TestLogFailures(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name       string
		failAppend int64
		failFinish bool
		trace      []string
	}{
		{"call:done", 3, false, []string{"run:start", "call:start step:a:0"}},
		{"run:start", 1, false, nil},
		{"finish", 0, true, []string{"run:start", "call:start step:a:0", "call:done step:a:0",
			"call:start step:b:0", "call:done step:b:0", "call:start step:c:0", "call:done step:c:0"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			log := &failingLog{MemLog: host.NewMemLog(), failAppend: tt.failAppend, failFinish: tt.failFinish}
			reg := flow.NewRegistry()
			var w abc
			w.register(t, reg)
			rt, err := host.NewRuntime(host.Config{Registry: reg, Log: log, Clock: flowtest.NewAutoClock(t0)})
			if err != nil {
				t.Fatal(err)
			}
			out, err := rt.Run(context.Background(), host.RunParams{RunID: "r", Target: "abc"})
			if !errors.Is(err, errDisk) || out.Terminal != nil {
				t.Fatalf("%+v %v; want the log's error and no outcome", out, err)
			}
			if got := flowtest.Trace(log.Events("r")); !slices.Equal(got, tt.trace) {
				t.Errorf("events %q, want %q", got, tt.trace)
			}
		})
	}
}

func TestRunSubmittedBeforeStart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var w abc
	w.register(t, e.reg)
	sub := host.Event{Kind: runevent.RunSubmitted, At: t0, Extra: map[string]json.RawMessage{"run_id": json.RawMessage(`"r"`)}}
	if _, err := e.log.Append(context.Background(), "r", host.Batch{Events: []host.Event{sub}}); err != nil {
		t.Fatal(err)
	}
	if out := e.run(t, "r", "abc"); out.Status != host.StatusComplete || out.LastSeq != 9 {
		t.Fatalf("%+v", out)
	}
	if raw := e.log.EventsJSON("r"); string(raw[0]) != `{"at":"2026-11-30T10:00:00.000000Z","kind":"run:submitted","run_id":"r","run_seq":1}` {
		t.Errorf("first event %s", raw[0])
	}
	if got := trace(e, "r"); got[1] != "run:start" {
		t.Errorf("events %q", got)
	}
}
