package flow_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
)

type orderQuery struct {
	OrderID string `json:"order_id"`
	Detail  bool   `json:"detail,omitempty"`
	Limits  struct {
		Max int `json:"max"`
	} `json:"limits"`
}

type policyInputs struct {
	Reason string `json:"reason"`
}

// TestToolSchemasReachTheClient checks that a model client gets each
// offered tool's input schema, derived from its Go input type (a sub-agent
// tool's from its agent's inputs), and the agent's answer bound.
func TestToolSchemasReachTheClient(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var got flow.ModelRequest
	client := flow.ModelClientFunc(func(_ context.Context, req flow.ModelRequest) (flow.ModelResponse, error) {
		got = req
		return flow.ModelResponse{Role: "assistant", Content: []flow.Block{flow.TextBlock("ok")}}, nil
	})
	run := func(ctx context.Context, _ none) (string, error) {
		r, err := flow.Model(ctx, flow.ModelRequest{Messages: []flow.Message{flow.UserText("hi")}})
		return r.Text(), err
	}
	mustRegister(t, flow.RegisterAgent(e.reg, flow.Agent[policyInputs, string]{Name: "policy", CodeVersion: "v1", Model: "m", Client: client,
		Defaults: policyInputs{Reason: "damaged"},
		Run:      func(context.Context, policyInputs) (string, error) { return "", nil }}))
	lookup := flow.NewTool("lookup", "Look up an order.", func(context.Context, orderQuery) (string, error) { return "", nil })
	mustRegister(t, flow.RegisterAgent(e.reg, flow.Agent[none, string]{Name: "desk", CodeVersion: "v1", Model: "m", Client: client, MaxTokens: 512,
		Tools: []flow.ToolDef{lookup, flow.SubAgentTool("ask_policy", "Ask the policy.", "policy")}, Run: run}))
	if err := e.reg.Check(); err != nil {
		t.Fatal(err)
	}
	if out := e.run(t, "r", "desk"); out.Status != host.StatusComplete {
		t.Fatalf("%+v", out)
	}
	if got.MaxTokens != 512 || len(got.ToolSpecs) != 2 {
		t.Fatalf("max_tokens %d, %d tool specs", got.MaxTokens, len(got.ToolSpecs))
	}
	want := map[string]string{
		"lookup": `{"properties":{"order_id":{"type":"string"},"detail":{"type":"boolean"},"limits":{"properties":{"max":{"type":"integer"}},"additionalProperties":false,"type":"object","required":["max"]}},"additionalProperties":false,"type":"object","required":["order_id","limits"]}`,
		// Every input of a target has a default: none is required.
		"ask_policy": `{"properties":{"reason":{"type":"string"}},"additionalProperties":false,"type":"object"}`,
	}
	for _, spec := range got.ToolSpecs {
		if string(spec.InputSchema) != want[spec.Name] {
			t.Errorf("%s: schema %s\nwant %s", spec.Name, spec.InputSchema, want[spec.Name])
		}
		if !json.Valid(spec.InputSchema) {
			t.Errorf("%s: invalid JSON", spec.Name)
		}
	}
	if s := string(flow.InputSchema[string]()); s != `{"type":"object"}` {
		t.Errorf("a string input's schema: %s", s)
	}
}
