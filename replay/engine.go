package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/bundle/volatile"
	"github.com/pyrula/caseworker/explain"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/internal/callkeys"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
)

// DefaultLiveBudget is the live budget (--live-budget) when none is given:
// at most this many non-pure calls of a case run run live.
const DefaultLiveBudget = 20

// Options are the case-run flags.
type Options struct {
	// FromStart reruns the whole recorded run through the ladder instead of
	// verifying the prefix (--from-start).
	FromStart bool
	// Inputs override the bundle's inputs by name (--input KEY=JSON).
	Inputs map[string]json.RawMessage
	// Model and System replace the model id and system prompt of the run's
	// model calls (--model, --prompt-file). An empty Model runs an agent's
	// model calls on the model the case recorded (recorded_config.model)
	// when it is not the agent's own (see engine.runModel).
	Model, System string
	// Supply holds supplied answers (--supply); ignored with ReplayOnly.
	Supply Supply
	// LiveBudget caps the calls that run live (--live-budget); nil means
	// DefaultLiveBudget. Pure calls never count.
	LiveBudget *int
	// MaxCostUSD, when set, caps the spend of live model calls
	// (--max-cost-usd).
	MaxCostUSD *float64
	// Prices are added to (or replace entries of) DefaultPrices (--prices).
	Prices Prices
	// AllowWrite are the --allow-write tokens: tool:<name>, step:<name>,
	// step:<id>.
	AllowWrite []string
	// ReplayOnly removes the live rung (--replay-only).
	ReplayOnly bool
	// Values puts call values and the result on the lines (--values).
	Values bool
	// Shared, when set, is a budget shared with other case runs (a
	// suite's): every live call reserves against it too.
	Shared SharedBudget
}

// Params name a case run.
type Params struct {
	// Bundle is the decoded case; required.
	Bundle *bundle.Bundle
	// Canonical says that Bundle was decoded from a bundle.Canonical
	// (bundle.Read, a verified store read, bundle.Encode): its raw values
	// are canonical JSON, so recorded results are handed to the target
	// without being canonicalised again. Leave it false for a Bundle built
	// any other way.
	Canonical bool
	// FixtureHash is the case's hash, reported on the outcome line.
	FixtureHash string
	// Target is the registered target to run; default the manifest's
	// target_name.
	Target string
	// RunID is the new run's id; required.
	RunID string
	// Registry holds the targets; required.
	Registry *flow.Registry
	// Log is the new run's journal; required.
	Log host.Log
	// Recorded, when set, is the whole of the new run's journal as the
	// caller read it while holding the run's lease (a worker's run whose
	// only event is its run:submitted): the engine starts from it instead
	// of loading the journal from Log again. Nil: the engine loads it.
	Recorded *host.Recorded
	// Models is the model client for live model calls; default the agent's
	// own client.
	Models flow.ModelClient
	// Deps is the dependency set of the run's live calls (flow.Dep; the
	// CLI's --deps-ref); nil for none.
	Deps flow.Deps
	// LLMRef names Models for the outcome (its llm_ref); empty when no
	// client was named. A replay-only run, which sends no model call, may
	// name a client it did not open (Models nil).
	LLMRef string
	// Clock is the base clock (default the system clock); the run gets a
	// clock on top of it that jumps over waits instead of waiting.
	Clock host.Clock
	// Options are the flags.
	Options
}

// The axes of Outcome.ChangedAxes: what a case run changed from the
// recording.
const (
	AxisCodeVersion     = "code_version"
	AxisModel           = "model"
	AxisPrompt          = "prompt"
	AxisInputs          = "inputs"
	AxisSuppliedAnswers = "supplied_answers"
)

// callKey is a call's identity kind:key as a map key, without building the
// string.
type callKey struct {
	kind host.CallKind
	key  string
}

func keyOf(c host.CallRef) callKey { return callKey{c.Kind, c.Key} }

type recCall struct {
	ref   host.CallRef
	input json.RawMessage
}

