package flow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
)

// ladder is a small stand-in for the case-run engine: supplied answers by
// call id, writes refused without a token, everything else live. It
// observes what was journaled.
type ladder struct {
	answers map[string]host.Resolution
	allow   map[string]bool

	mu  sync.Mutex
	obs []string
}

func (l *ladder) Resolve(_ context.Context, c host.Call) (host.Resolution, error) {
	if r, ok := l.answers[c.ID()]; ok {
		return r, nil
	}
	if c.Effect == flow.Write && !l.allow[c.Token] {
		return host.StopWith(&host.StopError{Code: messages.WriteNotAllowed,
			Message: c.ID() + " is a write", StopToken: c.Token}), nil
	}
	r := host.Live()
	r.Provenance = "live"
	return r, nil
}

func (l *ladder) Observe(_ context.Context, o host.Observation) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rec := string(o.Record.Result)
	if o.Record.Error != nil {
		rec = "error " + string(o.Record.Error)
	}
	l.obs = append(l.obs, o.Call.ID()+" "+o.Resolution.Provenance+" "+rec)
}

func TestResolverLadder(t *testing.T) {
	t.Parallel()
	l := &ladder{
		answers: map[string]host.Resolution{
			"step:quote:0": host.Answer(json.RawMessage(`{"price": 5}`), "simulated"),
			"step:check:0": host.AnswerError(flow.Errorf("Fraud", "blocked"), "reused"),
		},
		allow: map[string]bool{},
	}
	e := setup(t)
	var ran atomic.Int64
	mustRegister(t, flow.RegisterWorkflow(e.reg, flow.Workflow[none, string]{
		CodeVersion: "test/v1",
		Name:        "shop", Steps: []flow.Decl{flow.DeclareStep("quote", flow.Read), flow.DeclareStep("reserve", flow.Write)},
		Run: func(ctx context.Context, _ none) (string, error) {
			q, err := flow.Step(ctx, "quote", "SKU", func(context.Context, string) (map[string]int, error) {
				ran.Add(1)
				return map[string]int{"price": 1}, nil
			})
			if err != nil || q["price"] != 5 {
				t.Errorf("quote %v %v", q, err)
			}
			_, err = flow.Step(ctx, "check", 0, func(context.Context, int) (int, error) { ran.Add(1); return 0, nil }, flow.WithEffect(flow.Read))
			var ce *flow.CallError
			if !errors.As(err, &ce) || ce.Type != "Fraud" {
				t.Errorf("check: %v", err)
			}
			if _, err := flow.Now(ctx); err != nil {
				t.Errorf("now: %v", err)
			}
			_, err = flow.Step(ctx, "reserve", 2, func(context.Context, int) (int, error) { ran.Add(1); return 0, nil })
			var stop *host.StopError
			if !errors.As(err, &stop) || stop.Code != messages.WriteNotAllowed {
				t.Errorf("reserve: %v", err)
			}
			// The target ignores the stop: later calls get it too, unrecorded.
			if _, err := flow.Random(ctx); !errors.Is(err, stop) {
				t.Errorf("a call after the stop: %v", err)
			}
			return "ignored the stop", nil
		},
	}))
	out, err := e.rt.Run(context.Background(), host.RunParams{RunID: "r", Target: "shop", Resolver: l})
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != host.StatusError || out.Code != messages.WriteNotAllowed || out.StopKey != "step:reserve:0" || out.StopToken != "step:reserve" {
		t.Fatalf("%+v", out)
	}
	if ran.Load() != 0 {
		t.Errorf("%d step functions ran; answered and refused calls must not run", ran.Load())
	}
	checkTrace(t, e, "r", []string{"run:start", "call:start step:quote:0", "call:done step:quote:0",
		"call:start step:check:0", "call:done step:check:0", "call:start now:0", "call:done now:0",
		"run:error write_not_allowed"})
	var provenance []string
	for _, ev := range e.log.Events("r") {
		if ev.Kind == runevent.CallDone {
			provenance = append(provenance, ev.Provenance)
		}
	}
	if !slices.Equal(provenance, []string{"simulated", "reused", "live"}) {
		t.Errorf("provenance %v", provenance)
	}
	wantObs := []string{
		`step:quote:0 simulated {"price":5}`,
		`step:check:0 reused error {"message":"blocked","type":"Fraud"}`,
		`now:0 live "2026-11-30T10:00:00Z"`,
	}
	if !slices.Equal(l.obs, wantObs) {
		t.Errorf("observed %q\nwant %q", l.obs, wantObs)
	}
	raw := e.log.EventsJSON("r")
	if last := string(raw[len(raw)-1]); !strings.Contains(last, `"stop_key":"step:reserve:0","stop_token":"step:reserve"`) {
		t.Errorf("terminal %s", last)
	}
}

func TestResolverWrongShapedAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, id string
		answer   string
		body     func(ctx context.Context) error
	}{
		{"signal without payload", "signal:go:0", `{"value":1}`, func(ctx context.Context) error {
			_, _, err := flow.ReceiveSignal[int](ctx, "go", 0)
			return err
		}},
		{"interrupt without action", "interrupt:ask:0", `{"value":1}`, func(ctx context.Context) error {
			_, err := flow.Interrupt(ctx, "ask", nil)
			return err
		}},
		{"step of another type", "step:n:0", `"seven"`, func(ctx context.Context) error {
			_, err := flow.Step(ctx, "n", 0, func(context.Context, int) (int, error) { return 7, nil })
			return err
		}},
		{"model of another shape", "model:0", `{"role":"user","content":"x"}`, func(ctx context.Context) error {
			_, err := flow.Model(ctx, flow.ModelRequest{})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, withResolver(host.ResolverFunc(func(_ context.Context, c host.Call) (host.Resolution, error) {
				return host.Answer(json.RawMessage(tt.answer), "simulated"), nil
			})))
			mustRegister(t, flow.RegisterWorkflow(e.reg, flow.Workflow[none, int]{
				CodeVersion: "test/v1",
				Name:        "w", Run: func(ctx context.Context, _ none) (int, error) { return 0, tt.body(ctx) },
			}))
			out := e.run(t, "r", "w")
			if out.Code != messages.MissingContext || out.StopKey != tt.id || !strings.Contains(out.Message, "wrong shape") {
				t.Errorf("%+v", out)
			}
			checkTrace(t, e, "r", []string{"run:start", "run:error missing_context"})
		})
	}
}

func TestModelOverridesAndAnswers(t *testing.T) {
	t.Parallel()
	var inputs []json.RawMessage
	var mu sync.Mutex
	e := setup(t, withResolver(host.ResolverFunc(func(_ context.Context, c host.Call) (host.Resolution, error) {
		mu.Lock()
		inputs = append(inputs, c.Input)
		mu.Unlock()
		return host.Answer(json.RawMessage(`"plain text answer"`), "simulated"), nil
	})))
	mustRegister(t, flow.RegisterAgent(e.reg, flow.Agent[none, string]{
		CodeVersion: "test/v1",
		Name:        "ag", Model: "m-default", System: "sys-default",
		Run: func(ctx context.Context, _ none) (string, error) {
			r, err := flow.Model(ctx, flow.ModelRequest{Messages: []flow.Message{flow.UserText("hi")}})
			return r.Text(), err
		},
	}))
	out, err := e.rt.Run(context.Background(), host.RunParams{RunID: "r", Target: "ag", Model: "m-new", System: "sys-new"})
	if err != nil || string(out.Result) != `"plain text answer"` {
		t.Fatalf("%+v %v", out, err)
	}
	want := `{"messages":[{"content":"hi","role":"user"}],"model":"m-new","system":"sys-new","tools":[]}`
	if len(inputs) != 1 || string(inputs[0]) != want {
		t.Errorf("model input %s, want %s", inputs, want)
	}
	if got := result(t, e.log, "r", "model:0"); string(got) != `"plain text answer"` {
		t.Errorf("recorded %s", got)
	}

	// Live, with no model client anywhere: the run stops.
	e2 := setup(t)
	mustRegister(t, flow.RegisterAgent(e2.reg, flow.Agent[none, string]{
		CodeVersion: "test/v1",
		Name:        "ag", Model: "m",
		Run: func(ctx context.Context, _ none) (string, error) {
			_, err := flow.Model(ctx, flow.ModelRequest{})
			return "", err
		},
	}))
	if out := e2.run(t, "r", "ag"); out.Code != messages.RuntimeError || out.StopKey != "model:0" || !strings.Contains(out.Message, "no model client") {
		t.Errorf("%+v", out)
	}
}

// batchLog is a MemLog that notes each append's event kinds and whether
// it was deferrable.
type batchLog struct {
	*host.MemLog
	mu      sync.Mutex
	batches []string
}

func (l *batchLog) Append(ctx context.Context, runID string, b host.Batch) (int64, error) {
	var kinds []string
	for _, ev := range b.Events {
		kinds = append(kinds, string(ev.Kind))
	}
	l.mu.Lock()
	l.batches = append(l.batches, strings.Join(kinds, " ")+map[bool]string{true: " (deferrable)"}[b.Deferrable])
	l.mu.Unlock()
	return l.MemLog.Append(ctx, runID, b)
}

// annotator answers step:quote:* and runs the rest live; it annotates
// every call with a case:call event, the first one urgent, and observes
// that the event is journaled by the time it is told of the call.
type annotator struct {
	log      *batchLog
	n        int
	observed []string
}

