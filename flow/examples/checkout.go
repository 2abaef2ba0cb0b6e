package examples

import (
	"context"
	"fmt"
	"time"

	"github.com/pyrula/caseworker/flow"
)

// CheckoutInputs are checkout's inputs. Defaults: sku "SKU-42", qty 2, email
// "jurgen@example.com", approval "approved", delay_ms 10.
type CheckoutInputs struct {
	// SKU is the product to buy; "SKU-42" and "SKU-7" have prices.
	SKU string `json:"sku"`
	// Qty is how many.
	Qty int `json:"qty"`
	// Email receives the receipt.
	Email string `json:"email"`
	// Approval is the decision the workflow sends itself as the "approval"
	// signal before waiting for it ("approved" or anything else), so that
	// the example never waits for a person.
	Approval string `json:"approval"`
	// DelayMS is the durable sleep between reserving and confirming.
	DelayMS int `json:"delay_ms"`
}

// CheckoutResult is checkout's result.
type CheckoutResult struct {
	// Status is "confirmed", "rejected" or "approval_timed_out".
	Status        string `json:"status"`
	ReservationID string `json:"reservation_id"`
	TotalMinor    int    `json:"total_minor"`
	Currency      string `json:"currency"`
	Confirmation  string `json:"confirmation,omitempty"`
	ConfirmedAt   string `json:"confirmed_at,omitempty"`
	Receipt       string `json:"receipt,omitempty"`
	// MessageID is the receipt email's id, from the child run.
	MessageID string `json:"message_id,omitempty"`
}

// QuoteInput is the quote step's input.
type QuoteInput struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

// Quote is the quote step's result; prices are in minor units (cents).
type Quote struct {
	UnitMinor  int    `json:"unit_minor"`
	TotalMinor int    `json:"total_minor"`
	Currency   string `json:"currency"`
}

// ReserveInput is the reserve step's input.
type ReserveInput struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

// Reservation is the reserve step's result.
type Reservation struct {
	ReservationID string `json:"reservation_id"`
}

// ReceiptInput is the format_receipt step's input.
type ReceiptInput struct {
	SKU           string `json:"sku"`
	Qty           int    `json:"qty"`
	TotalMinor    int    `json:"total_minor"`
	Currency      string `json:"currency"`
	ReservationID string `json:"reservation_id"`
	Confirmation  string `json:"confirmation"`
	ConfirmedAt   string `json:"confirmed_at"`
}

// Approval is the payload of the "approval" signal.
type Approval struct {
	Decision string `json:"decision"`
}

var prices = map[string]int{"SKU-42": 1999, "SKU-7": 10000}

// approvalTimeout bounds checkout's wait for its approval signal: after a
// crash with an in-memory inbox the signal it sent itself is gone.
const approvalTimeout = time.Second

func checkoutSteps(fx *Effects) (quote flow.StepDef[QuoteInput, Quote], reserve flow.StepDef[ReserveInput, Reservation], format flow.StepDef[ReceiptInput, string]) {
	quote = flow.DefineStep("quote", flow.Read, func(ctx context.Context, in QuoteInput) (Quote, error) {
		fx.Quotes.Add(1)
		unit, ok := prices[in.SKU]
		if !ok {
			return Quote{}, flow.Errorf("UnknownSKU", "no price for %s", in.SKU)
		}
		return Quote{UnitMinor: unit, TotalMinor: unit * in.Qty, Currency: "EUR"}, nil
	})
	reserve = flow.DefineStep("reserve", flow.Write, func(ctx context.Context, in ReserveInput) (Reservation, error) {
		n := fx.Reservations.Add(1)
		return Reservation{ReservationID: fmt.Sprintf("rsv_%04d", n)}, nil
	})
	format = flow.DefineStep("format_receipt", flow.Pure, func(ctx context.Context, in ReceiptInput) (string, error) {
		return fmt.Sprintf("%d x %s: %s %d.%02d, reservation %s, confirmation %s at %s",
			in.Qty, in.SKU, in.Currency, in.TotalMinor/100, in.TotalMinor%100,
			in.ReservationID, in.Confirmation, in.ConfirmedAt), nil
	})
	return quote, reserve, format
}

