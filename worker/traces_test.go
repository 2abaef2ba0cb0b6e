package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/zap/zaptest"

	"github.com/pyrula/caseworker/flow/examples"
	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/internal/testwait"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/memstore"
	"github.com/pyrula/caseworker/worker"
)

// withTraces restarts e's worker with a tracer provider whose ended spans
// the returned recorder keeps.
func (e *env) withTraces(st store.Store) *tracetest.SpanRecorder {
	e.t.Helper()
	rec := tracetest.NewSpanRecorder()
	e.restart(worker.Params{Store: st, Registerer: prometheus.NewRegistry(), Logger: zaptest.NewLogger(e.t),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))})
	return rec
}

// TestDeadLetterTraced: a message whose every delivery fails (its reply_to
// is a string key) is traced in each delivery, each message span failed
// at its reply step, and then in its dead_letter span; all of them in the
// trace its entry's traceparent names, under the sender's span.
func TestDeadLetterTraced(t *testing.T) {
	t.Parallel()
	st := memstore.New(memstore.Options{})
	e := setup(t, st, nil) // MaxDeliveries 3, ClaimIdle 100ms
	rec := e.withTraces(st)
	ctx := context.Background()
	replyTo := e.cfg.Namespace + ":my-replies"
	if err := e.client.Do(ctx, e.client.B().Set().Key(replyTo).Value("not a stream").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	msg, _ := json.Marshal(map[string]any{"message_id": "f1", "type": "delete_case_bundle", "reply_to": replyTo,
		"body": map[string]string{"fixture_hash": zeroHash}})
	const traceID, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	if err := e.client.Do(ctx, e.client.B().Xadd().Key(e.cfg.CaseStream).Id("*").FieldValue().FieldValue("message", string(msg)).
		FieldValue("traceparent", "00-"+traceID+"-"+parent+"-01").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	failed := func() int {
		n := 0
		for _, s := range rec.Ended() {
			if s.Name() == "message delete_case_bundle" && s.Status().Code == codes.Error {
				n++
			}
		}
		return n
	}
	testwait.Eventually(t, 10*time.Second, "three failed deliveries", func() bool { return failed() >= 3 })
	if err := e.client.Do(ctx, e.client.B().Del().Key(replyTo).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	var dead []sdktrace.ReadOnlySpan
	testwait.Eventually(t, 10*time.Second, "the dead_letter span", func() bool {
		dead = dead[:0]
		for _, s := range rec.Ended() {
			if s.Name() == "dead_letter" {
				dead = append(dead, s)
			}
		}
		return len(dead) > 0
	})
	if len(dead) != 1 || dead[0].Status().Code != codes.Error || dead[0].SpanContext().TraceID().String() != traceID ||
		dead[0].Parent().SpanID().String() != parent {
		t.Fatalf("dead_letter spans: %d, the first %v in trace %s under %s", len(dead), dead[0].Status(), dead[0].SpanContext().TraceID(), dead[0].Parent().SpanID())
	}
	byID := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byID[s.SpanContext().SpanID().String()] = s
	}
	deliveries := 0
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID().String() != traceID {
			t.Errorf("span %s is in trace %s", s.Name(), s.SpanContext().TraceID())
		}
		if s.Name() != "reply" {
			continue
		}
		deliveries++
		msgSpan, ok := byID[s.Parent().SpanID().String()]
		if s.Status().Code != codes.Error || !ok || msgSpan.Name() != "message delete_case_bundle" || msgSpan.Parent().SpanID().String() != parent {
			t.Errorf("a failed delivery's reply span: status %v, under %v", s.Status(), msgSpan)
		}
	}
	if deliveries != failed() || deliveries < 3 {
		t.Errorf("%d reply spans for %d failed deliveries", deliveries, failed())
	}
}

// TestUnrunnableRunTraced: a run whose run:submitted event has no readable
// message_type is dead-lettered at once, and its execution is traced: a
// span "run" with the run's id, failed, marked dead-lettered, naming the
// field.
func TestUnrunnableRunTraced(t *testing.T) {
	t.Parallel()
	st := memstore.New(memstore.Options{})
	e := setup(t, st, nil)
	rec := e.withTraces(st)
	ctx := context.Background()
	runID := testenv.UniqueName(t, "run")
	if _, err := e.journalOf().Create(ctx, journal.CreateParams{RunID: runID, TargetName: examples.Checkout,
		CodeVersion: examples.CodeVersion, Fields: map[string]json.RawMessage{"message_id": json.RawMessage(`"u1"`)}}); err != nil {
		t.Fatal(err)
	}
	if err := e.client.Do(ctx, e.client.B().Xadd().Key(e.cfg.Namespace+":runs").Id("*").FieldValue().FieldValue("run_id", runID).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	e.waitRun(runID, 20*time.Second)
	var runs []sdktrace.ReadOnlySpan
	testwait.Eventually(t, 10*time.Second, "the run's span", func() bool {
		runs = runs[:0]
		for _, s := range rec.Ended() {
			if strings.HasPrefix(s.Name(), "run") {
				runs = append(runs, s)
			}
		}
		return len(runs) > 0
	})
	s := runs[0]
	attrs := map[string]string{}
	for _, a := range s.Attributes() {
		attrs[string(a.Key)] = a.Value.String()
	}
	if len(runs) != 1 || s.Name() != "run" || s.Status().Code != codes.Error || !strings.Contains(s.Status().Description, "dead-lettered") ||
		!strings.Contains(s.Status().Description, "has no message_type") || attrs["pyrula.run_id"] != runID || attrs["pyrula.dead_lettered"] != "true" {
		t.Fatalf("%d run spans, the first %q: status %v, attributes %v", len(runs), s.Name(), s.Status(), attrs)
	}
}
