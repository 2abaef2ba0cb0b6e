package openaillm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/llm/openaillm"
)

// An agent whose model client is an openaillm client runs its loop (model →
// tool → model) through the flow runtime against a compatible server.
func TestAgentLoopThroughRuntime(t *testing.T) {
	type lookupInput struct {
		OrderID string `json:"order_id"`
	}
	type order struct {
		OrderID string `json:"order_id"`
		Status  string `json:"status"`
	}
	type result struct {
		Reply string `json:"reply"`
		Turns int    `json:"turns"`
	}

	// The server asks for lookup_order until it sees a tool message, then
	// answers with the tool's content.
	f := newServer(t, func(n int, w http.ResponseWriter, r *http.Request, body []byte) {
		var req struct {
			Messages []struct {
				Role       string `json:"role"`
				Content    any    `json:"content"`
				ToolCallID string `json:"tool_call_id"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			t.Errorf("request body: %v", err)
		}
		last := req.Messages[len(req.Messages)-1]
		if last.Role != "tool" {
			writeJSON(w, 200, completion(`{"role":"assistant","content":null,"tool_calls":[`+
				`{"id":"call_1","type":"function","function":{"name":"lookup_order","arguments":"{\"order_id\":\"ord_1\"}"}}]}`,
				"tool_calls", `{"prompt_tokens":30,"completion_tokens":9,"total_tokens":39}`))
			return
		}
		reply, _ := json.Marshal(fmt.Sprintf("%s → %v", last.ToolCallID, last.Content))
		writeJSON(w, 200, completion(`{"role":"assistant","content":`+string(reply)+`}`, "stop",
			`{"prompt_tokens":60,"completion_tokens":8,"total_tokens":68}`))
	})
	client := f.client(t, fast)

	reg := flow.NewRegistry()
	lookup := flow.NewTool("lookup_order", "Look up an order by id.", func(ctx context.Context, in lookupInput) (order, error) {
		return order{OrderID: in.OrderID, Status: "delivered"}, nil
	}).ReadOnly()
	err := flow.RegisterAgent(reg, flow.Agent[struct{}, result]{
		Name:        "support",
		CodeVersion: "test",
		Model:       "gpt-test",
		System:      "You are a support agent.",
		Client:      client,
		MaxTokens:   256,
		Tools:       []flow.ToolDef{lookup},
		Run: func(ctx context.Context, _ struct{}) (result, error) {
			msgs := []flow.Message{flow.UserText("Where is ord_1?")}
			for turn := 1; turn <= 4; turn++ {
				resp, err := flow.Model(ctx, flow.ModelRequest{Messages: msgs})
				if err != nil {
					return result{}, err
				}
				msgs = append(msgs, resp.Message())
				if len(resp.ToolUses()) == 0 {
					return result{Reply: resp.Text(), Turns: turn}, nil
				}
				results, err := flow.RunTools(ctx, resp)
				if err != nil {
					return result{}, err
				}
				msgs = append(msgs, results)
			}
			return result{}, fmt.Errorf("no answer")
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := host.NewRuntime(host.Config{Registry: reg, Log: host.NewMemLog()})
	if err != nil {
		t.Fatal(err)
	}
	out, err := rt.Run(context.Background(), host.RunParams{RunID: "run_1", Target: "support"})
	if err != nil {
		t.Fatal(err)
	}
	if err := out.Err(); err != nil {
		t.Fatal(err)
	}
	assertJSON(t, "result", out.Result, `{"reply":"call_1 → {\"order_id\":\"ord_1\",\"status\":\"delivered\"}","turns":2}`)

	reqs := assertRequests(t, f, 2)
	tools := `[{"type":"function","function":{"name":"lookup_order","description":"Look up an order by id.",
		"parameters":{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"],"additionalProperties":false}}}]`
	assertJSON(t, "second request", reqs[1].Body, `{
		"model":"gpt-test",
		"max_completion_tokens":256,
		"messages":[
			{"role":"system","content":"You are a support agent."},
			{"role":"user","content":"Where is ord_1?"},
			{"role":"assistant","tool_calls":[
				{"id":"call_1","type":"function","function":{"name":"lookup_order","arguments":"{\"order_id\":\"ord_1\"}"}}]},
			{"role":"tool","tool_call_id":"call_1","content":"{\"order_id\":\"ord_1\",\"status\":\"delivered\"}"}],
		"tools":`+tools+`}`)
}

var _ flow.ModelClient = (*openaillm.Client)(nil)