func registerCheckout(reg *flow.Registry, fx *Effects) error {
	quote, reserve, format := checkoutSteps(fx)
	return flow.RegisterWorkflow(reg, flow.Workflow[CheckoutInputs, CheckoutResult]{
		Name:        Checkout,
		CodeVersion: CodeVersion,
		Defaults: CheckoutInputs{
			SKU: "SKU-42", Qty: 2, Email: "jurgen@" + exampleDomain, Approval: "approved", DelayMS: 10,
		},
		Steps: []flow.Decl{
			quote, reserve, format,
			flow.DeclareSignalSend(ApprovalName), flow.DeclareChild(SendReceipt),
		},
		Run: func(ctx context.Context, in CheckoutInputs) (CheckoutResult, error) {
			q, err := quote.Call(ctx, QuoteInput{SKU: in.SKU, Qty: in.Qty})
			if err != nil {
				return CheckoutResult{}, err
			}
			res, err := reserve.Call(ctx, ReserveInput{SKU: in.SKU, Qty: in.Qty})
			if err != nil {
				return CheckoutResult{}, err
			}
			out := CheckoutResult{ReservationID: res.ReservationID, TotalMinor: q.TotalMinor, Currency: q.Currency}
			if err := flow.Sleep(ctx, time.Duration(in.DelayMS)*time.Millisecond); err != nil {
				return out, err
			}
			at, err := flow.Now(ctx)
			if err != nil {
				return out, err
			}
			x, err := flow.Random(ctx)
			if err != nil {
				return out, err
			}
			err = flow.SendSignal(ctx, flow.SignalParams{RunID: flow.RunID(ctx), Name: ApprovalName,
				Payload: Approval{Decision: in.Approval}})
			if err != nil {
				return out, err
			}
			approval, ok, err := flow.ReceiveSignal[Approval](ctx, ApprovalName, approvalTimeout)
			switch {
			case err != nil:
				return out, err
			case !ok:
				out.Status = "approval_timed_out"
				return out, nil
			case approval.Decision != "approved":
				out.Status = "rejected"
				return out, nil
			}
			out.Status = "confirmed"
			out.Confirmation = fmt.Sprintf("C%06d", int(x*1e6))
			out.ConfirmedAt = at.UTC().Format(time.RFC3339)
			out.Receipt, err = format.Call(ctx, ReceiptInput{
				SKU: in.SKU, Qty: in.Qty, TotalMinor: q.TotalMinor, Currency: q.Currency,
				ReservationID: res.ReservationID, Confirmation: out.Confirmation, ConfirmedAt: out.ConfirmedAt,
			})
			if err != nil {
				return out, err
			}
			sent, err := flow.Child[EmailResult](ctx, flow.ChildParams{
				Target: SendReceipt,
				Inputs: SendReceiptInputs{Email: in.Email, Body: out.Receipt},
			})
			if err != nil {
				return out, err
			}
			out.MessageID = sent.MessageID
			return out, nil
		},
	})
}

// SendReceiptInputs are send_receipt's inputs. Defaults: email
// "jurgen@example.com", body "Thank you for your order.".
type SendReceiptInputs struct {
	Email string `json:"email"`
	Body  string `json:"body"`
}

// EmailResult is send_receipt's result and its send_email step's.
type EmailResult struct {
	MessageID string `json:"message_id"`
	Queued    bool   `json:"queued"`
}

func registerSendReceipt(reg *flow.Registry, fx *Effects) error {
	send := flow.DefineStep("send_email", flow.Write, func(ctx context.Context, in SendReceiptInputs) (EmailResult, error) {
		n := fx.Emails.Add(1)
		return EmailResult{MessageID: fmt.Sprintf("msg_%04d@%s", n, exampleDomain), Queued: true}, nil
	})
	return flow.RegisterWorkflow(reg, flow.Workflow[SendReceiptInputs, EmailResult]{
		Name:        SendReceipt,
		CodeVersion: CodeVersion,
		Defaults:    SendReceiptInputs{Email: "jurgen@" + exampleDomain, Body: "Thank you for your order."},
		Steps:       []flow.Decl{send},
		Run: func(ctx context.Context, in SendReceiptInputs) (EmailResult, error) {
			return send.Call(ctx, in)
		},
	})
}
