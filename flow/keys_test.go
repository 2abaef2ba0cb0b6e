package flow_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/runevent"
)

// callLog is a resolver that records the calls it is asked about.
type callLog struct {
	mu    sync.Mutex
	calls []host.Call
}

func (l *callLog) Resolve(_ context.Context, c host.Call) (host.Resolution, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, c)
	return host.Live(), nil
}

type none struct{}

func registerLeaf(t *testing.T, reg *flow.Registry) {
	t.Helper()
	mustRegister(t, flow.RegisterWorkflow(reg, flow.Workflow[map[string]int, int]{CodeVersion: "test/v1",
		Name: "leaf", Defaults: map[string]int{"x": 1},
		Run: func(ctx context.Context, in map[string]int) (int, error) { return in["x"] * 10, nil },
	}))
}

func registerEverything(t *testing.T, reg *flow.Registry) {
	t.Helper()
	registerLeaf(t, reg)
	id := func(_ context.Context, in any) (any, error) { return in, nil }
	mustRegister(t, flow.RegisterWorkflow(reg, flow.Workflow[none, []any]{
		Name: "everything", CodeVersion: "v1",
		Steps: []flow.Decl{flow.DeclareStep("lookup", flow.Read), flow.DeclareSignalSend("go"), flow.DeclareChild("leaf"),
			flow.DeclareChild("leaf"), flow.DeclareGather("fan")},
		Run: func(ctx context.Context, _ none) ([]any, error) {
			var out []any
			keep := func(v any, err error) {
				if err != nil {
					t.Errorf("call: %v", err)
				}
				out = append(out, v)
			}
			keep(flow.Step(ctx, "plain", any(1), id))
			keep(flow.Step(ctx, "plain", any(2), id))
			keep(flow.Step(ctx, "lookup", any("x"), id))
			keep(flow.Step(ctx, "calc", any(3), id, flow.WithEffect(flow.Pure)))
			keep(nil, flow.Sleep(ctx, time.Millisecond))
			keep(nil, flow.Sleep(ctx, 0))
			keep(flow.Now(ctx))
			keep(flow.Random(ctx))
			keep(flow.Random(ctx))
			keep(nil, flow.SendSignal(ctx, flow.SignalParams{RunID: flow.RunID(ctx), Name: "go", Payload: 7}))
			p, ok, err := flow.ReceiveSignal[int](ctx, "go", 0)
			keep([]any{p, ok}, err)
			keep(flow.Interrupt(ctx, "approve", map[string]string{"question": "ship it?"}))
			keep(flow.ReadStream[map[string]int, int](ctx, "ticks", map[string]int{"from": 0}))
			keep(flow.ReadStream[map[string]int, int](ctx, "ticks", map[string]int{"from": 1}))
			keep(flow.Child[int](ctx, flow.ChildParams{Target: "leaf", Inputs: map[string]int{"x": 2}}))
			keep(flow.Gather[int](ctx, "fan", []flow.ChildParams{{Target: "leaf"}, {Target: "leaf", Inputs: map[string]int{"x": 3}}}))
			keep(flow.Child[int](ctx, flow.ChildParams{Target: "leaf"}))
			return out, nil
		},
	}))
}

// scriptedModel answers model calls from a script, by the number of
// assistant messages in the request.
type scriptedModel []flow.ModelResponse

func (s scriptedModel) Call(_ context.Context, req flow.ModelRequest) (flow.ModelResponse, error) {
	n := 0
	for _, m := range req.Messages {
		if m.Role == "assistant" {
			n++
		}
	}
	if n >= len(s) {
		return flow.ModelResponse{Role: "assistant", Content: []flow.Block{flow.TextBlock("done")}}, nil
	}
	return s[n], nil
}

