package main_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/internal/testwait"
)

// otlpSpan is one span a collector received, its ids in hex.
type otlpSpan struct {
	traceID, spanID, parentID, name, service string
	attrs                                    map[string]string
	failed                                   bool
}

// collector is a local OTLP/HTTP trace receiver: it decodes every
// ExportTraceServiceRequest posted to /v1/traces and keeps its spans.
type collector struct {
	*httptest.Server
	mu       sync.Mutex
	spans    []otlpSpan
	requests int
	auth     map[string]int // the Authorization headers of the exports
}

func newCollector(t *testing.T) *collector {
	c := &collector{auth: map[string]int{}}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		if r.URL.Path != "/v1/traces" || err != nil {
			t.Errorf("collector: %s %s (%d bytes): %v", r.Method, r.URL.Path, len(body), err)
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.requests++
		c.auth[r.Header.Get("Authorization")]++
		for _, rs := range req.ResourceSpans {
			service := attrsOf(rs.GetResource().GetAttributes())["service.name"]
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					c.spans = append(c.spans, otlpSpan{traceID: hex.EncodeToString(s.TraceId), spanID: hex.EncodeToString(s.SpanId),
						parentID: hex.EncodeToString(s.ParentSpanId), name: s.Name, service: service, attrs: attrsOf(s.Attributes),
						failed: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR})
				}
			}
		}
		c.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(c.Close)
	return c
}

// attrsOf renders OTLP attributes as strings.
func attrsOf(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = fmt.Sprint(x.IntValue)
		case *commonpb.AnyValue_DoubleValue:
			m[kv.Key] = fmt.Sprint(x.DoubleValue)
		case *commonpb.AnyValue_BoolValue:
			m[kv.Key] = fmt.Sprint(x.BoolValue)
		}
	}
	return m
}

// trace returns the spans of trace id received so far.
func (c *collector) trace(id string) []otlpSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []otlpSpan
	for _, s := range c.spans {
		if s.traceID == id {
			out = append(out, s)
		}
	}
	return out
}

// all returns every span received so far and the number of exports.
func (c *collector) all() ([]otlpSpan, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]otlpSpan(nil), c.spans...), c.requests
}

// dump renders every span received, one a line, with its attributes.
func (c *collector) dump() string {
	spans, _ := c.all()
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "%s %s %s %s %v\n", s.service, s.traceID, s.spanID, s.name, s.attrs)
	}
	return b.String()
}

// named returns the spans of spans named name.
func named(spans []otlpSpan, name string) []otlpSpan {
	var out []otlpSpan
	for _, s := range spans {
		if s.name == name {
			out = append(out, s)
		}
	}
	return out
}

// childrenOf returns the names of the spans whose parent is id.
func childrenOf(spans []otlpSpan, id string) []string {
	var out []string
	for _, s := range spans {
		if s.parentID == id {
			out = append(out, s.name)
		}
	}
	return out
}

// sendTraced XADDs message m to stream with a traceparent field
// (none when traceparent is "").
func sendTraced(t *testing.T, c valkey.Client, stream string, m envelope, traceparent string) {
	t.Helper()
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	fv := c.B().Xadd().Key(stream).Id("*").FieldValue().FieldValue("message", string(raw))
	if traceparent != "" {
		fv = fv.FieldValue("traceparent", traceparent)
	}
	if err := c.Do(context.Background(), fv.Build()).Error(); err != nil {
		t.Fatalf("XADD %s: %v", stream, err)
	}
}

// submittedTraceparent is the traceparent member of run runID's
// run:submitted event ("" when it has none).
func submittedTraceparent(t *testing.T, c valkey.Client, ns, runID string) string {
	t.Helper()
	key := ns + ":{" + runID + "}:events"
	entries, err := c.Do(context.Background(), c.B().Xrange().Key(key).Start("-").End("+").Count(1).Build()).AsXRange()
	if err != nil || len(entries) == 0 {
		t.Fatalf("XRANGE %s: %v (%d entries)", key, err, len(entries))
	}
	var ev struct {
		Kind        string `json:"kind"`
		Traceparent string `json:"traceparent"`
	}
	if err := json.Unmarshal([]byte(entries[0].FieldValues["event"]), &ev); err != nil || ev.Kind != "run:submitted" {
		t.Fatalf("the first event of %s: %v, %s", runID, err, entries[0].FieldValues["event"])
	}
	return ev.Traceparent
}

