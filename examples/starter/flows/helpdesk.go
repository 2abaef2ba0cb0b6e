package flows

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/pyrula/caseworker/flow"
)

// helpdeskInputs are helpdesk's inputs.
type helpdeskInputs struct {
	Message string `json:"message"`
}

// helpdeskResult is helpdesk's result.
type helpdeskResult struct {
	Reply string `json:"reply"`
	Turns int    `json:"turns"` // model calls made
}

// orderRef is the input of both tools.
type orderRef struct {
	OrderID string `json:"order_id"`
}

// orderInfo is lookup_order's result.
type orderInfo struct {
	OrderID string `json:"order_id"`
	Status  string `json:"status"` // "processing" or "shipped"
}

// cancellation is cancel_order's result.
type cancellation struct {
	OrderID string `json:"order_id"`
	Status  string `json:"status"`
}

// orders stands in for your order service.
var orders = map[string]string{"ord_1001": "processing", "ord_1002": "shipped"}

const maxTurns = 6

func registerHelpdesk(reg *flow.Registry) error {
	// ReadOnly: a case run may run it live when its input changed.
	lookup := flow.NewTool("lookup_order", "Look up an order's status by its id.",
		func(ctx context.Context, in orderRef) (orderInfo, error) {
			status, ok := orders[in.OrderID]
			if !ok {
				return orderInfo{}, flow.Errorf("OrderNotFound", "no order %s", in.OrderID)
			}
			return orderInfo{OrderID: in.OrderID, Status: status}, nil
		}).ReadOnly()
	// A tool is a write unless ReadOnly: a case run never runs it live
	// unless allowed (--allow-write tool:cancel_order).
	cancel := flow.NewTool("cancel_order", "Cancel an order that has not shipped.",
		func(ctx context.Context, in orderRef) (cancellation, error) {
			return cancellation{OrderID: in.OrderID, Status: "cancelled"}, nil
		})
	return flow.RegisterAgent(reg, flow.Agent[helpdeskInputs, helpdeskResult]{
		Name:        "helpdesk",
		CodeVersion: codeVersion,
		Model:       "scripted-helpdesk",
		System:      "You are a helpdesk agent. Look the order up; cancel it when the customer asks and it has not shipped.",
		Client:      flow.ModelClientFunc(scriptedModel),
		Defaults:    helpdeskInputs{Message: "Please cancel my order ord_1001, I ordered the wrong size."},
		Tools:       []flow.ToolDef{lookup, cancel},
		Run: func(ctx context.Context, in helpdeskInputs) (helpdeskResult, error) {
			// The standard loop: the model, the tools it asks for (each tool
			// use a recorded call), the model again, until it answers.
			res, err := flow.AgentLoop(ctx, []flow.Message{flow.UserText(in.Message)}, maxTurns)
			if err != nil {
				return helpdeskResult{}, err
			}
			return helpdeskResult{Reply: res.Response.Text(), Turns: res.Turns}, nil
		},
	})
}

var orderIDPattern = regexp.MustCompile(`ord_[0-9]+`)

// scriptedModel stands in for a language model so that the starter runs
// offline and deterministically: it looks the order up, cancels it when it
// has not shipped, then answers. Put your provider's flow.ModelClient in
// the agent's Client instead.
func scriptedModel(ctx context.Context, req flow.ModelRequest) (flow.ModelResponse, error) {
	answer := func(blocks ...flow.Block) (flow.ModelResponse, error) {
		return flow.ModelResponse{Role: "assistant", Content: blocks}, nil
	}
	last := req.Messages[len(req.Messages)-1]
	var result *flow.Block // the tool result the model is answering, if any
	for i, b := range last.Blocks {
		if b.Type == "tool_result" {
			result = &last.Blocks[i]
		}
	}
	switch {
	case result == nil: // the customer's message
		id := orderIDPattern.FindString(last.Text)
		if id == "" {
			return answer(flow.TextBlock("Which order is it? Please give its id (ord_…)."))
		}
		return answer(flow.ToolUseBlock("toolu_01", "lookup_order", orderRef{OrderID: id}))
	case result.IsError:
		return answer(flow.TextBlock("Sorry, that did not work: " + string(result.Content)))
	case result.ToolUseID == "toolu_01": // lookup_order's result
		var o orderInfo
		if err := json.Unmarshal(result.Content, &o); err != nil {
			return flow.ModelResponse{}, err
		}
		if o.Status != "processing" {
			return answer(flow.TextBlock(fmt.Sprintf("Order %s is %s and can no longer be cancelled.", o.OrderID, o.Status)))
		}
		return answer(flow.ToolUseBlock("toolu_02", "cancel_order", orderRef{OrderID: o.OrderID}))
	default: // cancel_order's result
		var c cancellation
		if err := json.Unmarshal(result.Content, &c); err != nil {
			return flow.ModelResponse{}, err
		}
		return answer(flow.TextBlock(fmt.Sprintf("Done: order %s is %s.", c.OrderID, c.Status)))
	}
}
