package flow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
)

// AgentLoop calls the model, runs the tools it asks for, and calls it
// again until it answers; past the turn limit the run fails with
// ErrMaxTurns's words.
func TestAgentLoop(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var limitMatched atomic.Bool
	get := flow.NewTool("get", "read", func(_ context.Context, in map[string]string) (string, error) { return "got " + in["k"], nil }).ReadOnly()
	asks := scriptedModel{
		{Role: "assistant", Content: []flow.Block{flow.ToolUseBlock("toolu_01", "get", map[string]string{"k": "a"})}},
		{Role: "assistant", Content: []flow.Block{flow.ToolUseBlock("toolu_02", "get", map[string]string{"k": "b"})}},
	}
	for _, tc := range []struct {
		name     string
		maxTurns int
	}{{"answers", 5}, {"limited", 2}} {
		mustRegister(t, flow.RegisterAgent(e.reg, flow.Agent[map[string]string, string]{CodeVersion: "test/v1",
			Name: "loop_" + tc.name, Model: "m-1", Defaults: map[string]string{"q": "hello"},
			Tools: []flow.ToolDef{get}, Client: asks,
			Run: func(ctx context.Context, in map[string]string) (string, error) {
				res, err := flow.AgentLoop(ctx, []flow.Message{flow.UserText(in["q"])}, tc.maxTurns)
				if errors.Is(err, flow.ErrMaxTurns) {
					limitMatched.Store(true)
				}
				if err != nil {
					return "", err
				}
				return fmt.Sprintf("%s after %d turns, %d messages", res.Response.Text(), res.Turns, len(res.Messages)), nil
			},
		}))
	}
	out := e.run(t, "loop-1", "loop_answers")
	var got string
	if out.Status != host.StatusComplete || json.Unmarshal(out.Result, &got) != nil || got != "done after 3 turns, 6 messages" {
		t.Fatalf("outcome %+v (%q), want complete with the answer of the third model call", out, got)
	}
	out = e.run(t, "loop-2", "loop_limited")
	if out.Status != host.StatusError || out.Message != "no answer after 2 turns" {
		t.Fatalf("outcome %+v, want an error saying no answer after 2 turns", out)
	}
	if !limitMatched.Load() {
		t.Error("the turn limit's error does not match ErrMaxTurns")
	}
}
