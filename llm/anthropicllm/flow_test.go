package anthropicllm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
)

type orderQuery struct {
	OrderID string `json:"order_id"`
}

type order struct {
	OrderID string `json:"order_id"`
	Status  string `json:"status"`
}

type supportIn struct {
	Message string `json:"message"`
}

type supportOut struct {
	Reply string `json:"reply"`
	Turns int    `json:"turns"`
}

// TestAgentLoop runs an agent (model → tool → model) through the flow
// runtime with the Anthropic client pointed at the fake API.
func TestAgentLoop(t *testing.T) {
	f := newFakeAPI(t,
		ok(messageJSON("tool_use", `{"input_tokens":50,"output_tokens":20,"cache_creation_input_tokens":40}`,
			`{"type":"tool_use","id":"toolu_01","name":"lookup_order","input":{"order_id":"ord_7Q2K"}}`)),
		ok(messageJSON("end_turn", `{"input_tokens":90,"output_tokens":15,"cache_read_input_tokens":40}`,
			`{"type":"text","text":"Order ord_7Q2K was delivered."}`)),
	)
	client := f.client(t, fast)

	reg := flow.NewRegistry()
	lookup := flow.NewTool("lookup_order", "Look up an order by id.", func(ctx context.Context, in orderQuery) (order, error) {
		return order{OrderID: in.OrderID, Status: "delivered"}, nil
	}).ReadOnly()
	err := flow.RegisterAgent(reg, flow.Agent[supportIn, supportOut]{
		Name:        "support",
		CodeVersion: "v1",
		Model:       "claude-test",
		System:      "You are a support agent.",
		Client:      client,
		MaxTokens:   512,
		Defaults:    supportIn{Message: "Where is ord_7Q2K?"},
		Tools:       []flow.ToolDef{lookup},
		Run: func(ctx context.Context, in supportIn) (supportOut, error) {
			msgs := []flow.Message{flow.UserText(in.Message)}
			for turn := 1; turn <= 4; turn++ {
				resp, err := flow.Model(ctx, flow.ModelRequest{Messages: msgs})
				if err != nil {
					return supportOut{}, err
				}
				msgs = append(msgs, resp.Message())
				if len(resp.ToolUses()) == 0 {
					return supportOut{Reply: resp.Text(), Turns: turn}, nil
				}
				results, err := flow.RunTools(ctx, resp)
				if err != nil {
					return supportOut{}, err
				}
				msgs = append(msgs, results)
			}
			return supportOut{}, fmt.Errorf("no answer")
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	log := host.NewMemLog()
	rt, err := host.NewRuntime(host.Config{Registry: reg, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	out, err := rt.Run(ctx, host.RunParams{RunID: "run-1", Target: "support"})
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != host.StatusComplete {
		t.Fatalf("outcome = %+v", out)
	}
	jsonEqual(t, "result", out.Result, `{"reply":"Order ord_7Q2K was delivered.","turns":2}`)

	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	schema, err := json.Marshal(json.RawMessage(flow.InputSchema[orderQuery]()))
	if err != nil {
		t.Fatal(err)
	}
	tools := `[{"name":"lookup_order","description":"Look up an order by id.","input_schema":` + string(schema) + `}]`
	jsonEqual(t, "second request", reqs[1].body, `{
		"model":"claude-test","max_tokens":512,
		"system":[{"type":"text","text":"You are a support agent."}],
		"messages":[
			{"role":"user","content":[{"type":"text","text":"Where is ord_7Q2K?"}]},
			{"role":"assistant","content":[{"type":"tool_use","id":"toolu_01","name":"lookup_order","input":{"order_id":"ord_7Q2K"}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01",
				"content":[{"type":"text","text":"{\"order_id\":\"ord_7Q2K\",\"status\":\"delivered\"}"}]}]}],
		"tools":`+tools+`}`)

	// The recorded model results carry the usage.
	rec, err := log.Load(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]flow.Usage{
		"0": {InputTokens: 50, OutputTokens: 20, CacheCreationInputTokens: 40},
		"1": {InputTokens: 90, OutputTokens: 15, CacheReadInputTokens: 40},
	}
	got := map[string]flow.Usage{}
	for _, r := range rec.Results {
		if r.Kind != "model" {
			continue
		}
		var resp flow.ModelResponse
		if err := json.Unmarshal(r.Result, &resp); err != nil {
			t.Fatalf("model result %s: %v", r.Key, err)
		}
		if resp.Usage == nil {
			t.Fatalf("model result %s has no usage: %s", r.Key, r.Result)
		}
		got[r.Key] = *resp.Usage
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("recorded usage = %+v, want %+v", got, want)
	}
}