// selfSignal is a signal the case run sent itself (a send whose run_id is
// the case run, by the run or one of its children), in the order of the
// case run's inbox for its name. Sent says that the send ran in this case
// run (live or changed); a reused or simulated send ran only in the
// recording, whose receive then holds its payload.
type selfSignal struct {
	payload json.RawMessage
	sent    bool
}

// engine is one case run: the resolver of the top-level run.
type engine struct {
	p      Params
	target host.TargetInfo
	prefix []recCall
	inputs callkeys.Map[json.RawMessage] // recorded inputs of the prefix calls (recordedInput has every one)
	index  *recordIndex                  // finds a call's position in p.Bundle.Results
	allow  map[string]bool
	steps  map[string][]string // step name → registration ids
	budget int
	prices Prices
	// hasRules says that the recording or the code declares volatile-field
	// rules; compiled caches the recorded rule sets.
	hasRules bool
	compiled map[string]*volatile.Rules

	mu           sync.Mutex
	refs         []host.CallRef // the chunk the case:call events' refs come from
	consumed     []bool         // by position in p.Bundle.Results
	prefixDone   int
	started      int // calls the ladder let run live against the budget
	liveCalls    int // of those, the ones that finished (have a call line)
	selfSent     map[string][]selfSignal
	cost         float64
	reserved     map[string]float64 // worst-case cost of live model calls in flight, by call id
	shared       map[string]float64 // the same against Options.Shared, every live call's (0 for non-model calls)
	lastSeq      atomic.Int64       // the case run's last run_seq appended so far
	priorOutcome *Outcome           // a case:outcome journaled before the engine started (resume)
	unobservable string
	calls        []CallLine
	counts       map[string]int
	changed      []string
	divergence   *Divergence
	reason       string
	outcome      *Outcome
	lineWritten  bool                   // a case:call line was made (the first one is never held)
	usedSupply   map[string]bool        // supplied entries that answered a call, as in UnusedSupply
	tracker      explain.Tracker        // the roles of changed calls
	pending      map[string]*Divergence // what changed in a call resolved as changed, until it is observed
	changes      []ChangeRef
	axes         []string // the changed axes known at start (all but supplied_answers)
	// model is the model id of the run's model calls (host.RunParams.Model):
	// Options.Model, else the recorded one (runModel).
	model string
	// clock is the case run's clock, which stamps its case:* events.
	clock *JumpClock
}

// Run runs a case: a new run of the target (p.RunID in p.Log) whose calls
// resolve from the bundle. It returns the report; the error is non-nil for
// invalid parameters, an unknown target, bad inputs, or a journal failure.
// Children of the run (child runs, gathers, sub-agent tools) that the
// ladder lets run live run entirely live with the same clock: their calls
// are part of the parent's call (its allow token and budget count), only
// their model spend is added to the cost.
func Run(ctx context.Context, p Params) (Report, error) {
	e, inputs, err := newEngine(p)
	if err != nil {
		return Report{}, err
	}
	out, err := e.run(ctx, inputs)
	if err != nil {
		return Report{}, err
	}
	return e.finish(ctx, out)
}

