package core

import (
	"context"
	"encoding/json"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names the call spans' instrumentation scope.
const tracerName = "github.com/pyrula/caseworker/flow"

// callTrace is the span of one call, started only when the call's context
// holds a recording span (a traced run): a run that is not traced starts
// none and pays only for this struct's zero value.
type callTrace struct {
	span      trace.Span
	journaled bool       // delivered from the run's own journal
	res       Resolution // the resolver's decision
	result    json.RawMessage
	model     bool
}

// start starts the span of call c under parent, the span of ctx, and
// returns ctx with it.
func (t *callTrace) start(ctx context.Context, parent trace.Span, c Call) context.Context {
	attrs := []attribute.KeyValue{
		attribute.String("pyrula.call.id", c.ID()), attribute.Int("pyrula.call.seq", c.Seq),
		attribute.String("pyrula.call.kind", string(c.Kind)), attribute.String("pyrula.call.key", c.Key),
		attribute.String("pyrula.call.effect", string(c.Effect)), attribute.String("pyrula.call.fingerprint", c.Fingerprint),
	}
	if c.Model != nil && c.Model.Model != "" {
		attrs = append(attrs, attribute.String("gen_ai.request.model", c.Model.Model))
	}
	t.model = c.Kind == KindModel
	ctx, t.span = parent.TracerProvider().Tracer(tracerName).Start(ctx, "call "+string(c.Kind), trace.WithAttributes(attrs...))
	return ctx
}

// end ends the span with how the call was resolved (its action and
// provenance, or that the run's journal had it), a model call's tokens,
// and err: the call's own error (a *CallError, recorded) or what stopped
// the run.
func (t *callTrace) end(err error) {
	if t.span == nil {
		return
	}
	if t.journaled {
		t.span.SetAttributes(attribute.Bool("pyrula.call.from_journal", true))
	} else {
		t.span.SetAttributes(attribute.String("pyrula.call.action", t.res.Action.String()))
		if t.res.Provenance != "" {
			t.span.SetAttributes(attribute.String("pyrula.call.provenance", t.res.Provenance))
		}
	}
	if t.model && len(t.result) > 0 {
		var resp ModelResponse
		if json.Unmarshal(t.result, &resp) == nil && resp.Usage != nil {
			t.span.SetAttributes(attribute.Int64("gen_ai.usage.input_tokens", resp.Usage.InputTokens),
				attribute.Int64("gen_ai.usage.output_tokens", resp.Usage.OutputTokens))
		}
	}
	var stop *StopError
	var cerr *CallError
	switch {
	case err == nil:
	case errors.As(err, &cerr):
		t.span.SetStatus(codes.Error, "the call failed: "+cerr.Type)
	case errors.As(err, &stop):
		t.span.SetAttributes(attribute.String("pyrula.code", string(stop.Code)))
		t.span.SetStatus(codes.Error, string(stop.Code)+": "+stop.Message)
	default:
		t.span.SetStatus(codes.Error, err.Error())
	}
	t.span.End()
}
