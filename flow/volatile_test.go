package flow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
)

// quoteIn is the input of the volatile test step: request_id and meta.ts
// are volatile.
type quoteIn struct {
	SKU       string    `json:"sku"`
	RequestID string    `json:"request_id"`
	Meta      quoteMeta `json:"meta"`
}

type quoteMeta struct {
	TS  string `json:"ts"`
	Who string `json:"who"`
}

type quoteInputs struct {
	SKU       string `json:"sku"`
	RequestID string `json:"request_id"`
	TS        string `json:"ts"`
}

var quoteDefaults = quoteInputs{SKU: "SKU-42", RequestID: "r-1", TS: "2026-12-01T10:00:00Z"}

func quoteBody(step flow.StepDef[quoteIn, int]) func(context.Context, quoteInputs) (int, error) {
	return func(ctx context.Context, in quoteInputs) (int, error) {
		return step.Call(ctx, quoteIn{SKU: in.SKU, RequestID: in.RequestID, Meta: quoteMeta{TS: in.TS, Who: "cli"}})
	}
}

func quoteStep() flow.StepDef[quoteIn, int] {
	return flow.DefineStep("quote", flow.Read, func(context.Context, quoteIn) (int, error) { return 7, nil })
}

// callStart returns the run's call:start event of call id.
func callStart(t *testing.T, e *env, runID, id string) host.Event {
	t.Helper()
	for _, ev := range e.log.Events(runID) {
		if ev.Kind == runevent.CallStart && ev.Call.ID() == id {
			return ev
		}
	}
	t.Fatalf("run %s has no call:start of %s", runID, id)
	return host.Event{}
}

func TestVolatileStepFields(t *testing.T) {
	t.Parallel()
	e := setup(t)
	step := quoteStep().Volatile("request_id", "meta.ts")
	mustRegister(t, flow.RegisterWorkflow(e.reg, flow.Workflow[quoteInputs, int]{
		Name: "vol", CodeVersion: "v1", Defaults: quoteDefaults, Steps: []flow.Decl{step}, Run: quoteBody(step),
	}))
	info, _ := e.reg.Lookup("vol")
	if v := info.Registration.Volatile; v == nil || !slices.Equal(v.Steps["quote"], []string{"meta.ts", "request_id"}) || v.Tools != nil || v.Prompt != nil {
		t.Fatalf("registration.volatile %+v", v)
	}

	run := func(runID string, inputs map[string]json.RawMessage) host.Event {
		out, err := e.rt.Run(context.Background(), host.RunParams{RunID: runID, Target: "vol", Inputs: inputs})
		if err != nil || out.Status != host.StatusComplete {
			t.Fatalf("run %s: %+v, %v", runID, out, err)
		}
		return callStart(t, e, runID, "step:quote:0")
	}
	a := run("run_a", nil)
	b := run("run_b", map[string]json.RawMessage{"request_id": json.RawMessage(`"r-2"`), "ts": json.RawMessage(`"2027-01-01T00:00:00Z"`)})
	c := run("run_c", map[string]json.RawMessage{"sku": json.RawMessage(`"SKU-7"`)})
	if a.Call.Fingerprint != b.Call.Fingerprint {
		t.Errorf("a volatile field changed the fingerprint: %s vs %s", a.Call.Fingerprint, b.Call.Fingerprint)
	}
	if a.Call.Fingerprint == c.Call.Fingerprint {
		t.Errorf("a non-volatile field did not change the fingerprint")
	}
	// The fingerprint is that of the input without the volatile fields;
	// the recorded input keeps them.
	_, want, _ := host.Fingerprint(map[string]any{"sku": "SKU-42", "meta": map[string]any{"who": "cli"}})
	if a.Call.Fingerprint != want {
		t.Errorf("fingerprint %s, want %s (the input without its volatile fields)", a.Call.Fingerprint, want)
	}
	if !strings.Contains(string(b.Input), `"request_id":"r-2"`) || !strings.Contains(string(b.Input), `"ts":"2027-01-01T00:00:00Z"`) {
		t.Errorf("recorded input %s lost the real values", b.Input)
	}
	if res := e.log.Results("run_a"); len(res) != 1 || res[0].Fingerprint != a.Call.Fingerprint {
		t.Errorf("results %+v", res)
	}
}

