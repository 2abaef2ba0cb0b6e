package replay

import (
	"context"
	"fmt"

	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/messages"
)

// SharedBudget is a budget a case run shares with other case runs (a
// suite's children, on any number of workers), held outside the process.
// Every live call that counts against the live budget reserves against it
// before it is sent: one call, and its worst-case price for a model call
// (0 for other calls); the reservation is settled once the call was
// observed, with its real price. A reservation never settled (the process
// died with the call in flight) stays counted at its worst case, so that
// the ceiling holds across a crash.
type SharedBudget interface {
	// CapsCost says the budget has a cost ceiling: then a live model call
	// whose model has no price is stopped, as under --max-cost-usd.
	CapsCost() bool
	// Reserve takes one call and worstUSD from the budget for call id. It
	// returns "" when it did, else why it did not (the budget's ceiling
	// would be passed: the call is stopped with live_budget_exceeded). An
	// error is a transient failure (the budget could not be reached).
	Reserve(ctx context.Context, id string, worstUSD float64) (refused string, err error)
	// Settle ends call id's reservation: its worst case is given back and
	// actualUSD spent. Best effort: an unsettled reservation stays counted
	// at its worst case.
	Settle(ctx context.Context, id string, actualUSD float64)
}

// reserveShared reserves call c against the shared budget: a stop when it
// refuses, an error when it cannot be reached. worst is the call's
// worst-case price (0 for a call that is not a model call); priced says
// the model call's model has a price.
func (e *engine) reserveShared(ctx context.Context, c host.Call, worst float64, priced bool) (host.Resolution, bool, error) {
	sh := e.p.Options.Shared
	id := c.ID()
	if c.Kind == host.KindModel && !priced && sh.CapsCost() {
		return e.stop(c, messages.LiveBudgetExceeded, "%s: model %q has no price under the suite's max_cost_usd (add it with prices)", id, modelOf(c.Input)), false, nil
	}
	refused, err := sh.Reserve(ctx, id, worst)
	if err != nil {
		return host.Resolution{}, false, fmt.Errorf("replay: reserve %s against the shared budget: %w", id, err)
	}
	if refused != "" {
		delete(e.reserved, id)
		return e.stop(c, messages.LiveBudgetExceeded, "%s: not sent: %s", id, refused), false, nil
	}
	if e.shared == nil {
		e.shared = map[string]float64{}
	}
	e.shared[id] = worst
	return host.Resolution{}, true, nil
}

// settle is a shared reservation to settle once the engine's lock is let
// go: the call's id and its real price.
type settle struct {
	id     string
	actual float64
	ok     bool
}

// settleLocked takes call c's shared reservation, if any, to settle at
// spent (its price; its worst case when the price is not known).
func (e *engine) settleLocked(c host.Call, spent float64, known bool) settle {
	worst, ok := e.shared[c.ID()]
	if !ok {
		return settle{}
	}
	delete(e.shared, c.ID())
	if !known {
		spent = worst
	}
	return settle{id: c.ID(), actual: spent, ok: true}
}
