package capture_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/capture"
	"github.com/pyrula/caseworker/journal/memjournal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
)

func fp(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

type call struct {
	kind, key, input, result string
}

// record writes a run into a memory journal: run:start, then for each call
// call:start, call:done and its result; finish says whether it ends with
// run:complete. inFlight adds a last call:start without its done.
func record(t *testing.T, target string, calls []call, inFlight *call, finish bool) *journal.Run {
	t.Helper()
	ctx := context.Background()
	clock := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	j, err := memjournal.New(memjournal.Options{Now: func() time.Time { clock = clock.Add(time.Millisecond); return clock }})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := j.Create(ctx, journal.CreateParams{RunID: "run_1", TargetName: target, CodeVersion: "v1", Inputs: json.RawMessage(`{"sku":"SKU-42"}`), Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ev, appendBatch := eventMaker(t), appender(t, j, lease)
	appendBatch(journal.Batch{Events: []journal.Event{ev(runevent.RunStart, map[string]any{"inputs": map[string]string{"sku": "SKU-42"}, "code_version": "v2"})}})
	callField := func(c call) map[string]string {
		return map[string]string{"kind": c.kind, "key": c.key, "fingerprint": fp(c.input), "effect": "read"}
	}
	for _, c := range calls {
		appendBatch(journal.Batch{Events: []journal.Event{ev(runevent.CallStart, map[string]any{"call": callField(c), "input": json.RawMessage(c.input)})}})
		appendBatch(journal.Batch{
			Events:  []journal.Event{ev(runevent.CallDone, map[string]any{"call": callField(c)})},
			Results: []bundle.Result{{Kind: c.kind, Key: c.key, Fingerprint: fp(c.input), Result: json.RawMessage(c.result)}},
		})
	}
	if inFlight != nil {
		appendBatch(journal.Batch{Events: []journal.Event{ev(runevent.CallStart, map[string]any{"call": callField(*inFlight), "input": json.RawMessage(inFlight.input)})}})
	}
	if finish {
		if _, err := j.Finish(ctx, lease, journal.Batch{Events: []journal.Event{ev(runevent.RunComplete, map[string]any{"result": "ok"})}}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := j.Run(ctx, "run_1")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// build is the bundle capture.Encode makes of run r at p, decoded.
func build(r *journal.Run, p capture.Params) (*bundle.Bundle, error) {
	c, err := capture.Encode(r, p)
	if err != nil {
		return nil, err
	}
	return c.Decode()
}

// eventMaker returns a maker of events of a kind with fields that fails t
// on an error.
func eventMaker(t *testing.T) func(kind journal.Kind, fields any) journal.Event {
	return func(kind journal.Kind, fields any) journal.Event {
		e, err := journal.NewEvent(kind, fields)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
}

// appender returns an appender of batches to j under lease that fails t on
// an error.
func appender(t *testing.T, j journal.Journal, lease journal.Lease) func(journal.Batch) {
	return func(b journal.Batch) {
		if _, err := j.Append(context.Background(), lease, b); err != nil {
			t.Fatal(err)
		}
	}
}

var workflowCalls = []call{
	{"step", "quote:0", `{"sku":"SKU-42"}`, `{"price":19.99}`},
	{"step", "reserve:0", `{"sku":"SKU-42","qty":1}`, `{"reservation":"r-1"}`},
	{"sleep", "0", `{"seconds":1}`, `null`},
}

func seq(n int64) *int64 { return &n }

func TestCaptureAtForks(t *testing.T) {
	// Events: 1 run:submitted, 2 run:start, 3/4 quote, 5/6 reserve, 7/8 sleep, 9 run:complete.
	r := record(t, "checkout", workflowCalls, nil, true)
	reg := bundle.Registration{Steps: []bundle.Step{{ID: "quote", Name: "quote", Effect: "read"}}}
	for _, tc := range []struct {
		name    string
		fork    *int64
		history int
		results int
	}{
		{"no fork", nil, 0, 0},
		{"fork 0", seq(0), 0, 3},
		{"after quote", seq(4), 4, 3},
		{"at the last event", seq(9), 8, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := build(r, capture.Params{ForkAfterSeq: tc.fork, Registration: reg, PyrulaVersion: "0.1.0"})
			if err != nil {
				t.Fatal(err)
			}
			m := b.Manifest
			if m.Kind != bundle.KindWorkflow || m.TargetName != "checkout" || m.CodeVersion != "v2" ||
				m.PyrulaVersion != "0.1.0" || string(m.Inputs) != `{"sku":"SKU-42"}` || string(m.RecordedConfig) != "{}" ||
				m.Source != (bundle.Source{RunID: "run_1", Namespace: "pyrula", Origin: "valkey"}) ||
				!m.Capture.Complete || len(m.Registration.Steps) != 1 {
				t.Fatalf("manifest = %+v", m)
			}
			if len(b.History) != tc.history || len(b.Results) != tc.results {
				t.Fatalf("history %d results %d, want %d %d", len(b.History), len(b.Results), tc.history, tc.results)
			}
			for i, h := range b.History {
				var e struct {
					RunSeq int64        `json:"run_seq"`
					Kind   journal.Kind `json:"kind"`
				}
				json.Unmarshal(h, &e)
				if e.RunSeq != int64(i+1) || journal.IsTerminal(e.Kind) {
					t.Fatalf("history[%d] = %s", i, h)
				}
			}
			c, err := capture.Encode(r, capture.Params{ForkAfterSeq: tc.fork, Registration: reg, PyrulaVersion: "0.1.0"})
			again, err2 := capture.Encode(r, capture.Params{ForkAfterSeq: tc.fork, Registration: reg, PyrulaVersion: "0.1.0"})
			if err != nil || err2 != nil || again.Hash() != c.Hash() {
				t.Fatalf("the same run at the same fork gave another hash (%v, %v)", err, err2)
			}
		})
	}
}

func TestCaptureRefusals(t *testing.T) {
	done := record(t, "checkout", workflowCalls, nil, true)
	if _, err := build(done, capture.Params{ForkAfterSeq: seq(10)}); err == nil || messages.AsError(err) != nil {
		t.Fatalf("fork past the last event: %v", err)
	}
	// A fork inside a call (after its call:start, before its call:done).
	_, err := build(done, capture.Params{ForkAfterSeq: seq(5)})
	if code, _ := messages.CodeOf(err); code != messages.CaptureIncomplete || !strings.Contains(err.Error(), "step:reserve:0 was in flight") {
		t.Fatalf("fork inside a call: %v", err)
	}
	// A running run with a call in flight: forking at the end is incomplete,
	// before the call it is fine but capture.complete is false.
	running := record(t, "checkout", workflowCalls[:1], &workflowCalls[1], false)
	_, err = build(running, capture.Params{ForkAfterSeq: seq(running.Meta.LastSeq)})
	if code, _ := messages.CodeOf(err); code != messages.CaptureIncomplete {
		t.Fatalf("in flight at the end: %v", err)
	}
	b, err := build(running, capture.Params{ForkAfterSeq: seq(4)})
	if err != nil || b.Manifest.Capture.Complete || len(b.Manifest.Capture.Missing) != 1 {
		t.Fatalf("running run: %+v, %v", b, err)
	}
}

func TestKind(t *testing.T) {
	agentCalls := []call{
		{"model", "0", `{"model":"local-echo-1","messages":[]}`, `{"role":"assistant","content":[]}`},
		{"tool", "toolu_01", `{"order":"A-1"}`, `{"status":"shipped"}`},
	}
	r := record(t, "support_agent", agentCalls, nil, true)
	b, err := build(r, capture.Params{ForkAfterSeq: seq(2)})
	if err != nil {
		t.Fatal(err)
	}
	if b.Manifest.Kind != bundle.KindAgent || string(b.Manifest.RecordedConfig) != `{"model":"local-echo-1"}` {
		t.Fatalf("agent manifest: kind %s config %s", b.Manifest.Kind, b.Manifest.RecordedConfig)
	}
	_, err = build(r, capture.Params{ForkAfterSeq: seq(2), Kind: bundle.KindWorkflow})
	if code, _ := messages.CodeOf(err); code != messages.KindMismatch {
		t.Fatalf("--kind workflow on an agent run: %v", err)
	}
	wf := record(t, "checkout", workflowCalls, nil, true)
	if b, err := build(wf, capture.Params{Kind: bundle.KindWorkflow}); err != nil || b.Manifest.Kind != bundle.KindWorkflow {
		t.Fatalf("--kind workflow on a workflow: %v", err)
	}
	if b, err := build(r, capture.Params{ForkAfterSeq: seq(2), Kind: bundle.KindAgent}); err != nil || b.Manifest.Kind != bundle.KindAgent {
		t.Fatalf("--kind agent on an agent run: %v", err)
	}
	// --kind agent on a run without model or tool calls, as --kind workflow
	// the other way; at any fork, and with inputs only.
	for _, fork := range []*int64{nil, seq(0), seq(4), seq(wf.Meta.LastSeq)} {
		_, err = build(wf, capture.Params{ForkAfterSeq: fork, Kind: bundle.KindAgent})
		if code, _ := messages.CodeOf(err); code != messages.KindMismatch ||
			!strings.Contains(err.Error(), "run run_1 made no model or tool calls, so it is a workflow run, not an agent") {
			t.Fatalf("--kind agent on a workflow run (fork %v): %v", fork, err)
		}
	}
}

// startedRun is run runID of a memory journal, created with the fields of
// its run:submitted event and started (run:start): two events.
func startedRun(t *testing.T, runID string, fields map[string]json.RawMessage) *journal.Run {
	t.Helper()
	ctx := context.Background()
	j, err := memjournal.New(memjournal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := j.Create(ctx, journal.CreateParams{RunID: runID, TargetName: "checkout", CodeVersion: "v1", Owner: "test", Fields: fields})
	if err != nil {
		t.Fatal(err)
	}
	start, _ := journal.NewEvent(runevent.RunStart, map[string]any{"inputs": map[string]any{}, "code_version": "v1"})
	if _, err := j.Append(ctx, lease, journal.Batch{Events: []journal.Event{start}}); err != nil {
		t.Fatal(err)
	}
	r, err := j.Run(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// capturedBundle is the encoded bundle of run r forked after its
// run:start (run_seq 2).
func capturedBundle(t *testing.T, r *journal.Run) string {
	t.Helper()
	c, err := capture.Encode(r, capture.Params{ForkAfterSeq: seq(2)})
	if err != nil {
		t.Fatal(err)
	}
	return string(c.Bytes())
}

// TestPricesNotCaptured: the prices of a worker's case run (options.prices
// of the run_case body its run:submitted event holds) are not copied into
// the history of a capture; the rest of the request is.
func TestPricesNotCaptured(t *testing.T) {
	request := `{"target_name":"checkout","source":{"bundle":{"fixture_hash":"` + fp("x") + `"}},` +
		`"options":{"max_cost_usd":5,"prices":{"price-only-model-x":{"input_per_mtok":4321.5,"output_per_mtok":8765.25}},"replay_only":false}}`
	r := startedRun(t, "case_1", map[string]json.RawMessage{"message_type": json.RawMessage(`"run_case"`), "request": json.RawMessage(request)})
	got := capturedBundle(t, r)
	for _, leak := range []string{"prices", "price-only-model-x", "4321.5", "8765.25"} {
		if strings.Contains(got, leak) {
			t.Errorf("the bundle holds %q: %s", leak, got)
		}
	}
	for _, kept := range []string{`"message_type":"run_case"`, `"options":{"max_cost_usd":5,"replay_only":false}`, `"fixture_hash":"` + fp("x")} {
		if !strings.Contains(got, kept) {
			t.Errorf("the bundle lost %s: %s", kept, got)
		}
	}
	// The journal's event is unchanged.
	if raw := string(r.Events[0].Extra["request"]); !strings.Contains(raw, "price-only-model-x") {
		t.Errorf("the run's request changed: %s", raw)
	}
	// A request without prices is kept byte for byte.
	r.Events[0].Extra["request"] = json.RawMessage(`{"options":{"replay_only":true},"target_name":"checkout"}`)
	b, err := build(r, capture.Params{ForkAfterSeq: seq(2)})
	if err != nil || !strings.Contains(string(b.History[0]), `"request":{"options":{"replay_only":true},"target_name":"checkout"}`) {
		t.Fatalf("request without prices: %s, %v", b.History[0], err)
	}
}

// TestTraceContextNotCaptured: a run submitted under a trace (its
// run:submitted event carries traceparent and tracestate) saves to the
// same bundle, byte for byte, as the same run without them.
func TestTraceContextNotCaptured(t *testing.T) {
	r := startedRun(t, "run_1", map[string]json.RawMessage{"message_id": json.RawMessage(`"m1"`), "message_type": json.RawMessage(`"start_run"`)})
	plain := capturedBundle(t, r)
	r.Events[0].Extra["traceparent"] = json.RawMessage(`"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"`)
	r.Events[0].Extra["tracestate"] = json.RawMessage(`"vendor=abc"`)
	traced := capturedBundle(t, r)
	if traced != plain {
		t.Errorf("the trace context changed the bundle:\n%s\nvs\n%s", traced, plain)
	}
	if strings.Contains(traced, "4bf92f3577b34da6a3ce929d0e0e4736") || !strings.Contains(traced, `"message_id":"m1"`) {
		t.Errorf("the bundle: %s", traced)
	}
	// The journal's event is unchanged.
	if _, ok := r.Events[0].Extra["traceparent"]; !ok {
		t.Errorf("the run's run:submitted lost its traceparent: %v", r.Events[0].Extra)
	}
}

// The results of calls after the fork keep the call's input and the
// run_seq of its call:start; the results of prefix calls keep neither (the
// history holds them), and the encoded bundle keeps both through a read.
func TestResultsKeepPostForkInputs(t *testing.T) {
	// Events: 1 run:submitted, 2 run:start, 3/4 quote, 5/6 reserve, 7/8 sleep, 9 run:complete.
	r := record(t, "checkout", workflowCalls, nil, true)
	got, err := build(r, capture.Params{ForkAfterSeq: seq(4), PyrulaVersion: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		input string
		start int64
	}{}
	for i, wc := range workflowCalls {
		id := journal.ResultID(wc.kind, wc.key)
		if i == 0 {
			want[id] = struct {
				input string
				start int64
			}{} // quote: in the prefix
			continue
		}
		want[id] = struct {
			input string
			start int64
		}{wc.input, int64(3 + 2*i)}
	}
	for _, res := range got.Results {
		w, ok := want[journal.ResultID(res.Kind, res.Key)]
		if !ok {
			t.Fatalf("unexpected result %s:%s", res.Kind, res.Key)
		}
		if !sameJSON(res.Input, w.input) || res.StartSeq != w.start {
			t.Errorf("%s:%s: input %s start_seq %d, want %q %d", res.Kind, res.Key, res.Input, res.StartSeq, w.input, w.start)
		}
	}
}

// sameJSON says that raw holds the JSON value want (both absent counts).
func sameJSON(raw json.RawMessage, want string) bool {
	if raw == nil || want == "" {
		return raw == nil && want == ""
	}
	var a, b any
	return json.Unmarshal(raw, &a) == nil && json.Unmarshal([]byte(want), &b) == nil && reflect.DeepEqual(a, b)
}