// newEngine checks p, looks up its target and builds the engine of the
// case run, with the inputs the run starts with (the recorded ones and
// Options.Inputs over them).
func newEngine(p Params) (*engine, map[string]json.RawMessage, error) {
	if p.Bundle == nil || p.Registry == nil || p.Log == nil || p.RunID == "" {
		return nil, nil, errors.New("replay: Bundle, Registry, Log and RunID are required")
	}
	m := p.Bundle.Manifest
	if p.Target == "" {
		p.Target = m.TargetName
	}
	info, ok := p.Registry.Lookup(p.Target)
	if !ok {
		return nil, nil, fmt.Errorf("replay: %w: %q", host.ErrUnknownTarget, p.Target)
	}
	e := &engine{
		p: p, target: info,
		index:    newRecordIndex(p.Bundle.Results),
		allow:    map[string]bool{},
		steps:    map[string][]string{},
		consumed: make([]bool, len(p.Bundle.Results)),
		counts:   map[string]int{ProvReused: 0, ProvSimulated: 0, ProvLive: 0, ProvChanged: 0},
		budget:   DefaultLiveBudget,
		prices:   DefaultPrices().Merge(p.Prices),
		changed:  []string{},
		// One call line per recorded result is the common case.
		calls: make([]CallLine, 0, len(p.Bundle.Results)),
	}
	if p.LiveBudget != nil {
		e.budget = *p.LiveBudget
	}
	for _, t := range p.AllowWrite {
		e.allow[t] = true
	}
	for _, s := range append(slices.Clone(m.Registration.Steps), info.Registration.Steps...) {
		e.steps[s.Name] = append(e.steps[s.Name], s.ID)
	}
	if err := checkRecordedRules(m.Registration); err != nil {
		return nil, nil, err
	}
	e.hasRules = host.HasVolatile(m.Registration) || host.HasVolatile(info.Registration)
	if err := e.readPrefix(); err != nil {
		return nil, nil, err
	}
	inputs := map[string]json.RawMessage{}
	if len(m.Inputs) > 0 && string(m.Inputs) != "null" {
		if err := json.Unmarshal(m.Inputs, &inputs); err != nil {
			return nil, nil, messages.Errorf(messages.BundleCorrupt, "manifest inputs: %v", err)
		}
	}
	e.axes = e.startAxes(inputs)
	e.model = e.runModel()
	for k, v := range p.Inputs {
		inputs[k] = v
	}
	return e, inputs, nil
}

// readPrefix reads the recorded calls of the bundle's history (the prefix
// to verify) and their inputs.
func (e *engine) readPrefix() error {
	for i, raw := range e.p.Bundle.History {
		var ev struct {
			Kind  string          `json:"kind"`
			Call  *host.CallRef   `json:"call"`
			Input json.RawMessage `json:"input"`
		}
		if err := json.Unmarshal(raw, &ev); err != nil {
			return messages.Errorf(messages.BundleCorrupt, "history event %d: %v", i, err)
		}
		if ev.Kind == string(runevent.CallStart) && ev.Call != nil {
			e.prefix = append(e.prefix, recCall{ref: *ev.Call, input: ev.Input})
			e.inputs.Set(string(ev.Call.Kind), ev.Call.Key, ev.Input)
		}
	}
	return nil
}

// run runs the target on the case run's clock, resuming what the journal
// already holds of it, with the engine as its resolver.
func (e *engine) run(ctx context.Context, inputs map[string]json.RawMessage) (host.Outcome, error) {
	base := e.p.Clock
	if base == nil {
		base = host.SystemClock{}
	}
	e.clock = &JumpClock{Base: base}
	prior, err := e.resume(ctx)
	if err != nil {
		return host.Outcome{}, err
	}
	e.priorOutcome = prior.outcome
	rt, err := host.NewRuntime(host.Config{
		Registry: e.p.Registry, Log: &caseLog{Log: e.p.Log, e: e}, Models: e.p.Models,
		Resolver: childResolver{e}, Clock: e.clock,
	})
	if err != nil {
		return host.Outcome{}, err
	}
	out, err := rt.Run(ctx, host.RunParams{
		RunID: e.p.RunID, Target: e.p.Target, Inputs: inputs, Resolver: e,
		Models: e.p.Models, Model: e.model, System: e.p.System, Deps: e.p.Deps, Recorded: prior.loaded,
	})
	if err != nil {
		return host.Outcome{}, fmt.Errorf("replay: run %s: %w", e.p.RunID, err)
	}
	return out, nil
}

