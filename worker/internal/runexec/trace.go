package runexec

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/worker/internal/runwire"
)

// startRunSpan returns ctx with the trace context run:submitted event sub
// carries (the submitting message's, or the suite's for a child) and, when
// tracing is on, the span of this execution of the run under it (nil when
// off). The flow runtime and the case engine start each call's span under
// it.
func (x *Executor) startRunSpan(ctx context.Context, sub journal.Event, meta journal.Meta, typ messages.MessageType) (context.Context, trace.Span) {
	ctx = runwire.TraceContext(ctx, sub)
	if x.deps.Tracer == nil {
		return ctx, nil
	}
	attrs := []attribute.KeyValue{attribute.String("pyrula.run_id", meta.RunID), attribute.String("pyrula.target", meta.TargetName),
		attribute.String("pyrula.run_type", string(typ))}
	if ref, ok := suiteRefOf(sub); ok {
		attrs = append(attrs, attribute.String("pyrula.suite_id", ref.SuiteID), attribute.Int("pyrula.suite_index", ref.Index))
	}
	name := "run"
	if typ != "" {
		name += " " + string(typ) // "run": a run whose type cannot be read
	}
	return x.deps.Tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// endRunSpan ends a run's span (nil: tracing is off) with how this
// execution ended: the run's status and code; a run that cannot be
// executed (dead-lettered at once); or the failure that leaves its entry
// pending, to be retried (and dead-lettered past PYRULA_MAX_DELIVERIES).
func endRunSpan(span trace.Span, out host.Outcome, err error) {
	if span == nil {
		return
	}
	switch {
	case errors.Is(err, errUnrunnable):
		span.RecordError(err)
		span.SetAttributes(attribute.Bool("pyrula.dead_lettered", true))
		span.SetStatus(codes.Error, "the run cannot be executed; dead-lettered: "+err.Error())
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, "failed; the run's entry stays pending, retried (dead-lettered past PYRULA_MAX_DELIVERIES): "+err.Error())
	default:
		span.SetAttributes(attribute.String("pyrula.status", string(out.Status)), attribute.Int64("pyrula.last_seq", out.LastSeq))
		if out.Code != "" {
			span.SetAttributes(attribute.String("pyrula.code", string(out.Code)))
		}
		if out.Status == host.StatusError {
			span.SetStatus(codes.Error, string(out.Code)+": "+out.Message)
		}
	}
	span.End()
}
