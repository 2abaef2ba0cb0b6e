// Package runwire holds the names the worker's two services share on the
// wire: the runs stream and its entries, which the message intake writes
// and the run executor reads, and the fields of a submitted run's
// run:submitted event, which tell the executor what to run. Neither
// service reaches into the other; both read these.
//
// runwire imports internal/tracing, journal, journal/capture,
// journal/valkeyjournal, messages, replay, runevent and
// worker/internal/replicas.
package runwire

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/tracing"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/capture"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/replay"
	"github.com/pyrula/caseworker/runevent"
	"github.com/pyrula/caseworker/worker/internal/replicas"
)

// The fields of a submitted run's run:submitted event that tell the
// executor what to run (besides target_name and the run's inputs).
const (
	FieldMessageID   = "message_id"
	FieldMessageType = "message_type"
	FieldRequest     = "request"
	// FieldSuite, on a suite's child, is its SuiteRef.
	FieldSuite = "suite"
	// FieldTraceparent and FieldTracestate are the W3C trace context the
	// run was submitted under (the message's, or its suite's run), when
	// there was one: the run's spans continue that trace.
	FieldTraceparent = tracing.TraceparentField
	FieldTracestate  = tracing.TracestateField
)

// AddTraceContext adds the W3C trace context of ctx, when it has one, to
// the fields of a run:submitted event.
func AddTraceContext(ctx context.Context, fields map[string]json.RawMessage) {
	tp, ts := tracing.Traceparent(ctx)
	if tp == "" {
		return
	}
	fields[FieldTraceparent], _ = json.Marshal(tp)
	if ts != "" {
		fields[FieldTracestate], _ = json.Marshal(ts)
	}
}

// TraceContext returns ctx with the remote span context run:submitted
// event sub carries, if any.
func TraceContext(ctx context.Context, sub journal.Event) context.Context {
	var tp, ts string
	if raw, ok := sub.Extra[FieldTraceparent]; !ok || json.Unmarshal(raw, &tp) != nil {
		return ctx
	}
	if raw, ok := sub.Extra[FieldTracestate]; ok {
		_ = json.Unmarshal(raw, &ts)
	}
	ctx, _ = tracing.ContextOf(ctx, tp, ts)
	return ctx
}

// SuiteRef is the suite field of a child's run:submitted event: the suite
// it belongs to and its place in the suite's plan.
type SuiteRef struct {
	SuiteID string `json:"suite_id"`
	Index   int    `json:"index"`
	// Assert are the assertions of the child's arm, which its verdict is
	// judged by.
	Assert []messages.SuiteAssertion `json:"assert,omitempty"`
}

// ReplicatedKey is the key, under hash tag tag (a run's or a suite's id),
// that a wait for replicas writes to cover the writes made before it in
// that slot (replicas.Waiter.Confirm); it expires within a minute.
func ReplicatedKey(namespace, tag string) string {
	return namespace + ":{" + tag + "}:replicated"
}

// ConfirmCreated makes sure, when w waits for replicas, that run runID's
// creation (its meta hash) is on the replicas of its node
// (replicas.Waiter.Confirm): a run submitted is not acknowledged before.
func ConfirmCreated(ctx context.Context, w replicas.Waiter, namespace, runID string) error {
	meta, _, _ := valkeyjournal.Keys(namespace, runID)
	err := w.Confirm(ctx, w.Client.B().Exists().Key(meta).Build(),
		func(r valkey.ValkeyResult) bool { n, err := r.AsInt64(); return err == nil && n == 1 },
		ReplicatedKey(namespace, runID))
	if err != nil {
		return fmt.Errorf("run %s's creation on the replicas: %w", runID, err)
	}
	return nil
}

// RunField is the one field of a runs stream entry: the run to execute.
const RunField = "run_id"

// RunsGroup is the consumer group of the runs stream.
const RunsGroup = "run-workers"

// RunsStream is the stream of submitted runs of namespace ns, <ns>:runs.
func RunsStream(ns string) string { return ns + ":runs" }

// Submitted returns run runID's run:submitted event (its first) and its
// meta, read together (journal.ReadHead: only the run's first event where
// the journal reads heads).
func Submitted(ctx context.Context, j journal.Journal, runID string) (journal.Event, journal.Meta, error) {
	meta, events, err := journal.ReadHead(ctx, j, runID, 1)
	if err != nil {
		return journal.Event{}, journal.Meta{}, fmt.Errorf("read run %s: %w", runID, err)
	}
	if len(events) == 0 || events[0].Kind != runevent.RunSubmitted {
		return journal.Event{}, journal.Meta{}, fmt.Errorf("run %s has no run:submitted event", runID)
	}
	return events[0], meta, nil
}

// ForkRangeRefusal is the refusal of a fork outside the run's events, in
// the message field that named it: a save_case's, or a run_case's journal
// source.
func ForkRangeRefusal(field string, fe *capture.ForkRangeError) error {
	return messages.Errorf(messages.InvalidOverrides, "%s %d is past the last event of run %s (run_seq 0 to %d; see pyrula events %s)",
		field, fe.ForkAfterSeq, fe.RunID, fe.LastSeq, fe.RunID)
}

// CaseOptions turns the message's options into the engine's; bad values
// are invalid_overrides.
func CaseOptions(o messages.RunCaseOptions) (replay.Options, error) {
	out := replay.Options{
		FromStart: o.FromStart, Inputs: o.Inputs, Model: o.Model, System: o.Prompt,
		LiveBudget: o.LiveBudget, MaxCostUSD: o.MaxCostUSD, AllowWrite: o.AllowWrite, ReplayOnly: o.ReplayOnly,
	}
	if o.LiveBudget != nil && *o.LiveBudget < 0 {
		return out, messages.Errorf(messages.InvalidOverrides, "options.live_budget %d is negative", *o.LiveBudget)
	}
	if o.MaxCostUSD != nil && (math.IsNaN(*o.MaxCostUSD) || math.IsInf(*o.MaxCostUSD, 0)) {
		// JSON cannot say NaN or Inf (decodeBody refuses what overflows),
		// but a ceiling that is not finite would switch the ceiling off.
		return out, messages.Errorf(messages.InvalidOverrides, "options.max_cost_usd %g is not a finite number: give the ceiling in US dollars, 0 or more", *o.MaxCostUSD)
	}
	if o.MaxCostUSD != nil && *o.MaxCostUSD < 0 {
		return out, messages.Errorf(messages.InvalidOverrides, "options.max_cost_usd %g is negative", *o.MaxCostUSD)
	}
	var err error
	if s := bytes.TrimSpace(o.Supply); len(s) > 0 && !bytes.Equal(s, []byte("null")) && !o.ReplayOnly {
		if len(s) > replay.MaxSupplyBytes {
			return out, messages.Errorf(messages.InvalidOverrides, "options.supply is over %d bytes", replay.MaxSupplyBytes)
		}
		if out.Supply, err = replay.ParseSupply(s); err != nil {
			return out, messages.Errorf(messages.InvalidOverrides, "options.supply: %v", err)
		}
	}
	if p := bytes.TrimSpace(o.Prices); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		if out.Prices, err = replay.ParsePrices(p); err != nil {
			return out, messages.Errorf(messages.InvalidOverrides, "options.prices: %s", strings.TrimPrefix(err.Error(), "prices: "))
		}
	}
	return out, nil
}