func registerAgentAll(t *testing.T, reg *flow.Registry) {
	t.Helper()
	mustRegister(t, flow.RegisterAgent(reg, flow.Agent[map[string]string, string]{CodeVersion: "test/v1",
		Name: "sub", Model: "m-sub", Defaults: map[string]string{"q": "?"},
		Client: scriptedModel{},
		Run: func(ctx context.Context, in map[string]string) (string, error) {
			resp, err := flow.Model(ctx, flow.ModelRequest{Messages: []flow.Message{flow.UserText(in["q"])}})
			return resp.Text(), err
		},
	}))
	get := flow.NewTool("get", "read", func(_ context.Context, in map[string]string) (string, error) { return "got " + in["k"], nil }).ReadOnly()
	put := flow.NewTool("put", "write", func(_ context.Context, in map[string]string) (bool, error) { return true, nil })
	mustRegister(t, flow.RegisterAgent(reg, flow.Agent[map[string]string, string]{CodeVersion: "test/v1",
		Name: "agent_all", Model: "m-1", System: "be brief", Defaults: map[string]string{"q": "hello"},
		Tools: []flow.ToolDef{get, put, flow.SubAgentTool("ask_sub", "sub-agent", "sub")},
		Client: scriptedModel{{Role: "assistant", Content: []flow.Block{
			flow.ToolUseBlock("toolu_01", "get", map[string]string{"k": "a"}),
			flow.ToolUseBlock("toolu_02", "put", map[string]string{"k": "b"}),
			flow.ToolUseBlock("toolu_03", "ask_sub", map[string]string{"q": "why"}),
			flow.ToolUseBlock("toolu_04", "nope", map[string]string{}),
		}}},
		Run: func(ctx context.Context, in map[string]string) (string, error) {
			msgs := []flow.Message{flow.UserText(in["q"])}
			for {
				resp, err := flow.Model(ctx, flow.ModelRequest{Messages: msgs})
				if err != nil {
					return "", err
				}
				if len(resp.ToolUses()) == 0 {
					return resp.Text(), nil
				}
				res, err := flow.RunTools(ctx, resp)
				if err != nil {
					return "", err
				}
				msgs = append(msgs, resp.Message(), res)
			}
		},
	}))
}

// TestKeysEffects checks every call kind's key, effect and allow-write token
// against flow/README.md.
func TestKeysEffects(t *testing.T) {
	t.Parallel()
	calls := &callLog{}
	e := setup(t, withResolver(calls))
	registerEverything(t, e.reg)
	registerAgentAll(t, e.reg)
	e.inbox.SetAnswer("w", "approve:0", flow.InterruptAnswer{Action: "approve", Value: json.RawMessage(`true`)})
	for i := range 2 {
		if err := e.inbox.PushStream("ticks", 100+i); err != nil {
			t.Fatal(err)
		}
	}
	for _, target := range []string{"everything", "agent_all"} {
		runID := map[string]string{"everything": "w", "agent_all": "a"}[target]
		out := e.run(t, runID, target)
		if out.Status != host.StatusComplete {
			t.Fatalf("%s: %+v", target, out)
		}
	}
	type row struct {
		run, kind, key, effect, token, name string
	}
	want := []row{
		{"w", "step", "plain:0", "write", "step:plain", "plain"},
		{"w", "step", "plain:1", "write", "step:plain", "plain"},
		{"w", "step", "lookup:0", "read", "step:lookup", "lookup"},
		{"w", "step", "calc:0", "pure", "step:calc", "calc"},
		{"w", "sleep", "0", "pure", "", ""},
		{"w", "sleep", "1", "pure", "", ""},
		{"w", "now", "0", "pure", "", ""},
		{"w", "random", "0", "pure", "", ""},
		{"w", "random", "1", "pure", "", ""},
		{"w", "step", "sigsend:0", "write", "step:sigsend:0", "go"},
		{"w", "signal", "go:0", "read", "", "go"},
		{"w", "interrupt", "approve:0", "read", "", "approve"},
		{"w", "stream", "ticks:0", "read", "", "ticks"},
		{"w", "stream", "ticks:1", "read", "", "ticks"},
		{"w", "step", "child:0", "write", "step:child:0", "leaf"},
		{"w", "step", "gather:fan", "write", "step:gather:fan", "fan"},
		{"w", "step", "child:1", "write", "step:child:1", "leaf"},
		{"a", "model", "0", "read", "", ""},
		{"a", "tool", "toolu_01", "read", "tool:get", "get"},
		{"a", "tool", "toolu_02", "write", "tool:put", "put"},
		{"a", "tool", "toolu_03", "read", "tool:ask_sub", "ask_sub"},
		{"a", "tool", "toolu_04", "write", "tool:nope", "nope"},
		{"a", "model", "1", "read", "", ""},
	}
	var parents []row
	for _, c := range calls.calls {
		if c.RunID == "w" || c.RunID == "a" {
			parents = append(parents, row{c.RunID, string(c.Kind), c.Key, string(c.Effect), c.Token, c.Name})
		}
	}
	if !slices.Equal(parents, want) {
		t.Errorf("calls:\n got %v\nwant %v", parents, want)
	}
	checkFingerprints(t, e.log)

	// Children: run ids, and the sub-agent's own model call.
	wantRuns := []string{"a", "a/tool:toolu_03", "w", "w/child:0", "w/child:1", "w/gather:fan/0", "w/gather:fan/1"}
	if got := e.log.RunIDs(); !slices.Equal(got, wantRuns) {
		t.Errorf("runs %v, want %v", got, wantRuns)
	}
	checkTrace(t, e, "a/tool:toolu_03", []string{"run:start", "call:start model:0", "call:done model:0", "run:complete"})

	// Results as recorded.
	for id, want := range map[string]string{
		"step:plain:1":        `2`,
		"sleep:0":             `null`,
		"now:0":               `"2026-11-30T10:00:00.001Z"`,
		"random:0":            `0.125`,
		"random:1":            `0.25`,
		"step:sigsend:0":      `null`,
		"signal:go:0":         `{"payload":7}`,
		"interrupt:approve:0": `{"action":"approve","value":true}`,
		"stream:ticks:1":      `101`,
		"step:child:0":        `20`,
		"step:gather:fan":     `[10,30]`,
	} {
		if got := result(t, e.log, "w", id); string(got) != want {
			t.Errorf("result %s = %s, want %s", id, got, want)
		}
	}
	if got := result(t, e.log, "a", "tool:toolu_04"); string(got) != `{"message":"agent_all offers no tool \"nope\"","type":"unknown_tool"}` {
		t.Errorf("unknown tool error = %s", got)
	}
	// The sleep journals its wake time; the model input names model, system
	// and every tool.
	for _, ev := range e.log.Events("w") {
		if ev.Kind == runevent.CallStart && ev.Call.ID() == "sleep:0" && !ev.WakeAt.Equal(t0.Add(time.Millisecond)) {
			t.Errorf("sleep:0 wake_at %v", ev.WakeAt)
		}
	}
	for _, ev := range e.log.Events("a") {
		if ev.Kind == runevent.CallStart && ev.Call.ID() == "model:0" {
			want := `{"messages":[{"content":"hello","role":"user"}],"model":"m-1","system":"be brief","tools":["get","put","ask_sub"]}`
			if string(ev.Input) != want {
				t.Errorf("model:0 input %s, want %s", ev.Input, want)
			}
		}
		if ev.Kind == runevent.CallStart && ev.Call.Kind == host.KindTool && ev.Tool == "" {
			t.Errorf("%s: call:start has no tool name", ev.Call.ID())
		}
	}
}