// finish is the report of a run that returned out: the outcome the
// terminal event journaled, the one a finished run had journaled before
// (a run delivered again), or, for a suspended run, a case:outcome it
// writes now, stamped by the case run's clock and appended outside the
// engine's lock.
func (e *engine) finish(ctx context.Context, out host.Outcome) (Report, error) {
	e.mu.Lock()
	if e.outcome == nil && e.priorOutcome != nil && out.Status != host.StatusSuspended {
		// The run had finished before this engine started (a run delivered
		// again): its journaled outcome is the outcome.
		o := *e.priorOutcome
		e.outcome = &o
	}
	var write *host.Event
	if e.outcome == nil {
		// No terminal event (suspended): write case:outcome now.
		o := e.outcomeLocked(host.Event{}, out)
		o.LastSeq = max(e.lastSeq.Load(), out.LastSeq) + 1 // this case:outcome
		e.outcome = &o
		write = &host.Event{Kind: runevent.CaseOutcome, At: e.clock.Now().UTC(), Extra: lineExtra(o, false)}
	}
	o := *e.outcome
	calls := e.calls
	e.mu.Unlock()
	if write != nil {
		if _, err := e.p.Log.Append(ctx, e.p.RunID, host.Batch{Target: e.p.Target, Events: []host.Event{*write}}); err != nil {
			return Report{}, fmt.Errorf("replay: run %s: write case:outcome: %w", e.p.RunID, err)
		}
	}
	o.LastSeq = max(o.LastSeq, out.LastSeq, e.lastSeq.Load())
	if len(calls) == 0 {
		calls = nil
	}
	return Report{Calls: calls, Outcome: o}, nil
}

// Resolve implements host.Resolver: prefix verification, then the ladder.
func (e *engine) Resolve(ctx context.Context, c host.Call) (host.Resolution, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.p.FromStart && c.Seq < len(e.prefix) {
		return e.verifyPrefix(c), nil
	}
	return e.ladder(ctx, c)
}

// RecordedInput implements host.RecordedInputs for a post-fork call: the
// input and fingerprint its recorded result holds, when the recording keeps
// the input and the code declares the call's volatile-field rules the
// recording holds (a call before the fork is checked against the history,
// and one under changed rules is fingerprinted under both).
func (e *engine) RecordedInput(seq int, kind host.CallKind, key, name string) (json.RawMessage, string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.p.FromStart && seq < len(e.prefix) {
		return nil, "", false
	}
	k := callKey{kind, key}
	i, ok := e.index.find(k)
	if !ok {
		return nil, "", false
	}
	if e.hasRules {
		c := host.Call{CallRef: host.CallRef{Kind: kind, Key: key}, Name: name}
		if _, changed := e.recordedRules(c); changed {
			return nil, "", false
		}
	}
	in := e.recordedInputAt(k, i)
	if in == nil {
		return nil, "", false
	}
	return in, e.p.Bundle.Results[i].Fingerprint, true
}

// NextKey implements host.RecordedInputs: the key of the result the index
// expects next, when it is of that kind and the call at seq is after the
// fork (calls before it are checked against the history).
func (e *engine) NextKey(seq int, kind host.CallKind) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.p.FromStart && seq < len(e.prefix) {
		return ""
	}
	return e.index.nextKey(kind)
}

func (e *engine) stop(c host.Call, code messages.Code, format string, args ...any) host.Resolution {
	return host.StopWith(&host.StopError{Code: code, Message: fmt.Sprintf(format, args...), StopKey: c.ID()})
}

// noteSeq records that the case run's journal reached run_seq seq.
func (e *engine) noteSeq(seq int64) {
	for {
		cur := e.lastSeq.Load()
		if seq <= cur || e.lastSeq.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// startAxes are the changed axes known before the run starts: the code
// version, --model, --prompt-file and --input against the recording
// (recorded the manifest's inputs).
func (e *engine) startAxes(recorded map[string]json.RawMessage) []string {
	m := e.p.Bundle.Manifest
	axes := []string{}
	if m.CodeVersion != e.target.CodeVersion {
		axes = append(axes, AxisCodeVersion)
	}
	var rc struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(m.RecordedConfig, &rc)
	if e.p.Model != "" && e.p.Model != rc.Model {
		axes = append(axes, AxisModel)
	}
	if e.p.System != "" {
		if sys, ok := e.recordedSystem(); !ok || sys != e.p.System {
			axes = append(axes, AxisPrompt)
		}
	}
	for k, v := range e.p.Inputs {
		if was, ok := recorded[k]; !ok || !sameJSON(was, v) {
			axes = append(axes, AxisInputs)
			break
		}
	}
	return axes
}

// sameJSON says that two JSON values are equal field by field.
func sameJSON(a, b json.RawMessage) bool {
	d := DiffInputs(a, b)
	return d != nil && len(d.Paths()) == 0
}

var _ host.Clock = (*JumpClock)(nil)