// TestTraces: a worker with an OTLP endpoint exports, to a local collector,
// the span of each message (a child of the traceparent its stream entry
// carries, with its read, handle, record, reply and ack steps), the span
// of each run's execution (under the message's handle span, through the
// traceparent its run:submitted event keeps) and a span per call with its
// provenance; live model calls carry their tokens, and a case run's their
// cost. A message without a traceparent starts a trace of its own.
func TestTraces(t *testing.T) {
	vurl := testenv.ValkeyURL(t)
	srv := newPaidServer(t)
	col := newCollector(t)
	ns := testenv.UniqueName(t, "wtrace")
	client := testenv.ValkeyClientAt(t, vurl, ns)
	stream, replies := ns+":case-messages", ns+":case-replies"
	w := startReadyOf(t, paidBin, workerEnv(vurl, ns, "traced", "PYRULA_FIXTURE_STORE=file://"+t.TempDir(),
		"PYRULA_LLM_REF=openai", "OPENAI_API_KEY=sk-paid", "OPENAI_BASE_URL="+srv.URL+"/v1", "PAIDTEST_WRITE_URL="+srv.URL+"/write",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+col.URL, "OTEL_BSP_SCHEDULE_DELAY=50")...)

	const traceA, parentA = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	const traceB, parentB = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	sendTraced(t, client, stream, envelope{MessageID: "record", Type: "start_run", Body: map[string]any{"target_name": "paid"}},
		"00-"+traceA+"-"+parentA+"-01")
	got, last := readReplies(t, client, replies, "0", 1, 30*time.Second)
	recorded := runResultID(got[0])
	if recorded == "" {
		t.Fatalf("start_run: %+v", got[0])
	}
	waitRunsFinished(t, client, ns, []string{recorded}, 30*time.Second)
	sendTraced(t, client, stream, envelope{MessageID: "save", Type: "save_case",
		Body: map[string]any{"target_name": "paid", "run_id": recorded, "fork_after_seq": 2}}, "")
	got, last = readReplies(t, client, replies, last, 1, 30*time.Second)
	hash := fixtureHashOf(got[0])
	if hash == "" {
		t.Fatalf("save_case: %+v", got[0])
	}
	sendTraced(t, client, stream, envelope{MessageID: "case", Type: "run_case", Body: map[string]any{"target_name": "paid",
		"source": map[string]any{"bundle": map[string]any{"fixture_hash": hash}},
		"options": map[string]any{"model": "m2", "allow_write": []string{"step:notify"}, "live_budget": 10,
			"prices": map[string]any{"m2": map[string]any{"input_per_mtok": paidPrice, "output_per_mtok": paidPrice}}}}},
		"00-"+traceB+"-"+parentB+"-01")
	got, _ = readReplies(t, client, replies, last, 1, 30*time.Second)
	caseRun := runResultID(got[0])
	if caseRun == "" {
		t.Fatalf("run_case: %+v", got[0])
	}
	waitRunsFinished(t, client, ns, []string{caseRun}, 30*time.Second)
	// SIGTERM: the worker exports what it still buffers as it stops.
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-w.done

	// The start_run: its message span under the sender's span, its steps,
	// its run's span under the handle step, the run's calls under the run.
	var spansA []otlpSpan
	testwait.Eventually(t, 10*time.Second, "the spans of the start_run's trace", func() bool {
		spansA = col.trace(traceA)
		return len(named(spansA, "run start_run")) > 0 && len(named(spansA, "call model")) >= 3
	})
	msg := named(spansA, "message start_run")
	if len(msg) != 1 || msg[0].parentID != parentA || msg[0].attrs["pyrula.message_id"] != "record" || msg[0].attrs["pyrula.status"] != "ok" ||
		msg[0].service != "pyrula-worker" {
		t.Fatalf("the start_run's message span: %+v", msg)
	}
	steps := childrenOf(spansA, msg[0].spanID)
	if want := "read handle record reply ack"; strings.Join(steps, " ") != want {
		t.Errorf("the message span's children: %v, want %s", steps, want)
	}
	handle := named(spansA, "handle")
	run := named(spansA, "run start_run")
	if len(handle) != 1 || len(run) != 1 || run[0].parentID != handle[0].spanID || run[0].attrs["pyrula.run_id"] != recorded ||
		run[0].attrs["pyrula.status"] != "complete" {
		t.Fatalf("the start_run's run span: %+v (handle %+v)", run, handle)
	}
	if tp := submittedTraceparent(t, client, ns, recorded); !strings.HasPrefix(tp, "00-"+traceA+"-"+handle[0].spanID+"-") {
		t.Errorf("run:submitted carries traceparent %q, want the handle span's (%s in %s)", tp, handle[0].spanID, traceA)
	}
	models, steps2 := named(spansA, "call model"), named(spansA, "call step")
	if len(models) != 3 || len(steps2) != 1 {
		t.Fatalf("the recording's call spans: %d model, %d step, want 3 and 1: %+v", len(models), len(steps2), spansA)
	}
	for _, s := range append(models, steps2...) {
		if s.parentID != run[0].spanID || s.attrs["pyrula.call.action"] != "live" {
			t.Errorf("call span %s: parent %s (run %s), action %q", s.attrs["pyrula.call.id"], s.parentID, run[0].spanID, s.attrs["pyrula.call.action"])
		}
	}
	for _, s := range models {
		if s.attrs["gen_ai.usage.input_tokens"] != "1000" || s.attrs["gen_ai.usage.output_tokens"] != "50" {
			t.Errorf("model call %s: tokens %q in, %q out, want 1000 and 50", s.attrs["pyrula.call.id"],
				s.attrs["gen_ai.usage.input_tokens"], s.attrs["gen_ai.usage.output_tokens"])
		}
	}

	// The run_case: every post-fork call with its provenance, the live
	// model calls with their cost at the given price.
	var spansB []otlpSpan
	testwait.Eventually(t, 10*time.Second, "the spans of the run_case's trace", func() bool {
		spansB = col.trace(traceB)
		return len(named(spansB, "run run_case")) > 0
	})
	caseSpan := named(spansB, "run run_case")
	if len(caseSpan) != 1 || caseSpan[0].attrs["pyrula.run_id"] != caseRun {
		t.Fatalf("the run_case's run span: %+v", caseSpan)
	}
	provenance := map[string]int{}
	paid := 0
	for _, s := range spansB {
		if !strings.HasPrefix(s.name, "call ") {
			continue
		}
		if s.parentID != caseSpan[0].spanID {
			t.Errorf("call span %s is not under the case run's span", s.attrs["pyrula.call.id"])
		}
		provenance[s.attrs["pyrula.call.provenance"]]++
		if usd := s.attrs["pyrula.cost_usd"]; usd != "" {
			var v float64
			fmt.Sscan(usd, &v)
			if want := 1050 * paidPrice / 1e6; math.Abs(v-want) > 1e-12 {
				t.Errorf("model call %s costs $%s, want $%g", s.attrs["pyrula.call.id"], usd, want)
			}
			paid++
		}
	}
	if paid < 2 || provenance[""] > 0 {
		t.Errorf("the case run's call spans: %d with a cost, provenances %v (every call must have one)", paid, provenance)
	}

	// The save_case came without a traceparent: a trace of its own.
	all, exports := col.all()
	var save []otlpSpan
	for _, s := range all {
		if s.name == "message save_case" {
			save = append(save, s)
		}
	}
	if len(save) != 1 || save[0].parentID != "" || save[0].traceID == traceA || save[0].traceID == traceB {
		t.Errorf("the save_case's message span: %+v", save)
	}
	t.Logf("%d spans in %d exports; the case run's calls by provenance: %v", len(all), exports, provenance)
}

