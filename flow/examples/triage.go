package examples

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/pyrula/caseworker/flow"
)

// Triage is the name of the triage workflow: it classifies a ticket and,
// when its inputs ask for them, reads the ticket's update stream, asks a
// reviewer (an interrupt), snoozes (a durable sleep, then a clock read),
// makes a slow lookup (a read that takes lookup_ms) and asks for a second
// opinion (a child triage run). With its defaults it makes
// only the classify step, so a recorded run with the defaults is a case in
// which each of those calls is new: the calls that a case run cannot wait
// for, and a sleep that must advance the run's clock.
const Triage = "triage"

// TriageInputs are triage's inputs. Defaults: ticket "T-5521", everything
// else off.
type TriageInputs struct {
	// Ticket is the ticket id; ids that do not start with "T-" are unknown
	// (the classify step fails with UnknownTicket).
	Ticket string `json:"ticket"`
	// FollowUpdates reads the next item of the "updates" stream.
	FollowUpdates bool `json:"follow_updates"`
	// AskReviewer asks the "review" interrupt.
	AskReviewer bool `json:"ask_reviewer"`
	// SnoozeMS, when positive, sleeps that long and then reads the clock.
	SnoozeMS int `json:"snooze_ms"`
	// SecondOpinion, when set, triages this ticket id in a child run; a
	// child that fails is reported in the result, not an error.
	SecondOpinion string `json:"second_opinion"`
	// LookupMS, when positive, makes a lookup step (a read) that takes that
	// long unless cancelled: a live call to interrupt.
	LookupMS int `json:"lookup_ms"`
}

// TriageResult is triage's result.
type TriageResult struct {
	Queue    string `json:"queue"`
	Priority int    `json:"priority"`
	// Update is the text of the update read from the stream.
	Update string `json:"update,omitempty"`
	// Review is the reviewer's action.
	Review string `json:"review,omitempty"`
	// WokeAt is the time read after the snooze (RFC 3339).
	WokeAt string `json:"woke_at,omitempty"`
	// SecondOpinion is the child's queue, or "failed: <error type>".
	SecondOpinion string `json:"second_opinion,omitempty"`
}

// ClassifyInput is the classify step's input.
type ClassifyInput struct {
	Ticket string `json:"ticket"`
}

// Classification is the classify step's result.
type Classification struct {
	Queue    string `json:"queue"`
	Priority int    `json:"priority"`
}

// TicketLookup is the lookup step's input.
type TicketLookup struct {
	Ticket string `json:"ticket"`
	MS     int    `json:"ms"`
}

// UpdatesCursor is the input of a read of the "updates" stream.
type UpdatesCursor struct {
	Ticket string `json:"ticket"`
	After  int    `json:"after"`
}

// TicketUpdate is an item of the "updates" stream.
type TicketUpdate struct {
	Text string `json:"text"`
}

// ReviewRequest is the input of the "review" interrupt.
type ReviewRequest struct {
	Ticket string `json:"ticket"`
	Queue  string `json:"queue"`
}

func registerTriage(reg *flow.Registry) error {
	classify := flow.DefineStep("classify", flow.Read, func(ctx context.Context, in ClassifyInput) (Classification, error) {
		if !strings.HasPrefix(in.Ticket, "T-") {
			return Classification{}, flow.Errorf("UnknownTicket", "no ticket %q", in.Ticket)
		}
		return Classification{Queue: "refunds", Priority: 2}, nil
	})
	lookup := flow.DefineStep("lookup", flow.Read, func(ctx context.Context, in TicketLookup) (Classification, error) {
		select {
		case <-time.After(time.Duration(in.MS) * time.Millisecond):
			return Classification{Queue: "refunds", Priority: 2}, nil
		case <-ctx.Done():
			return Classification{}, ctx.Err()
		}
	})
	return flow.RegisterWorkflow(reg, flow.Workflow[TriageInputs, TriageResult]{
		Name:        Triage,
		CodeVersion: CodeVersion,
		Defaults:    TriageInputs{Ticket: "T-5521"},
		Steps:       []flow.Decl{classify, lookup, flow.DeclareChild(Triage)},
		Run: func(ctx context.Context, in TriageInputs) (TriageResult, error) {
			c, err := classify.Call(ctx, ClassifyInput{Ticket: in.Ticket})
			if err != nil {
				return TriageResult{}, err
			}
			out := TriageResult{Queue: c.Queue, Priority: c.Priority}
			if in.LookupMS > 0 {
				if _, err := lookup.Call(ctx, TicketLookup{Ticket: in.Ticket, MS: in.LookupMS}); err != nil {
					return out, err
				}
			}
			if in.FollowUpdates {
				u, err := flow.ReadStream[UpdatesCursor, TicketUpdate](ctx, "updates", UpdatesCursor{Ticket: in.Ticket})
				if err != nil {
					return out, err
				}
				out.Update = u.Text
			}
			if in.AskReviewer {
				a, err := flow.Interrupt(ctx, "review", ReviewRequest{Ticket: in.Ticket, Queue: c.Queue})
				if err != nil {
					return out, err
				}
				out.Review = a.Action
			}
			if in.SnoozeMS > 0 {
				if err := flow.Sleep(ctx, time.Duration(in.SnoozeMS)*time.Millisecond); err != nil {
					return out, err
				}
				at, err := flow.Now(ctx)
				if err != nil {
					return out, err
				}
				out.WokeAt = at.UTC().Format(time.RFC3339)
			}
			if in.SecondOpinion != "" {
				other, err := flow.Child[TriageResult](ctx, flow.ChildParams{
					Target: Triage, Inputs: TriageInputs{Ticket: in.SecondOpinion},
				})
				var ce *flow.CallError
				switch {
				case errors.As(err, &ce):
					out.SecondOpinion = "failed: " + ce.Type
				case err != nil:
					return out, err
				default:
					out.SecondOpinion = other.Queue
				}
			}
			return out, nil
		},
	})
}
