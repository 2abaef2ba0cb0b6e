// Package tracing is the worker's OpenTelemetry set-up and the trace
// context's wire forms: whether the standard OTEL_* variables turn traces
// on (Enabled), the tracer provider that exports them over OTLP/HTTP
// (Start), and the W3C trace context carried in a message stream entry's
// fields and in a run's run:submitted event (EntryContext, Traceparent,
// ContextOf). Traces are off unless configured, and the worker's paths
// start no span while they are.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The W3C Trace Context names: a stream entry's fields and the
// run:submitted event's members that carry a trace context.
const (
	TraceparentField = "traceparent"
	TracestateField  = "tracestate"
)

// DefaultServiceName is the service.name of the worker's spans unless
// OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) names
// another.
const DefaultServiceName = "pyrula-worker"

// Enabled reports whether the OTEL_* variables getenv reads turn traces
// on: not when OTEL_SDK_DISABLED is true or OTEL_TRACES_EXPORTER is none;
// when OTEL_TRACES_EXPORTER is otlp; when it is unset, only if an OTLP
// endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set. Another exporter, or an OTLP
// protocol other than http/protobuf, is an error naming the variable.
func Enabled(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	on := false
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false, nil
	case "otlp":
		on = true
	case "":
		on = getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER: %q is not supported; the worker exports traces with otlp (or none)", exp)
	}
	if !on {
		return false, nil
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		switch p := strings.TrimSpace(getenv(name)); p {
		case "", "http/protobuf":
		default:
			return false, fmt.Errorf("%s: %q is not supported; the worker exports OTLP over http/protobuf (a collector's port 4318)", name, p)
		}
	}
	return true, nil
}

// Provider is the worker's tracer provider, exporting in batches over
// OTLP/HTTP.
type Provider struct {
	sdk *sdktrace.TracerProvider
}

// Start returns the tracer provider the OTEL_* variables configure, or nil
// when they leave traces off (Enabled). The exporter reads its endpoint,
// headers, timeout and TLS settings, the batch processor its OTEL_BSP_*
// settings and the SDK its OTEL_TRACES_SAMPLER from the process
// environment, as every OpenTelemetry SDK does; serviceVersion is the
// service.version of the spans.
func Start(ctx context.Context, getenv func(string) string, serviceVersion string) (*Provider, error) {
	on, err := Enabled(getenv)
	if err != nil || !on {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", DefaultServiceName), attribute.String("service.version", serviceVersion)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return &Provider{sdk: sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))}, nil
}

// TracerProvider returns p as the API's trace.TracerProvider.
func (p *Provider) TracerProvider() trace.TracerProvider { return p.sdk }

// Shutdown exports the spans still buffered and stops the exporter, within
// ctx.
func (p *Provider) Shutdown(ctx context.Context) error {
	if err := p.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("flush the traces: %w", err)
	}
	return nil
}

// propagator reads and writes the W3C traceparent and tracestate.
var propagator = propagation.TraceContext{}

// mapCarrier is a propagation.TextMapCarrier over a map of fields.
type mapCarrier map[string]string

func (m mapCarrier) Get(key string) string { return m[key] }
func (m mapCarrier) Set(key, value string) { m[key] = value }
func (m mapCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// EntryContext returns ctx with the remote span context a stream entry's
// traceparent and tracestate fields carry, and whether they carried a
// valid one.
func EntryContext(ctx context.Context, fields map[string]string) (context.Context, bool) {
	ctx = propagator.Extract(ctx, mapCarrier(fields))
	return ctx, trace.SpanContextFromContext(ctx).IsValid()
}

// ContextOf returns ctx with the remote span context of traceparent and
// tracestate, as a run's run:submitted event carries them, and whether it
// is valid.
func ContextOf(ctx context.Context, traceparent, tracestate string) (context.Context, bool) {
	return EntryContext(ctx, map[string]string{TraceparentField: traceparent, TracestateField: tracestate})
}

// Traceparent returns the W3C traceparent and tracestate of ctx's span
// context ("" when it has none).
func Traceparent(ctx context.Context) (traceparent, tracestate string) {
	m := mapCarrier{}
	propagator.Inject(ctx, m)
	return m[TraceparentField], m[TracestateField]
}
