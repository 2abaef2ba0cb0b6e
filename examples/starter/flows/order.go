package flows

import (
	"context"
	"fmt"
	"time"

	"github.com/pyrula/caseworker/flow"
)

// orderInputs are order's inputs. Every input has a default (Defaults
// below) and no omitempty: the JSON keys are the inputs the target accepts.
type orderInputs struct {
	SKU     string `json:"sku"`
	Qty     int    `json:"qty"`
	DelayMS int    `json:"delay_ms"` // the durable sleep before charging
}

// orderResult is order's result.
type orderResult struct {
	ChargeID   string `json:"charge_id"`
	TotalMinor int    `json:"total_minor"` // in cents
	Currency   string `json:"currency"`
}

// price is the price step's result.
type price struct {
	UnitMinor int    `json:"unit_minor"`
	Currency  string `json:"currency"`
}

// charge is the charge step's input.
type charge struct {
	SKU         string `json:"sku"`
	AmountMinor int    `json:"amount_minor"`
	Currency    string `json:"currency"`
}

// catalog stands in for your price service.
var catalog = map[string]int{"SKU-42": 1999, "SKU-7": 10000}

func registerOrder(reg *flow.Registry) error {
	// A read: it only looks at the outside world, so a case run may run it
	// live (within --live-budget) when its input changed.
	lookUpPrice := flow.DefineStep("price", flow.Read, func(ctx context.Context, sku string) (price, error) {
		unit, ok := catalog[sku]
		if !ok {
			return price{}, flow.Errorf("UnknownSKU", "no price for %s", sku) // recorded and replayed as an error
		}
		return price{UnitMinor: unit, Currency: "EUR"}, nil
	})
	// A write: it changes the outside world, so a case run never runs it
	// live unless allowed (--allow-write step:charge). Here it only makes up
	// a charge id; yours would call the payment provider.
	chargeCard := flow.DefineStep("charge", flow.Write, func(ctx context.Context, in charge) (string, error) {
		return fmt.Sprintf("ch_%s_%d", in.SKU, in.AmountMinor), nil
	})
	return flow.RegisterWorkflow(reg, flow.Workflow[orderInputs, orderResult]{
		Name:        "order",
		CodeVersion: codeVersion,
		Defaults:    orderInputs{SKU: "SKU-42", Qty: 1, DelayMS: 20},
		Steps:       []flow.Decl{lookUpPrice, chargeCard},
		Run: func(ctx context.Context, in orderInputs) (orderResult, error) {
			p, err := lookUpPrice.Call(ctx, in.SKU)
			if err != nil {
				return orderResult{}, err
			}
			// A durable sleep: a worker that restarts resumes the run and
			// wakes it on time; a case run skips it at once.
			if err := flow.Sleep(ctx, time.Duration(in.DelayMS)*time.Millisecond); err != nil {
				return orderResult{}, err
			}
			total := p.UnitMinor * in.Qty
			id, err := chargeCard.Call(ctx, charge{SKU: in.SKU, AmountMinor: total, Currency: p.Currency})
			if err != nil {
				return orderResult{}, err
			}
			return orderResult{ChargeID: id, TotalMinor: total, Currency: p.Currency}, nil
		},
	})
}