func (a *annotator) Resolve(_ context.Context, c host.Call) (host.Resolution, error) {
	if strings.HasPrefix(c.ID(), "step:quote:") {
		return host.Answer(json.RawMessage(`1`), "simulated"), nil
	}
	return host.Live(), nil
}

func (a *annotator) Annotate(_ context.Context, o host.Observation) (host.Event, bool, bool) {
	a.n++
	ref := o.Call.CallRef
	return host.Event{Kind: runevent.CaseCall, At: o.At, Call: &ref, Provenance: "annotated", CallSeq: int64(o.Call.Seq)}, a.n == 1, true
}

func (a *annotator) Observe(_ context.Context, o host.Observation) {
	evs := a.log.Events(o.Call.RunID)
	last := evs[len(evs)-1]
	a.observed = append(a.observed, o.Call.ID()+" after "+string(last.Kind)+" of "+last.Call.ID())
}

// An Annotator's event goes in the call's call:done append, after
// call:done; urgent makes an answered call's batch be written at once; the
// Observer is told once the event is journaled.
func TestAnnotatorEventInTheCallsAppend(t *testing.T) {
	t.Parallel()
	var log *batchLog
	a := &annotator{}
	e := setup(t, withResolver(a), func(e *env, c *host.Config) {
		log = &batchLog{MemLog: e.log}
		a.log = log
		c.Log = log
	})
	mustRegister(t, flow.RegisterWorkflow(e.reg, flow.Workflow[none, int]{
		CodeVersion: "test/v1", Name: "annotated",
		Steps: []flow.Decl{flow.DeclareStep("quote", flow.Read), flow.DeclareStep("fetch", flow.Read)},
		Run: func(ctx context.Context, _ none) (int, error) {
			sum := 0
			for i := range 2 {
				q, err := flow.Step(ctx, "quote", i, func(context.Context, int) (int, error) { return 0, nil })
				if err != nil {
					return 0, err
				}
				f, err := flow.Step(ctx, "fetch", i, func(_ context.Context, i int) (int, error) { return 10 * i, nil })
				if err != nil {
					return 0, err
				}
				sum += q + f
			}
			return sum, nil
		},
	}))
	out, err := e.rt.Run(context.Background(), host.RunParams{RunID: "r", Target: "annotated"})
	if err != nil || out.Status != host.StatusComplete {
		t.Fatalf("Run: %+v %v", out, err)
	}
	want := []string{
		"run:start (deferrable)",
		"call:start call:done case:call",              // quote:0 answered, urgent
		"call:start",                                  // fetch:0 live
		"call:done case:call",                         //
		"call:start call:done case:call (deferrable)", // quote:1 answered
		"call:start",
		"call:done case:call",
	}
	if !slices.Equal(log.batches, want) {
		t.Errorf("appends:\n%q\nwant\n%q", log.batches, want)
	}
	wantObs := []string{
		"step:quote:0 after case:call of step:quote:0", "step:fetch:0 after case:call of step:fetch:0",
		"step:quote:1 after case:call of step:quote:1", "step:fetch:1 after case:call of step:fetch:1",
	}
	if !slices.Equal(a.observed, wantObs) {
		t.Errorf("observed:\n%q\nwant\n%q", a.observed, wantObs)
	}
}

// recordingResolver is a resolver that holds recorded inputs (a stand-in
// for the case-run engine's host.RecordedInputs): by call id, the input and
// the fingerprint it vouches for. It answers every call live and notes what
// it was asked.
type recordingResolver struct {
	inputs map[string]json.RawMessage
	fp     string

	next []string // NextKey's answers, by position

	mu    sync.Mutex
	asked []string
	seen  map[string]string // call id → the fingerprint Resolve got
	keys  map[string]*byte  // call id → where the key Resolve got keeps its bytes
}

func (r *recordingResolver) RecordedInput(seq int, kind host.CallKind, key, name string) (json.RawMessage, string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := string(kind) + ":" + key
	r.asked = append(r.asked, fmt.Sprintf("%d %s %s", seq, id, name))
	in, ok := r.inputs[id]
	return in, r.fp, ok
}

// NextKey expects the keys of next, by position, as recorded.
func (r *recordingResolver) NextKey(seq int, kind host.CallKind) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if seq < len(r.next) && kind == host.KindStep {
		return r.next[seq]
	}
	return ""
}

func (r *recordingResolver) Resolve(_ context.Context, c host.Call) (host.Resolution, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen[c.ID()] = c.Fingerprint
	if r.keys != nil {
		r.keys[c.ID()] = unsafe.StringData(c.Key)
	}
	return host.Live(), nil
}