func TestVolatileDeclaredInline(t *testing.T) {
	t.Parallel()
	e := setup(t)
	mustRegister(t, flow.RegisterWorkflow(e.reg, flow.Workflow[quoteInputs, int]{
		Name: "inline", CodeVersion: "v1", Defaults: quoteDefaults,
		Steps: []flow.Decl{flow.DeclareStep("quote", flow.Read).Volatile("request_id").Volatile("meta.ts", "request_id")},
		Run: func(ctx context.Context, in quoteInputs) (int, error) {
			return flow.Step(ctx, "quote", quoteIn{SKU: in.SKU, RequestID: in.RequestID, Meta: quoteMeta{TS: in.TS}},
				func(context.Context, quoteIn) (int, error) { return 1, nil })
		},
	}))
	info, _ := e.reg.Lookup("inline")
	if got := info.Registration.Volatile.Steps["quote"]; !slices.Equal(got, []string{"meta.ts", "request_id"}) {
		t.Fatalf("recorded %v", got)
	}
	e.run(t, "run_a", "inline")
	out, err := e.rt.Run(context.Background(), host.RunParams{RunID: "run_b", Target: "inline",
		Inputs: map[string]json.RawMessage{"request_id": json.RawMessage(`"other"`)}})
	if err != nil || out.Status != host.StatusComplete {
		t.Fatal(out, err)
	}
	if a, b := callStart(t, e, "run_a", "step:quote:0"), callStart(t, e, "run_b", "step:quote:0"); a.Call.Fingerprint != b.Call.Fingerprint {
		t.Error("an inline step's declared volatile field changed the fingerprint")
	}
}

// A StepDef whose rules are not what the target declares stops the run:
// its rules would not be recorded.
func TestVolatileStepDefNotDeclared(t *testing.T) {
	t.Parallel()
	e := setup(t)
	step := quoteStep().Volatile("request_id")
	mustRegister(t, flow.RegisterWorkflow(e.reg, flow.Workflow[quoteInputs, int]{
		Name: "undeclared", CodeVersion: "v1", Defaults: quoteDefaults, Run: quoteBody(step),
	}))
	mustRegister(t, flow.RegisterWorkflow(e.reg, flow.Workflow[quoteInputs, int]{
		Name: "other_rules", CodeVersion: "v1", Defaults: quoteDefaults,
		Steps: []flow.Decl{flow.DeclareStep("quote", flow.Read).Volatile("meta.ts")}, Run: quoteBody(step),
	}))
	for target, want := range map[string]string{
		"undeclared":  "undeclared does not declare the step: put it in the target's Steps",
		"other_rules": "volatile fields [request_id] at the call, but other_rules declared [meta.ts]",
	} {
		out := e.run(t, "run_"+target, target)
		if out.Status != host.StatusError || out.Code != messages.RuntimeError || !strings.Contains(out.Message, want) {
			t.Errorf("%s: %+v, want runtime_error containing %q", target, out, want)
		}
	}
}