// TestTraceContextWithoutTracing: with traces off (OTEL_TRACES_EXPORTER=none,
// though an endpoint is set) the worker exports nothing, and a run still
// keeps the trace context its message came with in its run:submitted event.
func TestTraceContextWithoutTracing(t *testing.T) {
	vurl := testenv.ValkeyURL(t)
	col := newCollector(t)
	ns := testenv.UniqueName(t, "wnotrace")
	client := testenv.ValkeyClientAt(t, vurl, ns)
	w := startReadyOf(t, workerBin, workerEnv(vurl, ns, "untraced",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+col.URL, "OTEL_TRACES_EXPORTER=none", "OTEL_BSP_SCHEDULE_DELAY=50")...)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sendTraced(t, client, ns+":case-messages", checkoutRun("s", 0), tp)
	got, _ := readReplies(t, client, ns+":case-replies", "0", 1, 30*time.Second)
	runID := runResultID(got[0])
	if runID == "" {
		t.Fatalf("start_run: %+v", got[0])
	}
	if got := submittedTraceparent(t, client, ns, runID); got != tp {
		t.Errorf("run:submitted carries traceparent %q, want the message's %q", got, tp)
	}
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-w.done
	if spans, exports := col.all(); exports != 0 {
		t.Errorf("traces off, yet the collector got %d exports (%d spans)", exports, len(spans))
	}
}