func TestRegistration(t *testing.T) {
	t.Parallel()
	reg := flow.NewRegistry()
	registerEverything(t, reg)
	registerAgentAll(t, reg)
	info, ok := reg.Lookup("everything")
	if !ok {
		t.Fatal("everything not registered")
	}
	wantSteps := []bundle.Step{
		{ID: "lookup", Name: "lookup", Effect: "read"},
		{ID: "sigsend:0", Name: "go", Effect: "write"},
		{ID: "child:0", Name: "leaf", Effect: "write"},
		{ID: "child:1", Name: "leaf", Effect: "write"},
		{ID: "gather:fan", Name: "fan", Effect: "write"},
	}
	if !slices.Equal(info.Registration.Steps, wantSteps) || len(info.Registration.Tools) != 0 || info.Registration.Tools == nil {
		t.Errorf("everything registration %+v", info.Registration)
	}
	info, _ = reg.Lookup("agent_all")
	wantTools := []bundle.Tool{{Name: "get", Writes: false}, {Name: "put", Writes: true}, {Name: "ask_sub", Writes: false}}
	if !slices.Equal(info.Registration.Tools, wantTools) || info.Kind != bundle.KindAgent || info.Model != "m-1" {
		t.Errorf("agent_all %+v", info)
	}
	if string(info.Inputs) != `{"q":"hello"}` {
		t.Errorf("inputs %s", info.Inputs)
	}
	var names []string
	for _, ti := range reg.Targets() {
		names = append(names, ti.Name)
	}
	if !slices.Equal(names, []string{"agent_all", "everything", "leaf", "sub"}) {
		t.Errorf("targets %v", names)
	}

	run := func(context.Context, none) (int, error) { return 0, nil }
	bad := []struct {
		name string
		err  error
	}{
		{"duplicate", flow.RegisterWorkflow(reg, flow.Workflow[none, int]{Name: "leaf", CodeVersion: "v", Run: run})},
		{"no name", flow.RegisterWorkflow(reg, flow.Workflow[none, int]{CodeVersion: "v", Run: run})},
		{"no code version", flow.RegisterWorkflow(reg, flow.Workflow[none, int]{Name: "x", Run: run})},
		{"no run", flow.RegisterWorkflow(reg, flow.Workflow[none, int]{Name: "x", CodeVersion: "v"})},
		{"defaults not an object", flow.RegisterWorkflow(reg, flow.Workflow[int, int]{Name: "x", CodeVersion: "v", Run: func(context.Context, int) (int, error) { return 0, nil }})},
		{"reserved step", flow.RegisterWorkflow(reg, flow.Workflow[none, int]{Name: "x", CodeVersion: "v", Run: run, Steps: []flow.Decl{flow.DeclareStep("child", flow.Write)}})},
		{"bad effect", flow.RegisterWorkflow(reg, flow.Workflow[none, int]{Name: "x", CodeVersion: "v", Run: run, Steps: []flow.Decl{flow.DeclareStep("a", "delete")}})},
		{"duplicate step", flow.RegisterWorkflow(reg, flow.Workflow[none, int]{Name: "x", CodeVersion: "v", Run: run, Steps: []flow.Decl{flow.DeclareStep("a", flow.Read), flow.DeclareStep("a", flow.Read)}})},
		{"nil declaration", flow.RegisterWorkflow(reg, flow.Workflow[none, int]{Name: "x", CodeVersion: "v", Run: run, Steps: []flow.Decl{nil}})},
		{"child without target", flow.RegisterWorkflow(reg, flow.Workflow[none, int]{Name: "x", CodeVersion: "v", Run: run, Steps: []flow.Decl{flow.DeclareChild("")}})},
		{"agent without model", flow.RegisterAgent(reg, flow.Agent[none, int]{Name: "x", CodeVersion: "v", Run: run})},
		{"tool twice", flow.RegisterAgent(reg, flow.Agent[none, int]{Name: "x", CodeVersion: "v", Model: "m", Run: run,
			Tools: []flow.ToolDef{flow.SubAgentTool("t", "", "sub"), flow.SubAgentTool("t", "", "sub")}})},
		{"zero tool", flow.RegisterAgent(reg, flow.Agent[none, int]{Name: "x", CodeVersion: "v", Model: "m", Run: run, Tools: []flow.ToolDef{{}}})},
	}
	for _, b := range bad {
		if b.err == nil {
			t.Errorf("%s: registered", b.name)
		} else if !errors.Is(b.err, flow.ErrInvalidTarget) && !errors.Is(b.err, flow.ErrDuplicateTarget) {
			t.Errorf("%s: %v is neither ErrInvalidTarget nor ErrDuplicateTarget", b.name, b.err)
		}
	}
	if err := reg.Check(); err != nil {
		t.Errorf("Check of a good registry: %v", err)
	}
}

