// Package examples holds the example targets that the worker's demo, the
// tests and the docs run: the workflows checkout, send_receipt and triage,
// and the agents support_agent and refund_policy. Every one of them runs to
// completion with no inputs at all (see each target's defaults), against the
// in-memory log and inbox, with no model provider: the agents use
// deterministic local model clients.
//
// Their side effects are counted in an Effects, so tests can check that a
// resumed run does not repeat them. examples imports flow and bundle and
// nothing else of the project.
package examples

import (
	"errors"
	"sync/atomic"

	"github.com/pyrula/caseworker/flow"
)

// CodeVersion is the code_version of every example target.
const CodeVersion = "examples/v1"

// The names of the example targets.
const (
	Checkout      = "checkout"
	SendReceipt   = "send_receipt"
	SupportAgent  = "support_agent"
	RefundPolicy  = "refund_policy"
	ApprovalName  = "approval"
	SupportModel  = "local-support-1"
	PolicyModel   = "local-policy-1"
	exampleDomain = "example.com"
)

// Effects counts what the example targets did to the outside world. Reads
// are counted as well as writes, so tests can see any call run again.
type Effects struct {
	// Quotes counts checkout's quote step (read).
	Quotes atomic.Int64
	// Reservations counts checkout's reserve step (write).
	Reservations atomic.Int64
	// Emails counts send_receipt's send_email step (write).
	Emails atomic.Int64
	// Lookups counts support_agent's lookup_order tool (read).
	Lookups atomic.Int64
	// Refunds counts support_agent's refund tool (write).
	Refunds atomic.Int64
}

// Register registers the example targets in reg and returns the counters of
// their side effects.
func Register(reg *flow.Registry) (*Effects, error) {
	fx := &Effects{}
	err := errors.Join(
		registerCheckout(reg, fx),
		registerSendReceipt(reg, fx),
		registerSupportAgent(reg, fx),
		registerRefundPolicy(reg),
		registerTriage(reg),
	)
	if err != nil {
		return nil, err
	}
	return fx, nil
}
