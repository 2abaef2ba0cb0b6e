package core

import (
	"context"
	"errors"
	"fmt"
)

// ErrMaxTurns is the error of an agent loop that made its last model call
// without an answer: the model still asked for tools.
var ErrMaxTurns = errors.New("flow: no answer within the turn limit")

// maxTurnsError is ErrMaxTurns with the limit.
type maxTurnsError struct{ turns int }

func (e maxTurnsError) Error() string        { return fmt.Sprintf("no answer after %d turns", e.turns) }
func (e maxTurnsError) Is(target error) bool { return target == ErrMaxTurns }

// LoopResult is how an agent loop ended.
type LoopResult struct {
	// Response is the model's last response: its answer (Text).
	Response ModelResponse
	// Messages is the conversation: the messages given, then each model
	// response and the results of the tools it asked for.
	Messages []Message
	// Turns is the number of model calls made.
	Turns int
}

// AgentLoop runs the standard agent loop inside an agent's Run: the model
// (Model, with the agent's model, system prompt and tools) on msgs, then
// the tools it asked for (RunTools), then the model again on the longer
// conversation, until the model answers without asking for a tool. Every
// model call and every tool use is a recorded call. After maxTurns model
// calls without an answer it returns an error matching ErrMaxTurns ("no
// answer after N turns"); maxTurns below 1 means 1.
func AgentLoop(ctx context.Context, msgs []Message, maxTurns int) (LoopResult, error) {
	msgs = append([]Message(nil), msgs...)
	for turn := 1; turn <= max(maxTurns, 1); turn++ {
		resp, err := Model(ctx, ModelRequest{Messages: msgs})
		if err != nil {
			return LoopResult{Messages: msgs, Turns: turn}, err
		}
		msgs = append(msgs, resp.Message())
		if len(resp.ToolUses()) == 0 {
			return LoopResult{Response: resp, Messages: msgs, Turns: turn}, nil
		}
		results, err := RunTools(ctx, resp)
		if err != nil {
			return LoopResult{Messages: msgs, Turns: turn}, err
		}
		msgs = append(msgs, results)
	}
	return LoopResult{Messages: msgs, Turns: max(maxTurns, 1)}, maxTurnsError{max(maxTurns, 1)}
}