func TestVolatileRegistrationChecks(t *testing.T) {
	t.Parallel()
	run := func(context.Context, quoteInputs) (int, error) { return 0, nil }
	agentRun := func(context.Context, quoteInputs) (string, error) { return "", nil }
	tool := flow.NewTool("lookup", "", func(context.Context, map[string]string) (string, error) { return "", nil })
	cases := []struct {
		name     string
		register func(*flow.Registry) error
		want     string
	}{
		{"step path", func(r *flow.Registry) error {
			return flow.RegisterWorkflow(r, flow.Workflow[quoteInputs, int]{Name: "order", CodeVersion: "v1", Defaults: quoteDefaults, Run: run,
				Steps: []flow.Decl{quoteStep().Volatile("meta..ts")}})
		}, `register targets: flow: invalid target: order: step quote: volatile path "meta..ts": at byte 5: empty key`},
		{"inline step path", func(r *flow.Registry) error {
			return flow.RegisterWorkflow(r, flow.Workflow[quoteInputs, int]{Name: "order", CodeVersion: "v1", Defaults: quoteDefaults, Run: run,
				Steps: []flow.Decl{flow.DeclareStep("quote", flow.Read).Volatile("$.request_id")}})
		}, `order: step quote: volatile path "$.request_id": write it without the leading $ ("request_id")`},
		{"tool path", func(r *flow.Registry) error {
			return flow.RegisterAgent(r, flow.Agent[quoteInputs, string]{Name: "helper", CodeVersion: "v1", Model: "m", Defaults: quoteDefaults, Run: agentRun,
				Tools: []flow.ToolDef{tool.Volatile("items[0]")}})
		}, `helper: tool lookup: volatile path "items[0]": at byte 5`},
		{"prompt pattern", func(r *flow.Registry) error {
			return flow.RegisterAgent(r, flow.Agent[quoteInputs, string]{Name: "helper", CodeVersion: "v1", Model: "m", Defaults: quoteDefaults, Run: agentRun,
				VolatilePrompt: []string{"Today is (.*"}})
		}, `agent helper: volatile prompt pattern "Today is (.*": error parsing regexp`},
	}
	for _, c := range cases {
		_, err := host.Build(nil, c.register)
		if !errors.Is(err, flow.ErrInvalidTarget) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalidTarget containing %q", c.name, err, c.want)
		}
	}
}

// dateAgent is an agent whose prompt holds a date line, masked by its
// volatile prompt pattern; its lookup tool's trace field is volatile.
func dateAgent(reg *flow.Registry, patterns []string) error {
	lookup := flow.NewTool("lookup", "looks up an order", func(_ context.Context, in map[string]string) (string, error) {
		return "shipped", nil
	}).ReadOnly().Volatile("trace")
	return flow.RegisterAgent(reg, flow.Agent[map[string]string, string]{
		Name: "dated", CodeVersion: "v1", Model: "m-1", System: "You track orders.",
		VolatilePrompt: patterns,
		Defaults:       map[string]string{"today": "2026-12-01", "order": "42"},
		Tools:          []flow.ToolDef{lookup},
		Client: scriptedModel{{Role: "assistant", Content: []flow.Block{
			flow.ToolUseBlock("toolu_01", "lookup", map[string]string{"order": "42", "trace": "t-1"}),
		}}},
		Run: func(ctx context.Context, in map[string]string) (string, error) {
			msgs := []flow.Message{flow.UserText("Today is " + in["today"] + ".\nWhere is order " + in["order"] + "?")}
			resp, err := flow.Model(ctx, flow.ModelRequest{System: "You track orders.\nToday is " + in["today"] + ".", Messages: msgs})
			if err != nil {
				return "", err
			}
			res, err := flow.RunTools(ctx, resp)
			if err != nil {
				return "", err
			}
			resp, err = flow.Model(ctx, flow.ModelRequest{Messages: append(msgs, resp.Message(), res)})
			return resp.Text(), err
		},
	})
}

