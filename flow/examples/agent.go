package examples

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/pyrula/caseworker/flow"
)

// SupportInputs are support_agent's inputs. Defaults: ticket_id "T-5521",
// message "My order ord_7Q2K arrived damaged — can I get a refund?".
type SupportInputs struct {
	TicketID string `json:"ticket_id"`
	Message  string `json:"message"`
}

// SupportResult is support_agent's result.
type SupportResult struct {
	Reply string `json:"reply"`
	// Turns counts the model calls.
	Turns int `json:"turns"`
}

// LookupInput is lookup_order's input.
type LookupInput struct {
	OrderID string `json:"order_id"`
}

// Order is lookup_order's result.
type Order struct {
	OrderID    string `json:"order_id"`
	Status     string `json:"status"`
	TotalMinor int    `json:"total_minor"`
	Currency   string `json:"currency"`
}

// RefundInput is refund's input.
type RefundInput struct {
	OrderID     string `json:"order_id"`
	AmountMinor int    `json:"amount_minor"`
	Reason      string `json:"reason"`
}

// Refund is refund's result.
type Refund struct {
	RefundID string `json:"refund_id"`
	Status   string `json:"status"`
}

// PolicyInputs are refund_policy's inputs (and the refund_policy tool's
// input). Defaults: order_status "delivered", reason "damaged".
type PolicyInputs struct {
	OrderStatus string `json:"order_status"`
	Reason      string `json:"reason"`
}

// PolicyResult is refund_policy's result.
type PolicyResult struct {
	Eligible    bool   `json:"eligible"`
	Explanation string `json:"explanation"`
}

var orders = map[string]Order{
	"ord_7Q2K": {OrderID: "ord_7Q2K", Status: "delivered", TotalMinor: 3998, Currency: "EUR"},
	"ord_9X1B": {OrderID: "ord_9X1B", Status: "in_transit", TotalMinor: 10000, Currency: "EUR"},
}

const maxTurns = 8

func registerSupportAgent(reg *flow.Registry, fx *Effects) error {
	lookup := flow.NewTool("lookup_order", "Look up an order by id.", func(ctx context.Context, in LookupInput) (Order, error) {
		fx.Lookups.Add(1)
		o, ok := orders[in.OrderID]
		if !ok {
			return Order{}, flow.Errorf("OrderNotFound", "no order %s", in.OrderID)
		}
		return o, nil
	}).ReadOnly()
	refund := flow.NewTool("refund", "Refund an order.", func(ctx context.Context, in RefundInput) (Refund, error) {
		n := fx.Refunds.Add(1)
		return Refund{RefundID: fmt.Sprintf("re_%04d", n), Status: "pending"}, nil
	})
	policy := flow.SubAgentTool("refund_policy", "Ask the refund policy agent whether a refund is allowed.", RefundPolicy)
	return flow.RegisterAgent(reg, flow.Agent[SupportInputs, SupportResult]{
		Name:        SupportAgent,
		CodeVersion: CodeVersion,
		Model:       SupportModel,
		System:      "You are a support agent. Look up the order, ask the refund policy, then refund when it is allowed.",
		Client:      supportModel{},
		Defaults: SupportInputs{
			TicketID: "T-5521",
			Message:  "My order ord_7Q2K arrived damaged — can I get a refund?",
		},
		Tools: []flow.ToolDef{lookup, refund, policy},
		Run: func(ctx context.Context, in SupportInputs) (SupportResult, error) {
			// The model, the tools it asks for, the model again: each a
			// recorded call.
			res, err := flow.AgentLoop(ctx, []flow.Message{flow.UserText(in.Message)}, maxTurns)
			if err != nil {
				return SupportResult{}, err
			}
			return SupportResult{Reply: res.Response.Text(), Turns: res.Turns}, nil
		},
	})
}

func registerRefundPolicy(reg *flow.Registry) error {
	return flow.RegisterAgent(reg, flow.Agent[PolicyInputs, PolicyResult]{
		Name:        RefundPolicy,
		CodeVersion: CodeVersion,
		Model:       PolicyModel,
		System:      "You decide whether an order may be refunded. Answer 'eligible: …' or 'not eligible: …'.",
		Client:      policyModel{},
		Defaults:    PolicyInputs{OrderStatus: "delivered", Reason: "damaged"},
		Run: func(ctx context.Context, in PolicyInputs) (PolicyResult, error) {
			q := fmt.Sprintf("Order status: %s. Reason: %s. May it be refunded?", in.OrderStatus, in.Reason)
			resp, err := flow.Model(ctx, flow.ModelRequest{Messages: []flow.Message{flow.UserText(q)}})
			if err != nil {
				return PolicyResult{}, err
			}
			text := resp.Text()
			return PolicyResult{Eligible: strings.HasPrefix(text, "eligible"), Explanation: text}, nil
		},
	})
}