// TestCheckNamesTheTarget checks that Registry.Check finds the references
// registration alone cannot: child runs and sub-agents of targets that are
// not registered (or not agents), in one line naming the target.
func TestCheckNamesTheTarget(t *testing.T) {
	t.Parallel()
	reg := flow.NewRegistry()
	run := func(context.Context, none) (int, error) { return 0, nil }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(flow.RegisterWorkflow(reg, flow.Workflow[none, int]{Name: "parent", CodeVersion: "v", Run: run,
		Steps: []flow.Decl{flow.DeclareChild("missing_child")}}))
	must(flow.RegisterWorkflow(reg, flow.Workflow[none, int]{Name: "plain", CodeVersion: "v", Run: run}))
	must(flow.RegisterAgent(reg, flow.Agent[none, int]{Name: "boss", CodeVersion: "v", Model: "m", Run: run,
		Tools: []flow.ToolDef{flow.SubAgentTool("ask", "", "nobody"), flow.SubAgentTool("wf", "", "plain")}}))
	err := reg.Check()
	if !errors.Is(err, flow.ErrInvalidTarget) {
		t.Fatalf("Check: %v, want ErrInvalidTarget", err)
	}
	msg := err.Error()
	for _, want := range []string{
		`parent: declared child target "missing_child" is not registered`,
		`boss: sub-agent tool ask runs "nobody", which is not registered`,
		`boss: sub-agent tool wf runs "plain", which is a workflow, not an agent`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("Check: %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("Check: %q is not one line", msg)
	}

}
