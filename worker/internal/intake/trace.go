package intake

import (
	"context"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/pyrula/caseworker/internal/tracing"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/worker/internal/consumer"
)

// handleTraced handles delivery d inside its message span, a child of the
// trace context its entry carries (a new trace when none): the span starts
// when the entry was added (the time its id stamps) and holds a read span
// (from then until the read that delivered it), then the handle, record,
// reply and ack spans of handle and finish.
func (in *Intake) handleTraced(ctx context.Context, d consumer.Delivery) consumer.Verdict {
	ctx, _ = tracing.EntryContext(ctx, d.Entry.FieldValues)
	readAt := d.ReadAt
	if readAt.IsZero() {
		readAt = time.Now()
	}
	added := entryTime(d.Entry.ID, readAt)
	ctx, span := in.deps.Tracer.Start(ctx, "message", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(added),
		trace.WithAttributes(attribute.String("messaging.system", "redis"), attribute.String("messaging.destination.name", in.cfg.CaseStream),
			attribute.String("messaging.message.id", d.Entry.ID), attribute.Int64("pyrula.deliveries", d.Deliveries)))
	defer span.End()
	_, read := in.deps.Tracer.Start(ctx, "read", trace.WithTimestamp(added))
	read.End(trace.WithTimestamp(readAt))
	return in.handle(ctx, d.Entry, d.Deliveries)
}

// startDeadLetterSpan starts the span of the dead-lettering of delivery d,
// delivered deliveries times, under the trace context its entry carries;
// nil when tracing is off.
func (in *Intake) startDeadLetterSpan(ctx context.Context, d consumer.Delivery, deliveries int64) (context.Context, trace.Span) {
	if in.deps.Tracer == nil {
		return ctx, nil
	}
	ctx, _ = tracing.EntryContext(ctx, d.Entry.FieldValues)
	ctx, span := in.deps.Tracer.Start(ctx, "dead_letter", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("messaging.destination.name", in.cfg.CaseStream),
			attribute.String("messaging.message.id", d.Entry.ID), attribute.Int64("pyrula.deliveries", deliveries)))
	span.SetStatus(codes.Error, "dead-lettered after its deliveries failed")
	return ctx, span
}

// entryTime is the time stream entry id stamps (its milliseconds), or
// fallback when it stamps none or one after fallback (another node's
// clock).
func entryTime(id string, fallback time.Time) time.Time {
	ms, _, ok := strings.Cut(id, "-")
	if !ok {
		return fallback
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return fallback
	}
	if t := time.UnixMilli(n); t.Before(fallback) {
		return t
	}
	return fallback
}

// startStep starts the span of one step of a message's handling (handle,
// record, reply, ack) under ctx's message span; nil when tracing is off.
func (in *Intake) startStep(ctx context.Context, name string) (context.Context, trace.Span) {
	if in.deps.Tracer == nil {
		return ctx, nil
	}
	return in.deps.Tracer.Start(ctx, name)
}

// endStep ends a step's span (nil: tracing is off), marking it failed with
// err when err is set.
func endStep(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// noteMessage names ctx's message span after the message (its type) and
// sets what its handling decided: the message id, the reply's status and
// code, or the transient failure that left it pending.
func (in *Intake) noteMessage(ctx context.Context, out *outcome, typ string, err error) {
	if in.deps.Tracer == nil {
		return
	}
	span := trace.SpanFromContext(ctx)
	if typ != "" {
		span.SetName("message " + typ)
	}
	attrs := []attribute.KeyValue{attribute.String("pyrula.message_type", typ)}
	if out.reply.MessageID != "" {
		attrs = append(attrs, attribute.String("pyrula.message_id", out.reply.MessageID))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "transient failure; the message stays pending: "+err.Error())
	} else {
		attrs = append(attrs, attribute.String("pyrula.status", string(out.reply.Status)))
		if out.reply.Code != "" {
			attrs = append(attrs, attribute.String("pyrula.code", string(out.reply.Code)))
		}
		if out.reply.Status == messages.StatusError {
			span.SetStatus(codes.Error, string(out.reply.Code))
		}
	}
	span.SetAttributes(attrs...)
}
