// Package divergetest registers targets for the CLI's divergence tests:
// each comes in two versions, the second a code change of the first, so
// that a case recorded with one and run with --target of the other
// diverges as a user's edit would.
//
//   - charge and charge_v2 (workflows): quote (read), charge (write),
//     receipt (pure); charge_v2 adds a currency field to charge's input.
//   - helpdesk and helpdesk_v2 (agents): one lookup_order tool call, then
//     an answer; helpdesk_v2 adds include_history to the tool's argument.
//   - helpdesk_bare (agent): helpdesk with no model client of its own.
//   - the model client "scripted": helpdesk's scripted answers.
//   - the dependency set "test_cards": a Charger of test charges, which
//     charge's charge step uses when a run is given it.
//   - loop and loop_v2 (workflows): n read steps (input n, default 10);
//     loop_v2 changes the input of the tenth step from the end.
//
// It imports flow only; cmd/pyrula-diverge is a pyrula binary over it.
package divergetest

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/pyrula/caseworker/flow"
)

// The registered target names.
const (
	Charge       = "charge"
	ChargeV2     = "charge_v2"
	Helpdesk     = "helpdesk"
	HelpdeskV2   = "helpdesk_v2"
	HelpdeskBare = "helpdesk_bare"
	// ScriptedClient is the model client the package registers (helpdesk's
	// scripted answers), for --llm-ref.
	ScriptedClient = "scripted"
	// TestCards is the dependency set the package registers: a Charger of
	// test charges, for --deps-ref.
	TestCards    = "test_cards"
	Loop         = "loop"
	LoopV2       = "loop_v2"
	codeVersion1 = "divergetest/v1"
	codeVersion2 = "divergetest/v2"
)

// ChargeInputs are charge's inputs. Defaults: sku "SKU-1", qty 2.
type ChargeInputs struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

// QuoteInput is the quote step's input.
type QuoteInput struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

// Quote is the quote step's result.
type Quote struct {
	AmountMinor int `json:"amount_minor"`
}

// ChargeInput is the charge step's input; Currency is set by charge_v2.
type ChargeInput struct {
	AmountMinor int    `json:"amount_minor"`
	Card        string `json:"card"`
	Currency    string `json:"currency,omitempty"`
}

// ReceiptInput is the receipt step's input.
type ReceiptInput struct {
	AmountMinor int    `json:"amount_minor"`
	ChargeID    string `json:"charge_id"`
}

// HelpdeskInputs are helpdesk's inputs. Default question: "Where is order
// ord_1?".
type HelpdeskInputs struct {
	Question string `json:"question"`
}

// LookupInput is the lookup_order tool's input.
type LookupInput struct {
	OrderID        string `json:"order_id"`
	IncludeHistory bool   `json:"include_history,omitempty"`
}

// LoopInputs are loop's inputs.
type LoopInputs struct {
	N int `json:"n"`
}

// ReadInput is the input of loop's read step.
type ReadInput struct {
	I    int    `json:"i"`
	Mode string `json:"mode"`
}

// Register adds the targets to reg.
func Register(reg *flow.Registry) error {
	for _, v2 := range []bool{false, true} {
		if err := registerCharge(reg, v2); err != nil {
			return err
		}
		if err := registerHelpdesk(reg, v2); err != nil {
			return err
		}
		if err := registerLoop(reg, v2); err != nil {
			return err
		}
	}
	if err := registerHelpdeskAs(reg, HelpdeskBare, codeVersion1, false, nil); err != nil {
		return err
	}
	if err := reg.RegisterModelClient(ScriptedClient, helpdeskModel{}); err != nil {
		return err
	}
	return reg.RegisterDeps(TestCards, flow.Deps{testCards{}})
}

// Charger charges a card; the charge step uses the run's (flow.Dep) when
// its dependency set has one.
type Charger interface {
	Charge(amountMinor int) string
}

// testCards is the Charger of the TestCards dependency set: test charges.
type testCards struct{}

// Charge implements Charger.
func (testCards) Charge(amountMinor int) string { return fmt.Sprintf("test_ch_%d", amountMinor) }

func registerLoop(reg *flow.Registry, v2 bool) error {
	name, version := Loop, codeVersion1
	if v2 {
		name, version = LoopV2, codeVersion2
	}
	read := flow.DefineStep("read", flow.Read, func(ctx context.Context, in ReadInput) (int, error) {
		return in.I * 2, nil
	})
	return flow.RegisterWorkflow(reg, flow.Workflow[LoopInputs, int]{
		Name: name, CodeVersion: version,
		Defaults: LoopInputs{N: 10},
		Steps:    []flow.Decl{read},
		Run: func(ctx context.Context, in LoopInputs) (int, error) {
			sum := 0
			for i := range in.N {
				mode := "fast"
				if v2 && i == in.N-10 {
					mode = "careful"
				}
				v, err := read.Call(ctx, ReadInput{I: i, Mode: mode})
				if err != nil {
					return 0, err
				}
				sum += v
			}
			return sum, nil
		},
	})
}

