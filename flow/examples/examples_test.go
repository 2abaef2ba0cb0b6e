package examples_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/examples"
	"github.com/pyrula/caseworker/flow/flowtest"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/runevent"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

type env struct {
	reg   *flow.Registry
	fx    *examples.Effects
	log   *host.MemLog
	clock *flowtest.Clock
	rt    *host.Runtime
}

func setup(t *testing.T, clock *flowtest.Clock, resolver host.Resolver) *env {
	t.Helper()
	reg := flow.NewRegistry()
	fx, err := examples.Register(reg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{reg: reg, fx: fx, log: host.NewMemLog(), clock: clock}
	e.rt, err = host.NewRuntime(host.Config{Registry: reg, Log: e.log, Clock: clock, Resolver: resolver,
		Random: func() float64 { return 0.5 }})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func checkTrace(t *testing.T, log *host.MemLog, runID string, want []string) {
	t.Helper()
	if got := flowtest.Trace(log.Events(runID)); !slices.Equal(got, want) {
		t.Errorf("events of %s:\n got %q\nwant %q", runID, got, want)
	}
}

func calls(ids ...string) []string {
	var out []string
	for _, id := range ids {
		out = append(out, "call:start "+id, "call:done "+id)
	}
	return out
}

func join(parts ...[]string) []string { return slices.Concat(parts...) }

var (
	checkoutTrace = join([]string{"run:start"}, calls("step:quote:0", "step:reserve:0", "sleep:0", "now:0", "random:0",
		"step:sigsend:0", "signal:approval:0", "step:format_receipt:0", "step:child:0"), []string{"run:complete"})
	sendReceiptTrace = join([]string{"run:start"}, calls("step:send_email:0"), []string{"run:complete"})
	supportTrace     = join([]string{"run:start"}, calls("model:0", "tool:toolu_01", "model:1", "tool:toolu_02", "model:2",
		"tool:toolu_03", "model:3"), []string{"run:complete"})
	policyTrace = join([]string{"run:start"}, calls("model:0"), []string{"run:complete"})
)

func TestCheckout(t *testing.T) {
	t.Parallel()
	e := setup(t, flowtest.NewAutoClock(t0), nil)
	out, err := e.rt.Run(context.Background(), host.RunParams{RunID: "r", Target: examples.Checkout})
	if err != nil || out.Status != host.StatusComplete {
		t.Fatalf("%+v %v", out, err)
	}
	want := `{"confirmation":"C500000","confirmed_at":"2026-11-30T10:00:00Z","currency":"EUR","message_id":"msg_0001@example.com",` +
		`"receipt":"2 x SKU-42: EUR 39.98, reservation rsv_0001, confirmation C500000 at 2026-11-30T10:00:00Z",` +
		`"reservation_id":"rsv_0001","status":"confirmed","total_minor":3998}`
	if string(out.Result) != want {
		t.Errorf("result %s\nwant %s", out.Result, want)
	}
	checkTrace(t, e.log, "r", checkoutTrace)
	checkTrace(t, e.log, "r/child:0", sendReceiptTrace)
	if q, r, m := e.fx.Quotes.Load(), e.fx.Reservations.Load(), e.fx.Emails.Load(); q != 1 || r != 1 || m != 1 {
		t.Errorf("effects quotes=%d reservations=%d emails=%d", q, r, m)
	}
	if got := e.clock.Waits(); !slices.Equal(got, []time.Duration{10 * time.Millisecond}) {
		t.Errorf("waits %v", got)
	}
	// Every result is recorded, with the effects of the registration.
	effects := map[string]string{}
	for _, ev := range e.log.Events("r") {
		if ev.Kind == runevent.CallStart {
			effects[ev.Call.ID()] = string(ev.Call.Effect)
		}
	}
	for id, want := range map[string]string{"step:quote:0": "read", "step:reserve:0": "write", "step:format_receipt:0": "pure",
		"sleep:0": "pure", "now:0": "pure", "random:0": "pure", "step:sigsend:0": "write", "signal:approval:0": "read", "step:child:0": "write"} {
		if effects[id] != want {
			t.Errorf("%s effect %q, want %q", id, effects[id], want)
		}
	}
	if n := len(e.log.Results("r")); n != 9 {
		t.Errorf("%d results, want 9", n)
	}
}

func TestSupportAgent(t *testing.T) {
	t.Parallel()
	e := setup(t, flowtest.NewAutoClock(t0), nil)
	out, err := e.rt.Run(context.Background(), host.RunParams{RunID: "s", Target: examples.SupportAgent})
	if err != nil || out.Status != host.StatusComplete {
		t.Fatalf("%+v %v", out, err)
	}
	if want := `{"reply":"I've issued a refund of EUR 39.98 (re_0001); you'll see it in 3–5 days.","turns":4}`; string(out.Result) != want {
		t.Errorf("result %s", out.Result)
	}
	checkTrace(t, e.log, "s", supportTrace)
	checkTrace(t, e.log, "s/tool:toolu_02", policyTrace)
	tools := map[string]string{}
	for _, ev := range e.log.Events("s") {
		if ev.Kind == runevent.CallStart && ev.Call.Kind == host.KindTool {
			tools[ev.Call.Key] = ev.Tool + " " + string(ev.Call.Effect)
		}
		if ev.Kind == runevent.CallStart && ev.Call.ID() == "model:0" {
			var in struct{ Model string }
			if err := json.Unmarshal(ev.Input, &in); err != nil || in.Model != examples.SupportModel {
				t.Errorf("model:0 input %s", ev.Input)
			}
		}
	}
	if want := map[string]string{"toolu_01": "lookup_order read", "toolu_02": "refund_policy read", "toolu_03": "refund write"}; !equalMaps(tools, want) {
		t.Errorf("tool calls %v, want %v", tools, want)
	}
	if l, r := e.fx.Lookups.Load(), e.fx.Refunds.Load(); l != 1 || r != 1 {
		t.Errorf("lookups=%d refunds=%d", l, r)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestRegistration(t *testing.T) {
	t.Parallel()
	e := setup(t, flowtest.NewAutoClock(t0), nil)
	checkout, _ := e.reg.Lookup(examples.Checkout)
	wantSteps := []bundle.Step{
		{ID: "quote", Name: "quote", Effect: "read"},
		{ID: "reserve", Name: "reserve", Effect: "write"},
		{ID: "format_receipt", Name: "format_receipt", Effect: "pure"},
		{ID: "sigsend:0", Name: "approval", Effect: "write"},
		{ID: "child:0", Name: "send_receipt", Effect: "write"},
	}
	if !slices.Equal(checkout.Registration.Steps, wantSteps) || len(checkout.Registration.Tools) != 0 || checkout.Kind != bundle.KindWorkflow {
		t.Errorf("checkout %+v", checkout)
	}
	agent, _ := e.reg.Lookup(examples.SupportAgent)
	wantTools := []bundle.Tool{{Name: "lookup_order", Writes: false}, {Name: "refund", Writes: true}, {Name: "refund_policy", Writes: false}}
	if !slices.Equal(agent.Registration.Tools, wantTools) || agent.Kind != bundle.KindAgent || agent.Model != examples.SupportModel {
		t.Errorf("support_agent %+v", agent)
	}
	// Every example target runs to completion with no inputs.
	for _, ti := range e.reg.Targets() {
		out, err := e.rt.Run(context.Background(), host.RunParams{RunID: "defaults-" + ti.Name, Target: ti.Name})
		if err != nil || out.Status != host.StatusComplete {
			t.Errorf("%s with no inputs: %+v %v", ti.Name, out, err)
		}
		if ev := e.log.Events("defaults-" + ti.Name)[0]; string(ev.Inputs) != string(ti.Inputs) || ev.CodeVersion != examples.CodeVersion {
			t.Errorf("%s run:start %+v, inputs %s", ti.Name, ev, ti.Inputs)
		}
	}
}

func TestCheckoutResumeAfterCrashInSleep(t *testing.T) {
	t.Parallel()
	clock := flowtest.NewClock(t0)
	e := setup(t, clock, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := e.rt.Run(ctx, host.RunParams{RunID: "r", Target: examples.Checkout})
		done <- err
	}()
	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer wcancel()
	if !clock.WaitForSleepers(wctx, 1) {
		t.Fatal("checkout never slept")
	}
	clock.Advance(4 * time.Millisecond)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	checkTrace(t, e.log, "r", join([]string{"run:start"}, calls("step:quote:0", "step:reserve:0"), []string{"call:start sleep:0"}))

	go func() {
		_, err := e.rt.Run(context.Background(), host.RunParams{RunID: "r", Target: examples.Checkout})
		done <- err
	}()
	if !clock.WaitForSleepers(wctx, 1) {
		t.Fatal("the resumed checkout never slept")
	}
	clock.Advance(6 * time.Millisecond)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkTrace(t, e.log, "r", checkoutTrace)
	if got := clock.Waits(); !slices.Equal(got, []time.Duration{10 * time.Millisecond, 6 * time.Millisecond}) {
		t.Errorf("waits %v, want [10ms 6ms]", got)
	}
	if q, r, m := e.fx.Quotes.Load(), e.fx.Reservations.Load(), e.fx.Emails.Load(); q != 1 || r != 1 || m != 1 {
		t.Errorf("effects quotes=%d reservations=%d emails=%d, want 1 each", q, r, m)
	}
}

// crashAt cancels the run when the run runID asks about the call id, as a
// crash would, and runs everything else live.
func crashAt(runID, id string, cancel context.CancelFunc) host.Resolver {
	var once sync.Once
	return host.ResolverFunc(func(ctx context.Context, c host.Call) (host.Resolution, error) {
		crash := false
		if c.RunID == runID && c.ID() == id {
			once.Do(func() { crash = true })
		}
		if crash {
			cancel()
			return host.Resolution{}, ctx.Err()
		}
		return host.Live(), nil
	})
}

func TestResumeAfterCrash(t *testing.T) {
	t.Parallel()
	tests := []struct {
		target, crashRun, crashAt string
		runs                      map[string][]string // traces after the resume
	}{
		{examples.Checkout, "r/child:0", "step:send_email:0", map[string][]string{"r": checkoutTrace, "r/child:0": sendReceiptTrace}},
		{examples.Checkout, "r", "step:format_receipt:0", map[string][]string{"r": checkoutTrace, "r/child:0": sendReceiptTrace}},
		{examples.SupportAgent, "r", "model:3", map[string][]string{"r": supportTrace, "r/tool:toolu_02": policyTrace}},
		{examples.SupportAgent, "r/tool:toolu_02", "model:0", map[string][]string{"r": supportTrace, "r/tool:toolu_02": policyTrace}},
	}
	for _, tt := range tests {
		t.Run(tt.crashRun+"/"+tt.crashAt, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			e := setup(t, flowtest.NewAutoClock(t0), crashAt(tt.crashRun, tt.crashAt, cancel))
			if _, err := e.rt.Run(ctx, host.RunParams{RunID: "r", Target: tt.target}); !errors.Is(err, context.Canceled) {
				t.Fatalf("want a crash, got %v", err)
			}
			out, err := e.rt.Run(context.Background(), host.RunParams{RunID: "r", Target: tt.target})
			if err != nil || out.Status != host.StatusComplete {
				t.Fatalf("%+v %v", out, err)
			}
			for runID, want := range tt.runs {
				checkTrace(t, e.log, runID, want)
			}
			for name, n := range map[string]int64{"quotes": e.fx.Quotes.Load(), "reservations": e.fx.Reservations.Load(),
				"emails": e.fx.Emails.Load(), "lookups": e.fx.Lookups.Load(), "refunds": e.fx.Refunds.Load()} {
				if n > 1 {
					t.Errorf("%s ran %d times", name, n)
				}
			}
		})
	}
}