func TestVolatilePrompt(t *testing.T) {
	t.Parallel()
	e := setup(t)
	mustRegister(t, dateAgent(e.reg, []string{`(?m)^Today is .*$`}))
	info, _ := e.reg.Lookup("dated")
	want := bundle.Volatile{Tools: map[string][]string{"lookup": {"trace"}}, Prompt: []string{`(?m)^Today is .*$`}}
	if v := info.Registration.Volatile; v == nil || !slices.Equal(v.Prompt, want.Prompt) || !slices.Equal(v.Tools["lookup"], want.Tools["lookup"]) {
		t.Fatalf("registration.volatile %+v", v)
	}
	e.run(t, "run_a", "dated")
	out, err := e.rt.Run(context.Background(), host.RunParams{RunID: "run_b", Target: "dated",
		Inputs: map[string]json.RawMessage{"today": json.RawMessage(`"2027-03-04"`)}})
	if err != nil || out.Status != host.StatusComplete {
		t.Fatal(out, err)
	}
	out, err = e.rt.Run(context.Background(), host.RunParams{RunID: "run_c", Target: "dated",
		Inputs: map[string]json.RawMessage{"order": json.RawMessage(`"43"`)}})
	if err != nil || out.Status != host.StatusComplete {
		t.Fatal(out, err)
	}
	for _, id := range []string{"model:0", "model:1"} {
		a, b, c := callStart(t, e, "run_a", id), callStart(t, e, "run_b", id), callStart(t, e, "run_c", id)
		if a.Call.Fingerprint != b.Call.Fingerprint {
			t.Errorf("%s: the date line changed the fingerprint", id)
		}
		if a.Call.Fingerprint == c.Call.Fingerprint {
			t.Errorf("%s: the order number did not change the fingerprint", id)
		}
		if !strings.Contains(string(b.Input), "Today is 2027-03-04.") {
			t.Errorf("%s: recorded input %s lost the date", id, b.Input)
		}
	}
	// The tool's volatile field: the same trace in every run here, so its
	// fingerprint is that of the input without it.
	_, wantFP, _ := host.Fingerprint(map[string]string{"order": "42"})
	if got := callStart(t, e, "run_a", "tool:toolu_01").Call.Fingerprint; got != wantFP {
		t.Errorf("tool fingerprint %s, want %s", got, wantFP)
	}

	// Without the pattern the date line counts.
	e2 := setup(t)
	mustRegister(t, dateAgent(e2.reg, nil))
	e2.run(t, "run_a", "dated")
	if _, err := e2.rt.Run(context.Background(), host.RunParams{RunID: "run_b", Target: "dated",
		Inputs: map[string]json.RawMessage{"today": json.RawMessage(`"2027-03-04"`)}}); err != nil {
		t.Fatal(err)
	}
	if callStart(t, e2, "run_a", "model:0").Call.Fingerprint == callStart(t, e2, "run_b", "model:0").Call.Fingerprint {
		t.Error("without a pattern the date line did not count")
	}
	if info, _ := e2.reg.Lookup("dated"); info.Registration.Volatile.Prompt != nil {
		t.Errorf("no patterns recorded as %v", info.Registration.Volatile.Prompt)
	}
}

func TestVolatileOf(t *testing.T) {
	t.Parallel()
	reg := bundle.Registration{Volatile: &bundle.Volatile{
		Steps:  map[string][]string{"quote": {"request_id"}, "send_receipt": {"x"}},
		Tools:  map[string][]string{"lookup": {"trace"}},
		Prompt: []string{"p"},
	}}
	call := func(kind host.CallKind, key, name string) host.Call {
		return host.Call{CallRef: host.CallRef{Kind: kind, Key: key}, Name: name}
	}
	cases := []struct {
		c    host.Call
		want string
	}{
		{call(host.KindStep, "quote:3", "quote"), "[request_id] []"},
		{call(host.KindStep, "child:0", "send_receipt"), "[] []"}, // a child run of a target named like a step
		{call(host.KindStep, "other:0", "other"), "[] []"},
		{call(host.KindTool, "toolu_01", "lookup"), "[trace] []"},
		{call(host.KindModel, "0", ""), "[] [p]"},
		{call(host.KindSleep, "0", ""), "[] []"},
	}
	for _, c := range cases {
		s := host.VolatileOf(reg, c.c)
		if got := fmt.Sprint(s.Fields, s.Prompt); got != c.want {
			t.Errorf("%s: %s, want %s", c.c.ID(), got, c.want)
		}
	}
	if host.HasVolatile(bundle.Registration{}) || !host.HasVolatile(reg) || host.HasVolatile(bundle.Registration{Volatile: &bundle.Volatile{}}) {
		t.Error("HasVolatile")
	}
}