// supportModel is a deterministic local model for support_agent: it reads
// the conversation and asks for lookup_order, then refund_policy, then
// refund, then answers. Tool-use ids are toolu_01, toolu_02, … in order.
type supportModel struct{}

var orderIDPattern = regexp.MustCompile(`ord_[A-Za-z0-9]+`)

// Call implements flow.ModelClient.
func (supportModel) Call(ctx context.Context, req flow.ModelRequest) (flow.ModelResponse, error) {
	if len(req.Messages) == 0 {
		return flow.ModelResponse{}, flow.Errorf("invalid_request", "no messages")
	}
	names := map[string]string{} // tool-use id → tool name
	uses := 0
	for _, m := range req.Messages {
		for _, b := range m.Blocks {
			if b.Type == "tool_use" {
				names[b.ID] = b.Name
				uses++
			}
		}
	}
	nextID := fmt.Sprintf("toolu_%02d", uses+1)
	reply := func(blocks ...flow.Block) (flow.ModelResponse, error) {
		return flow.ModelResponse{Role: "assistant", Content: blocks, Usage: usageOf(req, blocks)}, nil
	}
	first := req.Messages[0].Text
	last := req.Messages[len(req.Messages)-1]
	if len(req.Messages) == 1 {
		id := orderIDPattern.FindString(first)
		if id == "" {
			return reply(flow.TextBlock("Which order is it about? Please give its id (ord_…)."))
		}
		return reply(flow.TextBlock("Let me look up that order."),
			flow.ToolUseBlock(nextID, "lookup_order", LookupInput{OrderID: id}))
	}
	reason := "other"
	if strings.Contains(strings.ToLower(first), "damaged") {
		reason = "damaged"
	}
	for _, b := range last.Blocks {
		if b.Type != "tool_result" {
			continue
		}
		if b.IsError {
			return reply(flow.TextBlock("Sorry, something went wrong: " + string(b.Content)))
		}
		switch names[b.ToolUseID] {
		case "lookup_order":
			var o Order
			if err := json.Unmarshal(b.Content, &o); err != nil {
				return flow.ModelResponse{}, err
			}
			return reply(flow.ToolUseBlock(nextID, "refund_policy", PolicyInputs{OrderStatus: o.Status, Reason: reason}))
		case "refund_policy":
			var p PolicyResult
			if err := json.Unmarshal(b.Content, &p); err != nil {
				return flow.ModelResponse{}, err
			}
			if !p.Eligible {
				return reply(flow.TextBlock("I'm sorry, this order cannot be refunded: " + p.Explanation))
			}
			o := lastOrder(req.Messages, names)
			return reply(flow.ToolUseBlock(nextID, "refund", RefundInput{OrderID: o.OrderID, AmountMinor: o.TotalMinor, Reason: reason}))
		case "refund":
			var r Refund
			if err := json.Unmarshal(b.Content, &r); err != nil {
				return flow.ModelResponse{}, err
			}
			o := lastOrder(req.Messages, names)
			return reply(flow.TextBlock(fmt.Sprintf("I've issued a refund of %s %d.%02d (%s); you'll see it in 3–5 days.",
				o.Currency, o.TotalMinor/100, o.TotalMinor%100, r.RefundID)))
		}
	}
	return reply(flow.TextBlock("How else can I help?"))
}

// lastOrder finds the latest lookup_order result in the conversation.
func lastOrder(msgs []flow.Message, names map[string]string) Order {
	var o Order
	for _, m := range msgs {
		for _, b := range m.Blocks {
			if b.Type == "tool_result" && !b.IsError && names[b.ToolUseID] == "lookup_order" {
				_ = json.Unmarshal(b.Content, &o)
			}
		}
	}
	return o
}

// policyModel is a deterministic local model for refund_policy: delivered
// orders returned as damaged are eligible, nothing else is.
type policyModel struct{}

// Call implements flow.ModelClient.
func (policyModel) Call(ctx context.Context, req flow.ModelRequest) (flow.ModelResponse, error) {
	if len(req.Messages) == 0 {
		return flow.ModelResponse{}, flow.Errorf("invalid_request", "no messages")
	}
	q := req.Messages[len(req.Messages)-1].Text
	text := "not eligible: only delivered orders that arrived damaged can be refunded."
	if strings.Contains(q, "status: delivered") && strings.Contains(q, "Reason: damaged") {
		text = "eligible: the order was delivered damaged."
	}
	blocks := []flow.Block{flow.TextBlock(text)}
	return flow.ModelResponse{Role: "assistant", Content: blocks, Usage: usageOf(req, blocks)}, nil
}

// usageOf makes up token counts: a token per four bytes of JSON.
func usageOf(req flow.ModelRequest, out []flow.Block) *flow.Usage {
	in, _ := json.Marshal(req)
	o, _ := json.Marshal(out)
	return &flow.Usage{InputTokens: int64(len(in)/4 + 1), OutputTokens: int64(len(o)/4 + 1)}
}
