package tracing

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// TestEnabled: traces are off by default and turned on by an OTLP endpoint
// or OTEL_TRACES_EXPORTER=otlp; disabled, none, another exporter and
// another protocol are told apart.
func TestEnabled(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		on   bool
		err  string // a part of the error, naming the variable
	}{
		{"nothing set", nil, false, ""},
		{"an endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true, ""},
		{"a traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true, ""},
		{"otlp without an endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, ""},
		{"none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, false, ""},
		{"sdk disabled", map[string]string{"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp"}, false, ""},
		{"sdk not disabled", map[string]string{"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "otlp"}, true, ""},
		{"http/protobuf", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, true, ""},
		{"zipkin", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, "OTEL_TRACES_EXPORTER"},
		{"grpc", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false, "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{"traces over json", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, false, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
		{"grpc while off", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			on, err := Enabled(func(k string) string { return c.env[k] })
			switch {
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("err %v, want one naming %s", err, c.err)
			case c.err == "" && err != nil:
				t.Fatalf("err %v", err)
			case on != c.on:
				t.Fatalf("on %v, want %v", on, c.on)
			}
		})
	}
}

// TestTraceContextRoundTrip: a traceparent and tracestate read from a
// stream entry's fields are written back the same, and an invalid one is
// no context.
func TestTraceContextRoundTrip(t *testing.T) {
	const tp, ts = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "vendor=abc"
	ctx, ok := EntryContext(context.Background(), map[string]string{"message": "{}", TraceparentField: tp, TracestateField: ts})
	if !ok {
		t.Fatal("a valid traceparent was not read")
	}
	if sc := trace.SpanContextFromContext(ctx); sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || !sc.IsRemote() || !sc.IsSampled() {
		t.Fatalf("span context %+v", sc)
	}
	if gotTP, gotTS := Traceparent(ctx); gotTP != tp || gotTS != ts {
		t.Fatalf("written back as %q, %q", gotTP, gotTS)
	}
	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"} {
		ctx, ok := ContextOf(context.Background(), bad, "")
		if ok {
			t.Errorf("traceparent %q was taken", bad)
		}
		if got, _ := Traceparent(ctx); got != "" {
			t.Errorf("traceparent %q written back as %q", bad, got)
		}
	}
}