func registerCharge(reg *flow.Registry, v2 bool) error {
	name, version := Charge, codeVersion1
	if v2 {
		name, version = ChargeV2, codeVersion2
	}
	quote := flow.DefineStep("quote", flow.Read, func(ctx context.Context, in QuoteInput) (Quote, error) {
		return Quote{AmountMinor: 1250 * in.Qty}, nil
	})
	charge := flow.DefineStep("charge", flow.Write, func(ctx context.Context, in ChargeInput) (string, error) {
		if c, ok := flow.Dep[Charger](ctx); ok {
			return c.Charge(in.AmountMinor), nil
		}
		return fmt.Sprintf("ch_%d", in.AmountMinor), nil
	})
	receipt := flow.DefineStep("receipt", flow.Pure, func(ctx context.Context, in ReceiptInput) (string, error) {
		return fmt.Sprintf("charged %d.%02d (%s)", in.AmountMinor/100, in.AmountMinor%100, in.ChargeID), nil
	})
	return flow.RegisterWorkflow(reg, flow.Workflow[ChargeInputs, string]{
		Name: name, CodeVersion: version,
		Defaults: ChargeInputs{SKU: "SKU-1", Qty: 2},
		Steps:    []flow.Decl{quote, charge, receipt},
		Run: func(ctx context.Context, in ChargeInputs) (string, error) {
			q, err := quote.Call(ctx, QuoteInput(in))
			if err != nil {
				return "", err
			}
			ci := ChargeInput{AmountMinor: q.AmountMinor, Card: "card_visa"}
			if v2 {
				ci.Currency = "EUR"
			}
			id, err := charge.Call(ctx, ci)
			if err != nil {
				return "", err
			}
			return receipt.Call(ctx, ReceiptInput{AmountMinor: q.AmountMinor, ChargeID: id})
		},
	})
}

func registerHelpdesk(reg *flow.Registry, v2 bool) error {
	if v2 {
		return registerHelpdeskAs(reg, HelpdeskV2, codeVersion2, true, helpdeskModel{})
	}
	return registerHelpdeskAs(reg, Helpdesk, codeVersion1, false, helpdeskModel{})
}

// registerHelpdeskAs registers the helpdesk agent under name with client
// (nil: none of its own); v2 adds include_history to the tool's argument.
func registerHelpdeskAs(reg *flow.Registry, name, version string, v2 bool, client flow.ModelClient) error {
	lookup := flow.NewTool("lookup_order", "Look up an order by id.", func(ctx context.Context, in LookupInput) (map[string]string, error) {
		return map[string]string{"order_id": in.OrderID, "status": "shipped"}, nil
	}).ReadOnly()
	return flow.RegisterAgent(reg, flow.Agent[HelpdeskInputs, string]{
		Name: name, CodeVersion: version,
		Model:    "helpdesk-model",
		System:   "You answer questions about orders.\nLook the order up before you answer.",
		Client:   client,
		Defaults: HelpdeskInputs{Question: "Where is order ord_1?"},
		Tools:    []flow.ToolDef{lookup},
		Run: func(ctx context.Context, in HelpdeskInputs) (string, error) {
			msgs := []flow.Message{flow.UserText(in.Question)}
			for turn := 0; turn < 4; turn++ {
				resp, err := flow.Model(ctx, flow.ModelRequest{Messages: msgs})
				if err != nil {
					return "", err
				}
				if v2 {
					for i, b := range resp.Content {
						if b.Type == "tool_use" && b.Name == "lookup_order" {
							var args LookupInput
							if err := json.Unmarshal(b.Input, &args); err != nil {
								return "", err
							}
							args.IncludeHistory = true
							resp.Content[i].Input, _ = json.Marshal(args)
						}
					}
				}
				msgs = append(msgs, resp.Message())
				if len(resp.ToolUses()) == 0 {
					return resp.Text(), nil
				}
				results, err := flow.RunTools(ctx, resp)
				if err != nil {
					return "", err
				}
				msgs = append(msgs, results)
			}
			return "", fmt.Errorf("no answer after 4 turns")
		},
	})
}

// helpdeskModel answers the first turn with a lookup_order call and the
// next with the tool's answer quoted.
type helpdeskModel struct{}

// Call implements flow.ModelClient.
func (helpdeskModel) Call(ctx context.Context, req flow.ModelRequest) (flow.ModelResponse, error) {
	if len(req.Messages) == 1 {
		return flow.ModelResponse{Role: "assistant", Content: []flow.Block{
			flow.TextBlock("Let me look it up."),
			flow.ToolUseBlock("toolu_01", "lookup_order", LookupInput{OrderID: "ord_1"}),
		}}, nil
	}
	last := req.Messages[len(req.Messages)-1]
	answer := "I could not find it."
	for _, b := range last.Blocks {
		if b.Type == "tool_result" {
			answer = "The order says: " + string(b.Content)
		}
	}
	return flow.ModelResponse{Role: "assistant", Content: []flow.Block{flow.TextBlock(answer)}}, nil
}