// A call whose key is the one the resolver expects next (NextKey) keeps the
// resolver's string; a call with another key keeps its own, whatever the
// resolver expected.
func TestNextKeyKeepsTheRecordedString(t *testing.T) {
	t.Parallel()
	// Built at run time, so that no key of the run can share their bytes.
	expected := []string{strings.Repeat("fetch:", 1) + "0", "fetch:" + strconv.Itoa(7), "other:2"}
	r := &recordingResolver{next: expected, seen: map[string]string{}, keys: map[string]*byte{}}
	e := setup(t)
	mustRegister(t, flow.RegisterWorkflow(e.reg, flow.Workflow[none, int]{
		CodeVersion: "test/v1", Name: "fetcher", Steps: []flow.Decl{flow.DeclareStep("fetch", flow.Read)},
		Run: func(ctx context.Context, _ none) (int, error) {
			for i := range 3 {
				if _, err := flow.Step(ctx, "fetch", i, func(_ context.Context, i int) (int, error) { return i, nil }); err != nil {
					return 0, err
				}
			}
			return 0, nil
		},
	}))
	out, err := e.rt.Run(context.Background(), host.RunParams{RunID: "r", Target: "fetcher", Resolver: r})
	if err != nil || out.Status != host.StatusComplete {
		t.Fatalf("%+v %v", out, err)
	}
	if got := r.keys["step:fetch:0"]; got != unsafe.StringData(expected[0]) {
		t.Errorf("step:fetch:0, the key expected: Resolve got its own string, not the resolver's")
	}
	for _, id := range []string{"step:fetch:1", "step:fetch:2"} {
		if _, ok := r.seen[id]; !ok {
			t.Errorf("%s was not resolved under its own key (resolved: %v)", id, r.seen)
		}
		for _, k := range expected {
			if r.keys[id] == unsafe.StringData(k) {
				t.Errorf("%s got the resolver's key %q", id, k)
			}
		}
	}
}

// A resolver that holds a call's recorded input gives the call its recorded
// fingerprint when the call's canonical input is that input byte for byte
// (nothing is hashed), and only then: a different input, or a call it does
// not hold, is fingerprinted from its input.
func TestRecordedInputsFingerprint(t *testing.T) {
	t.Parallel()
	vouched := strings.Repeat("ab", 32)
	r := &recordingResolver{
		inputs: map[string]json.RawMessage{
			"step:fetch:0": json.RawMessage(`{"id":1,"q":"a"}`),
			"step:fetch:1": json.RawMessage(`{"id":2,"q":"was"}`),
		},
		fp:   vouched,
		seen: map[string]string{},
	}
	e := setup(t)
	type in struct {
		Q  string `json:"q"`
		ID int    `json:"id"`
	}
	mustRegister(t, flow.RegisterWorkflow(e.reg, flow.Workflow[none, int]{
		CodeVersion: "test/v1", Name: "fetcher", Steps: []flow.Decl{flow.DeclareStep("fetch", flow.Read)},
		Run: func(ctx context.Context, _ none) (int, error) {
			sum := 0
			for _, x := range []in{{"a", 1}, {"now", 2}, {"c", 3}} {
				n, err := flow.Step(ctx, "fetch", x, func(_ context.Context, x in) (int, error) { return x.ID, nil })
				if err != nil {
					return 0, err
				}
				sum += n
			}
			return sum, nil
		},
	}))
	out, err := e.rt.Run(context.Background(), host.RunParams{RunID: "r", Target: "fetcher", Resolver: r})
	if err != nil || out.Status != host.StatusComplete || string(out.Result) != "6" {
		t.Fatalf("%+v %v", out, err)
	}
	hash := func(v any) string {
		_, fp, err := host.Fingerprint(v)
		if err != nil {
			t.Fatal(err)
		}
		return fp
	}
	want := map[string]string{
		"step:fetch:0": vouched,            // the recorded input, byte for byte
		"step:fetch:1": hash(in{"now", 2}), // recorded with another input
		"step:fetch:2": hash(in{"c", 3}),   // not recorded
	}
	journaled := map[string]string{}
	for _, ev := range e.log.Events("r") {
		if ev.Kind == runevent.CallStart {
			journaled[ev.Call.ID()] = ev.Call.Fingerprint
			if ev.Call.ID() == "step:fetch:0" && string(ev.Input) != `{"id":1,"q":"a"}` {
				t.Errorf("call:start of step:fetch:0 journals input %s", ev.Input)
			}
		}
	}
	for id, fp := range want {
		if r.seen[id] != fp || journaled[id] != fp {
			t.Errorf("%s: Resolve got fingerprint %s, call:start journals %s; want %s", id, r.seen[id], journaled[id], fp)
		}
	}
	wantAsked := []string{"0 step:fetch:0 fetch", "1 step:fetch:1 fetch", "2 step:fetch:2 fetch"}
	if !slices.Equal(r.asked, wantAsked) {
		t.Errorf("RecordedInput asked %q, want %q", r.asked, wantAsked)
	}
}
