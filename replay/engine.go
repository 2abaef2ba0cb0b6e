package replay

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
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/bundle/volatile"
	"github.com/pyrula/caseworker/explain"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
)

// DefaultLiveBudget is the live budget (--live-budget) when none is given:
// at most this many non-pure calls of a case run run live.
const DefaultLiveBudget = 20

// The provenances of a call line (and of call:done in the case run's
// journal).
const (
	ProvReused    = "reused"
	ProvSimulated = "simulated"
	ProvLive      = "live"
	ProvChanged   = "changed"
)

// The reasons of a replay_diverged stop.
const (
	ReasonInputChanged   = "input_changed"
	ReasonUnexpectedCall = "unexpected_call"
	ReasonRecordedError  = "recorded_error"
)

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
	Log flow.Log
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
	Clock flow.Clock
	// Options are the flags.
	Options
}

// Divergence says which call left the recording and what changed in it:
// the call made, the call recorded at the same position (prefix) or under
// the same key, both fingerprints, and a field-level diff of the inputs
// (with --values, the recorded and the actual value at each path). The
// recording keeps the input of a prefix call in its call:start event and
// of a later call on its result; a case saved before results kept inputs
// has none for the calls after its fork, and NoInput says so in words. A
// model call's divergence also says which parts of its input changed
// (Model). Role says how the call relates to the calls that changed
// before it in the same run (explain.Tracker): the first is the cause.
// A recorded call is verified under the volatile-field rules the bundle
// recorded: the diff lists the paths those rules ignore apart, and when the
// code declares other rules for the call, RulesChanged holds both sets and
// ActualFingerprint is the call's fingerprint under the recorded ones.
type Divergence struct {
	Seq                 int    `json:"seq"`
	Call                string `json:"call"`
	ActualFingerprint   string `json:"actual_fingerprint"`
	RecordedCall        string `json:"recorded_call,omitempty"`
	RecordedFingerprint string `json:"recorded_fingerprint,omitempty"`
	// Tool is the tool's name, for a tool call (whose key is its
	// tool-use id).
	Tool         string               `json:"tool,omitempty"`
	Role         string               `json:"role,omitempty"`
	CausedBy     string               `json:"caused_by,omitempty"`
	Diff         *InputDiff           `json:"diff,omitempty"`
	NoInput      string               `json:"no_input,omitempty"`
	Model        *explain.ModelChange `json:"model,omitempty"`
	RulesChanged *RulesChange         `json:"rules_changed,omitempty"`
}

// Where names the call: its id, with the tool's name for a tool call
// ("tool:toolu_01 (lookup_order)").
func (d *Divergence) Where() string {
	if d.Tool != "" {
		return d.Call + " (" + d.Tool + ")"
	}
	return d.Call
}

// What words what changed in the call on one line: the parts of a model
// call, else the input fields, else why the recording cannot tell.
func (d *Divergence) What() string {
	switch {
	case d == nil:
		return ""
	case d.Model != nil && len(d.Model.Parts) > 0:
		return d.Model.Summary()
	case d.Diff != nil:
		return d.Diff.Summary()
	case d.Call != d.RecordedCall && d.RecordedCall != "":
		return fmt.Sprintf("the target made %s where the recording has %s", d.Call, d.RecordedCall)
	case d.NoInput != "":
		return d.NoInput
	}
	return ""
}

// ChangeRef is one changed or diverging call on the outcome line, in run
// order: its role and, for a consequent call, the call that caused it.
type ChangeRef struct {
	Seq      int    `json:"seq"`
	Call     string `json:"call"`
	Role     string `json:"role"`
	CausedBy string `json:"caused_by,omitempty"`
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

// CallLine is the {"type":"call"} line of a new post-fork call.
type CallLine struct {
	Type        string          `json:"type"`
	Seq         int             `json:"seq"`
	Kind        string          `json:"kind"`
	Key         string          `json:"key"`
	Effect      string          `json:"effect"`
	Fingerprint string          `json:"fingerprint"`
	Provenance  string          `json:"provenance"`
	Result      json.RawMessage `json:"result,omitempty"`
	Error       json.RawMessage `json:"error,omitempty"`
	// Change, on a line whose provenance is changed, says what changed in
	// the call's input and its role.
	Change *Divergence `json:"change,omitempty"`
}

// CodeVersions are the recorded and current code versions of the target.
type CodeVersions struct {
	Recorded string `json:"recorded"`
	Current  string `json:"current"`
}

// Outcome is the {"type":"outcome"} line.
type Outcome struct {
	Type    string      `json:"type"`
	RunID   string      `json:"run_id"`
	Target  string      `json:"target"`
	Status  flow.Status `json:"status"`
	Code    string      `json:"code,omitempty"`
	Message string      `json:"message,omitempty"`
	// StopKey and StopToken are set (null or a string) on a run:error.
	StopKey    json.RawMessage `json:"stop_key,omitempty"`
	StopToken  json.RawMessage `json:"stop_token,omitempty"`
	Reason     string          `json:"reason,omitempty"`
	Divergence *Divergence     `json:"divergence,omitempty"`
	// Cause is the first call that changed or diverged; absent when none
	// did.
	Cause string `json:"cause,omitempty"`
	// Changes are the calls that changed or diverged, in run order, with
	// their roles; always an array.
	Changes []ChangeRef `json:"changes"`
	// ChangedAxes say what the case run changed from the recording, of
	// code_version (the target's code version differs from the recorded
	// one), model (--model), prompt (--prompt-file), inputs (--input) and
	// supplied_answers (a --supply entry answered a call), in that order;
	// always an array.
	ChangedAxes []string `json:"changed_axes"`
	// Provenance counts the call lines (the new post-fork calls; every
	// call with FromStart) by provenance.
	Provenance map[string]int `json:"provenance"`
	// PrefixCalls counts the recorded prefix calls verified.
	PrefixCalls int `json:"prefix_calls"`
	// ChangedCalls are the ids of the call lines whose provenance is
	// changed.
	ChangedCalls []string `json:"changed_calls"`
	// LiveCalls counts the call lines whose provenance is live or changed
	// and whose call is not pure: the calls that counted against the live
	// budget and finished. Calls inside children are part of their parent
	// call; a call in flight when the run stopped or was cancelled has no
	// line and is not counted.
	LiveCalls int `json:"live_calls"`
	CostUSD   USD `json:"cost_usd"`
	// CostObservable is false when a live model call reported no usage or
	// used a model with no price.
	CostObservable bool `json:"cost_observable"`
	// LLMRef names the model client that answered live model calls
	// (--llm-ref, llm_ref); null when none was named and the target's own
	// client, if any, answered them.
	LLMRef      *string      `json:"llm_ref"`
	CodeVersion CodeVersions `json:"code_version"`
	FixtureHash string       `json:"fixture_hash"`
	// UnconsumedKeys (replay-only) are the recorded post-fork calls the run
	// never made.
	UnconsumedKeys *[]string `json:"unconsumed_keys,omitempty"`
	// UnusedSupply are the supplied entries (Options.Supply) that answered
	// no call, as "calls:<kind>:<key>" and "tools:<name>", sorted; always
	// an array.
	UnusedSupply []string        `json:"unused_supply"`
	Result       json.RawMessage `json:"result,omitempty"`
	LastSeq      int64           `json:"last_seq"`
}

// Report is what a case run printed: its call lines and its outcome.
type Report struct {
	Calls   []CallLine
	Outcome Outcome
}

// ExitStatus is the CLI exit status of the report: 0 complete (and, under
// replay-only, every recorded call consumed), 2 a refusal before start
// (prefix_diverged), 3 a run that failed, was cancelled or suspended.
func (r Report) ExitStatus() int {
	o := r.Outcome
	switch {
	case o.Status == flow.StatusComplete && (o.UnconsumedKeys == nil || len(*o.UnconsumedKeys) == 0):
		return messages.ExitOK
	case o.Status == flow.StatusError && !messages.Code(o.Code).IsRunStop() && messages.Code(o.Code).Known():
		return messages.ExitRefused
	}
	return messages.ExitRunFailed
}

// callKey is a call's identity kind:key as a map key, without building the
// string.
type callKey struct {
	kind flow.CallKind
	key  string
}

func keyOf(c flow.CallRef) callKey { return callKey{c.Kind, c.Key} }

type recCall struct {
	ref   flow.CallRef
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
	target flow.TargetInfo
	prefix []recCall
	inputs map[callKey]json.RawMessage // recorded inputs of the prefix calls (recordedInput has every one)
	index  map[callKey]int             // position in p.Bundle.Results
	allow  map[string]bool
	steps  map[string][]string // step name → registration ids
	budget int
	prices Prices
	// hasRules says that the recording or the code declares volatile-field
	// rules; compiled caches the recorded rule sets.
	hasRules bool
	compiled map[string]*volatile.Rules

	mu           sync.Mutex
	event        [1]flow.Event // the batch of a case:call append
	consumed     []bool        // by position in p.Bundle.Results
	prefixDone   int
	started      int // calls the ladder let run live against the budget
	liveCalls    int // of those, the ones that finished (have a call line)
	selfSent     map[string][]selfSignal
	cost         float64
	reserved     map[string]float64 // worst-case cost of live model calls in flight, by call id
	lastSeq      atomic.Int64       // the case run's last run_seq appended so far
	priorOutcome *Outcome           // a case:outcome journaled before the engine started (resume)
	unobservable string
	calls        []CallLine
	counts       map[string]int
	changed      []string
	divergence   *Divergence
	reason       string
	outcome      *Outcome
	callLineErr  error                  // the first case:call append that failed
	usedSupply   map[string]bool        // supplied entries that answered a call, as in UnusedSupply
	tracker      explain.Tracker        // the roles of changed calls
	pending      map[string]*Divergence // what changed in a call resolved as changed, until it is observed
	changes      []ChangeRef
	axes         []string // the changed axes known at start (all but supplied_answers)
	// model is the model id of the run's model calls (flow.RunParams.Model):
	// Options.Model, else the recorded one (runModel).
	model string
	line  lineCtx // the context of case:call appends
}

// Run runs a case: a new run of the target (p.RunID in p.Log) whose calls
// resolve from the bundle. It returns the report; the error is non-nil for
// invalid parameters, an unknown target, bad inputs, or a journal failure.
// Children of the run (child runs, gathers, sub-agent tools) that the
// ladder lets run live run entirely live with the same clock: their calls
// are part of the parent's call (its allow token and budget count), only
// their model spend is added to the cost.
func Run(ctx context.Context, p Params) (Report, error) {
	if p.Bundle == nil || p.Registry == nil || p.Log == nil || p.RunID == "" {
		return Report{}, errors.New("replay: Bundle, Registry, Log and RunID are required")
	}
	m := p.Bundle.Manifest
	if p.Target == "" {
		p.Target = m.TargetName
	}
	info, ok := p.Registry.Lookup(p.Target)
	if !ok {
		return Report{}, fmt.Errorf("replay: %w: %q", flow.ErrUnknownTarget, p.Target)
	}
	e := &engine{
		p: p, target: info,
		inputs:   map[callKey]json.RawMessage{},
		index:    make(map[callKey]int, len(p.Bundle.Results)),
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
	for i, r := range p.Bundle.Results {
		e.index[callKey{flow.CallKind(r.Kind), r.Key}] = i
	}
	if err := checkRecordedRules(m.Registration); err != nil {
		return Report{}, err
	}
	e.hasRules = flow.HasVolatile(m.Registration) || flow.HasVolatile(info.Registration)
	for i, raw := range p.Bundle.History {
		var ev struct {
			Kind  string          `json:"kind"`
			Call  *flow.CallRef   `json:"call"`
			Input json.RawMessage `json:"input"`
		}
		if err := json.Unmarshal(raw, &ev); err != nil {
			return Report{}, messages.Errorf(messages.BundleCorrupt, "history event %d: %v", i, err)
		}
		if ev.Kind == string(runevent.CallStart) && ev.Call != nil {
			e.prefix = append(e.prefix, recCall{ref: *ev.Call, input: ev.Input})
			e.inputs[keyOf(*ev.Call)] = ev.Input
		}
	}
	inputs := map[string]json.RawMessage{}
	if len(m.Inputs) > 0 && string(m.Inputs) != "null" {
		if err := json.Unmarshal(m.Inputs, &inputs); err != nil {
			return Report{}, messages.Errorf(messages.BundleCorrupt, "manifest inputs: %v", err)
		}
	}
	e.axes = e.startAxes(inputs)
	e.model = e.runModel()
	for k, v := range p.Inputs {
		inputs[k] = v
	}

	base := p.Clock
	if base == nil {
		base = flow.SystemClock{}
	}
	prior, err := e.resume(ctx)
	if err != nil {
		return Report{}, err
	}
	e.priorOutcome = prior.outcome
	log := &caseLog{Log: p.Log, e: e}
	rt, err := flow.NewRuntime(flow.Config{
		Registry: p.Registry, Log: log, Models: p.Models,
		Resolver: childResolver{e}, Clock: &JumpClock{Base: base},
	})
	if err != nil {
		return Report{}, err
	}
	out, err := rt.Run(ctx, flow.RunParams{
		RunID: p.RunID, Target: p.Target, Inputs: inputs, Resolver: e,
		Models: p.Models, Model: e.model, System: p.System, Deps: p.Deps,
	})
	if err != nil {
		return Report{}, fmt.Errorf("replay: run %s: %w", p.RunID, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopLineContext()
	if e.callLineErr != nil {
		return Report{}, fmt.Errorf("replay: run %s: write case:call: %w", p.RunID, e.callLineErr)
	}
	if e.outcome == nil && e.priorOutcome != nil && out.Status != flow.StatusSuspended {
		// The run had finished before this engine started (a run delivered
		// again): its journaled outcome is the outcome.
		o := *e.priorOutcome
		e.outcome = &o
	}
	if e.outcome == nil {
		// No terminal event (suspended): write case:outcome now.
		o := e.outcomeLocked(flow.Event{}, out)
		o.LastSeq = max(e.lastSeq.Load(), out.LastSeq) + 1 // this case:outcome
		e.outcome = &o
		ev := flow.Event{Kind: runevent.CaseOutcome, At: time.Now().UTC(), Extra: lineExtra(o, false)}
		if _, err := p.Log.Append(ctx, p.RunID, flow.Batch{Target: p.Target, Events: []flow.Event{ev}}); err != nil {
			return Report{}, fmt.Errorf("replay: run %s: write case:outcome: %w", p.RunID, err)
		}
	}
	o := *e.outcome
	o.LastSeq = max(o.LastSeq, out.LastSeq, e.lastSeq.Load())
	calls := e.calls
	if len(calls) == 0 {
		calls = nil
	}
	return Report{Calls: calls, Outcome: o}, nil
}

// Resolve implements flow.Resolver: prefix verification, then the ladder.
func (e *engine) Resolve(ctx context.Context, c flow.Call) (flow.Resolution, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.p.FromStart && c.Seq < len(e.prefix) {
		return e.verifyPrefix(c), nil
	}
	return e.ladder(c), nil
}

func (e *engine) stop(c flow.Call, code messages.Code, format string, args ...any) flow.Resolution {
	return flow.StopWith(&flow.StopError{Code: code, Message: fmt.Sprintf(format, args...), StopKey: c.ID()})
}

func (e *engine) verifyPrefix(c flow.Call) flow.Resolution {
	rec := e.prefix[c.Seq]
	id := c.ID()
	if rec.ref.ID() != id || !e.sameFingerprint(c, rec.ref.Fingerprint, rec.input, true) {
		if rec.ref.ID() != id {
			d := &Divergence{Seq: c.Seq, Call: id, ActualFingerprint: c.Fingerprint,
				RecordedCall: rec.ref.ID(), RecordedFingerprint: rec.ref.Fingerprint}
			e.noteDivergence(d, c, nil)
			return e.stop(c, messages.PrefixDiverged, "prefix call %d: the recording has %s, the target made %s", c.Seq, rec.ref.ID(), id)
		}
		d := e.explainCall(c, rec.ref.Fingerprint, rec.input, true)
		e.noteDivergence(d, c, rec.input)
		return e.stop(c, messages.PrefixDiverged, "prefix call %d %s: %s (recorded fingerprint %s, actual %s)%s",
			c.Seq, d.Where(), d.What(), rec.ref.Fingerprint, d.ActualFingerprint, rulesText(d.RulesChanged))
	}
	i, ok := e.index[keyOf(c.CallRef)]
	if !ok {
		return e.stop(c, messages.PrefixDiverged, "prefix call %d %s has no recorded result", c.Seq, id)
	}
	res := e.p.Bundle.Results[i]
	e.consumed[i] = true
	e.prefixDone = c.Seq + 1
	return e.recorded(res, ProvReused)
}

// sameFingerprint compares a call with its recording, under the
// volatile-field rules the recording holds for it. A signal send whose
// run_id is the case run (or one of its children) matches the recording's
// send to the recorded run: the case run causes that difference itself.
// With prefix set (prefix verification only), under --model or
// --prompt-file a model call also matches when it differs only in model or
// system; the ladder compares model calls exactly, so that a model call
// whose input changed is never reused with the old model's answer.
func (e *engine) sameFingerprint(c flow.Call, fp string, recInput json.RawMessage, prefix bool) bool {
	rules, rulesChanged := e.recordedRules(c)
	if !rulesChanged && c.Fingerprint == fp {
		return true
	}
	if rulesChanged {
		// The code's rules differ from the recording's: c.Fingerprint is
		// computed under the code's, so compute the recording's.
		if _, got, err := flow.FingerprintRules(c.Input, rules); err == nil && got == fp {
			return true
		}
	}
	var actual map[string]json.RawMessage
	if json.Unmarshal(c.Input, &actual) != nil || actual == nil {
		return false
	}
	changed := false
	if c.Kind == flow.KindStep && strings.HasPrefix(c.Key, "sigsend:") {
		var to string
		src := e.p.Bundle.Manifest.Source.RunID
		if json.Unmarshal(actual["run_id"], &to) == nil && src != "" &&
			(to == e.p.RunID || strings.HasPrefix(to, e.p.RunID+"/")) {
			actual["run_id"], _ = json.Marshal(src + strings.TrimPrefix(to, e.p.RunID))
			changed = true
		}
	}
	if prefix && c.Kind == flow.KindModel && (e.p.Model != "" || e.p.System != "") && recInput != nil {
		var was map[string]json.RawMessage
		if json.Unmarshal(recInput, &was) == nil {
			actual["model"], actual["system"] = was["model"], was["system"]
			changed = true
		}
	}
	if !changed {
		return false
	}
	_, got, err := flow.FingerprintRules(actual, rules)
	return err == nil && got == fp
}

// explainCall builds the divergence of call c from its recording: its
// identity, both fingerprints, the field diff against the recorded input
// (with values under --values) and, for a model call, the parts that
// changed. recInput is the recorded input, nil when the recording keeps
// none (prefix says where the call is, for the words of NoInput).
func (e *engine) explainCall(c flow.Call, recordedFP string, recInput json.RawMessage, prefix bool) *Divergence {
	id := c.ID()
	d := &Divergence{Seq: c.Seq, Call: id, ActualFingerprint: e.verifiedFingerprint(c),
		RecordedCall: id, RecordedFingerprint: recordedFP, RulesChanged: e.rulesChange(c)}
	if c.Kind == flow.KindTool {
		d.Tool = c.Name
	}
	if recInput == nil {
		d.NoInput = "input changed; the recording keeps no input for this call to name the fields"
		if !prefix {
			d.NoInput = "input changed; the case keeps no input for this call (saved before cases kept the inputs of calls after the fork): save the run again to name the fields"
		}
		return d
	}
	d.Diff = e.diff(c, recInput)
	if d.Diff == nil {
		return d
	}
	if e.p.Values {
		d.Diff.addValues(recInput, c.Input)
	}
	if c.Kind == flow.KindModel {
		d.Model = explain.Model(recInput, c.Input, d.Diff.Paths())
	}
	return d
}

// noteDivergence makes d the run's divergence (the call that stopped it)
// and gives it its role among the calls that changed before it.
func (e *engine) noteDivergence(d *Divergence, c flow.Call, recInput json.RawMessage) {
	e.divergence = d
	e.addChange(d, explain.Call{ID: d.Call, Input: c.Input, RecordedInput: recInput})
}

// addChange gives d its role (the tracker sees calls in the order they
// finish, which is run order but for calls that run at once) and lists it
// on the outcome.
func (e *engine) addChange(d *Divergence, c explain.Call) {
	r := e.tracker.Add(c)
	d.Role, d.CausedBy = r.Role, r.CausedBy
	e.changes = append(e.changes, ChangeRef{Seq: d.Seq, Call: d.Call, Role: d.Role, CausedBy: d.CausedBy})
}

// recorded answers a call with its recorded result or error.
func (e *engine) recorded(res bundle.Result, prov string) flow.Resolution {
	if res.Error != nil {
		var ce flow.CallError
		_ = json.Unmarshal(res.Error, &ce)
		return flow.AnswerError(&ce, prov)
	}
	r := flow.Answer(res.Result, prov)
	r.Canonical = e.p.Canonical
	return r
}

func waits(k flow.CallKind) bool {
	return k == flow.KindInterrupt || k == flow.KindSignal || k == flow.KindStream
}

// ladder resolves a post-fork call: reused, simulated, live or changed, or
// a stop.
func (e *engine) ladder(c flow.Call) flow.Resolution {
	k := keyOf(c.CallRef)
	i, ok := e.index[k]
	var rec bundle.Result
	replaced, badError := false, false
	var inputChanged *Divergence // what changed, when the call's input did
	// A receive of a signal that the case run sent itself, and sent in
	// this case run, gets what was sent: the recorded answer holds the
	// recorded send's payload.
	own, fromRun := e.ownSignal(c)
	if ok && !e.consumed[i] {
		rec = e.p.Bundle.Results[i]
		e.consumed[i] = true
		if !fromRun && e.sameFingerprint(c, rec.Fingerprint, e.recordedInput(k), false) {
			if rec.Error == nil {
				return e.recorded(rec, ProvReused)
			}
			var ce flow.CallError
			if json.Unmarshal(rec.Error, &ce) == nil && ce.Type != "" && !(e.p.ReplayOnly && messages.Code(ce.Type).Known()) {
				return flow.AnswerError(&ce, ProvReused)
			}
			badError = true
		}
		replaced = true
		if !fromRun && !badError {
			inputChanged = e.explainCall(c, rec.Fingerprint, e.recordedInput(k), false)
			if e.pending == nil {
				e.pending = map[string]*Divergence{}
			}
			e.pending[c.ID()] = inputChanged
		}
	}
	id := c.ID()
	prov := ProvLive
	if replaced {
		prov = ProvChanged
	}
	if e.p.ReplayOnly {
		if c.Effect == flow.Pure && !waits(c.Kind) {
			return flow.Resolution{Action: flow.ActLive, Provenance: prov}
		}
		d := &Divergence{Seq: c.Seq, Call: id, ActualFingerprint: c.Fingerprint}
		switch {
		case badError:
			e.reason = ReasonRecordedError
		case inputChanged != nil:
			e.reason = ReasonInputChanged
			d = inputChanged
			delete(e.pending, id)
		case replaced:
			e.reason = ReasonInputChanged
			d.RecordedCall, d.RecordedFingerprint = id, rec.Fingerprint
		default:
			e.reason = ReasonUnexpectedCall
		}
		e.noteDivergence(d, c, e.recordedInput(k))
		switch e.reason {
		case ReasonRecordedError:
			return e.stop(c, messages.ReplayDiverged, "%s: the recording holds an error that cannot be replayed (%s)", id, rec.Error)
		case ReasonInputChanged:
			return e.stop(c, messages.ReplayDiverged, "%s: %s (recorded fingerprint %s, actual %s)%s",
				d.Where(), d.What(), rec.Fingerprint, d.ActualFingerprint, rulesText(d.RulesChanged))
		}
		return e.stop(c, messages.ReplayDiverged, "%s: unexpected call: the recording has no such call", id)
	}
	if ans, ok := e.supplied(c); ok {
		if err := flow.ValidateAnswer(c.Kind, ans); err != nil {
			return e.stop(c, messages.MissingContext, "the supplied answer for %s has the wrong shape: %v", id, err)
		}
		return flow.Answer(ans, ProvSimulated)
	}
	if waits(c.Kind) && !fromRun {
		return e.stop(c, messages.MissingContext, "%s has no recorded or supplied answer and a case run never waits (supply calls[%q])", id, id)
	}
	if c.Effect == flow.Pure {
		return flow.Resolution{Action: flow.ActLive, Provenance: prov}
	}
	if c.Effect == flow.Write && !e.allowed(c) {
		return flow.StopWith(&flow.StopError{Code: messages.WriteNotAllowed, StopKey: id, StopToken: c.Token,
			Message: fmt.Sprintf("%s is a write; allow it with --allow-write %s", id, c.Token)})
	}
	if e.started >= e.budget {
		return e.stop(c, messages.LiveBudgetExceeded, "%s would be live call %d, over --live-budget %d", id, e.started+1, e.budget)
	}
	if e.p.MaxCostUSD != nil && e.unobservable != "" {
		return e.stop(c, messages.LiveBudgetExceeded, "%s: the spend of %s is unobservable under --max-cost-usd", id, e.unobservable)
	}
	if c.Kind == flow.KindModel && e.p.MaxCostUSD != nil {
		model := modelOf(c.Input)
		if _, ok := e.prices[model]; !ok {
			return e.stop(c, messages.LiveBudgetExceeded, "%s: model %q has no price under --max-cost-usd (add it with --prices)", id, model)
		}
		worst := e.prices[model].WorstCase(PromptBound(c.Input, c.Model), maxTokensOf(c))
		committed := e.cost
		for _, r := range e.reserved {
			committed += r
		}
		if committed+worst > *e.p.MaxCostUSD {
			return e.stop(c, messages.LiveBudgetExceeded,
				"%s: not sent: it could cost up to %s USD (at most %d prompt and %d answer tokens of %s) on top of %s USD spent or reserved, over --max-cost-usd %s",
				id, fmtUSD(worst), PromptBound(c.Input, c.Model), maxTokensOf(c), model, fmtUSD(committed), fmtUSD(*e.p.MaxCostUSD))
		}
		if e.reserved == nil {
			e.reserved = map[string]float64{}
		}
		e.reserved[id] = worst
	}
	e.started++
	if fromRun {
		// The case run's own inbox answers: nothing waits.
		return flow.Answer(own, prov)
	}
	return flow.Resolution{Action: flow.ActLive, Provenance: prov}
}

// ownSignal returns the answer {"payload": …} of a signal receive when the
// signal it reads (the n-th its run got under its name) is one the case run
// sent itself in this case run.
func (e *engine) ownSignal(c flow.Call) (json.RawMessage, bool) {
	if c.Kind != flow.KindSignal || len(e.selfSent) == 0 {
		return nil, false
	}
	n, err := strconv.Atoi(c.Key[strings.LastIndexByte(c.Key, ':')+1:])
	list := e.selfSent[c.Name]
	if err != nil || n < 0 || n >= len(list) || !list[n].sent {
		return nil, false
	}
	ans, err := json.Marshal(struct {
		Payload json.RawMessage `json:"payload"`
	}{list[n].payload})
	return ans, err == nil
}

// noteSelfSignal notes a signal send that reached the case run's inbox: a
// send to the case run that did not fail. sent says that it ran in this
// case run.
func (e *engine) noteSelfSignal(c flow.Call, rec bundle.Result, sent bool) {
	if c.Kind != flow.KindStep || !strings.HasPrefix(c.Key, "sigsend:") || rec.Error != nil {
		return
	}
	var in struct {
		RunID   string          `json:"run_id"`
		Name    string          `json:"name"`
		Payload json.RawMessage `json:"payload"`
	}
	if json.Unmarshal(c.Input, &in) != nil || in.RunID != e.p.RunID {
		return
	}
	if e.selfSent == nil {
		e.selfSent = map[string][]selfSignal{}
	}
	e.selfSent[in.Name] = append(e.selfSent[in.Name], selfSignal{payload: in.Payload, sent: sent})
}

// allowed reports whether an --allow-write token names the write c.
func (e *engine) allowed(c flow.Call) bool {
	if c.Token != "" && e.allow[c.Token] {
		return true
	}
	if c.Kind == flow.KindStep && c.Name != "" {
		if e.allow["step:"+c.Name] {
			return true
		}
		for _, id := range e.steps[c.Name] {
			if e.allow["step:"+id] {
				return true
			}
		}
	}
	return false
}

func (e *engine) supplied(c flow.Call) (json.RawMessage, bool) {
	if a, ok := e.p.Supply.Calls[c.ID()]; ok {
		e.useSupply("calls:" + c.ID())
		return a, true
	}
	if c.Kind == flow.KindTool {
		if a, ok := e.p.Supply.Tools[c.Name]; ok {
			e.useSupply("tools:" + c.Name)
			return a, true
		}
	}
	return nil, false
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

// llmRef is the outcome's llm_ref.
func (e *engine) llmRef() *string {
	if e.p.LLMRef == "" {
		return nil
	}
	ref := e.p.LLMRef
	return &ref
}

// outcomeValue is a call's result, else its error.
func outcomeValue(r bundle.Result) json.RawMessage {
	if r.Error != nil {
		return r.Error
	}
	return r.Result
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

// runModel is the model id the run's model calls use; "" leaves each
// call's own (the agent's default, or what the request names). It is
// Options.Model when set. Else a case replays with what it recorded when
// the model was chosen for the recorded run, not by the code: when the
// recording's run:submitted request asked for a model (a case run's
// options.model, then saved) and the manifest's recorded_config.model is
// that model, the run's model calls use it too, as --model would make
// them, without counting the model as a changed axis. Decision: a model
// the code chose (the agent's default) is not carried over, so that a
// change of the default in code still shows as a divergence at $.model;
// and a recording whose kept model calls used several models keeps each
// call's own, since one override would change the others.
func (e *engine) runModel() string {
	if e.p.Model != "" {
		return e.p.Model
	}
	var rc struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(e.p.Bundle.Manifest.RecordedConfig, &rc)
	if e.target.Kind != bundle.KindAgent || rc.Model == "" || rc.Model == e.target.Model || e.requestedModel() != rc.Model {
		return ""
	}
	for _, c := range e.prefix {
		if c.ref.Kind == flow.KindModel && c.input != nil && modelOf(c.input) != rc.Model {
			return ""
		}
	}
	for _, r := range e.p.Bundle.Results {
		if flow.CallKind(r.Kind) == flow.KindModel && len(r.Input) > 0 && modelOf(r.Input) != rc.Model {
			return ""
		}
	}
	return rc.Model
}

// requestedModel is the model the recorded run was asked to use: the
// options.model of the request its run:submitted event keeps (a worker's
// run_case body), "" when none.
func (e *engine) requestedModel() string {
	for _, raw := range e.p.Bundle.History {
		var ev struct {
			Kind    string `json:"kind"`
			Request struct {
				Options struct {
					Model string `json:"model"`
				} `json:"options"`
			} `json:"request"`
		}
		if json.Unmarshal(raw, &ev) == nil && ev.Kind == string(runevent.RunSubmitted) {
			return ev.Request.Options.Model
		}
	}
	return ""
}

// recordedInput is the recorded input of call k: its call:start's in the
// history, else the one its result keeps (a call after the fork), else nil.
func (e *engine) recordedInput(k callKey) json.RawMessage {
	if in, ok := e.inputs[k]; ok {
		return in
	}
	if i, ok := e.index[k]; ok {
		return e.p.Bundle.Results[i].Input
	}
	return nil
}

// recordedSystem is the system prompt of the recording's first model call
// (model:0, else the lowest key) whose input it keeps.
func (e *engine) recordedSystem() (string, bool) {
	first := -1
	var input json.RawMessage
	for k := range e.index {
		if k.kind != flow.KindModel {
			continue
		}
		n, err := strconv.Atoi(k.key)
		if in := e.recordedInput(k); err == nil && in != nil && (first < 0 || n < first) {
			first, input = n, in
		}
	}
	var req struct {
		System *string `json:"system"`
	}
	if first < 0 || json.Unmarshal(input, &req) != nil || req.System == nil {
		return "", false
	}
	return *req.System, true
}

// sameJSON says that two JSON values are equal field by field.
func sameJSON(a, b json.RawMessage) bool {
	d := DiffInputs(a, b)
	return d != nil && len(d.Paths()) == 0
}

// maxTokensOf is a model call's answer bound.
func maxTokensOf(c flow.Call) int64 {
	if c.Model != nil && c.Model.MaxTokens > 0 {
		return c.Model.MaxTokens
	}
	return flow.DefaultMaxTokens
}

// fmtUSD formats dollars as USD's JSON does.
func fmtUSD(v float64) string {
	raw, _ := USD(v).MarshalJSON()
	return string(raw)
}

func modelOf(input json.RawMessage) string {
	var in struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(input, &in)
	return in.Model
}

// callLineTimeout bounds the append of one case:call line.
const callLineTimeout = 10 * time.Second

// Observe implements flow.Observer: it counts spend and writes the call
// line of each new post-fork call.
func (e *engine) Observe(ctx context.Context, o flow.Observation) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := o.Call
	if o.Resolution.Action == flow.ActLive && c.Kind == flow.KindModel {
		delete(e.reserved, c.ID())
		e.spendLocked(c, o.Record)
	}
	e.noteSelfSignal(c, o.Record, o.Resolution.Action == flow.ActLive)
	if !e.p.FromStart && c.Seq < len(e.prefix) {
		return
	}
	prov := o.Resolution.Provenance
	e.counts[prov]++
	if (prov == ProvLive || prov == ProvChanged) && c.Effect != flow.Pure {
		e.liveCalls++
	}
	if prov == ProvChanged {
		e.changed = append(e.changed, c.ID())
	}
	line := CallLine{Type: "call", Seq: c.Seq, Kind: string(c.Kind), Key: c.Key, Effect: string(c.Effect),
		Fingerprint: c.Fingerprint, Provenance: prov}
	if d, ok := e.pending[c.ID()]; ok && prov == ProvChanged {
		delete(e.pending, c.ID())
		k := keyOf(c.CallRef)
		recorded := e.p.Bundle.Results[e.index[k]]
		e.addChange(d, explain.Call{ID: d.Call, Input: c.Input, RecordedInput: e.recordedInput(k),
			Result: outcomeValue(o.Record), RecordedResult: outcomeValue(recorded)})
		line.Change = d
	}
	if e.p.Values {
		line.Result, line.Error = o.Record.Result, o.Record.Error
	}
	e.calls = append(e.calls, line)
	// e.event is reused (under e.mu): a Log does not keep a Batch's slice.
	now := time.Now()
	e.event[0] = callLineEvent(line, now.UTC())
	// A failed case:call append does not stop the run (the call itself is
	// journaled); Run returns the first failure.
	if seq, err := e.p.Log.Append(e.lineContext(ctx, now), e.p.RunID, flow.Batch{Target: e.p.Target, Events: e.event[:]}); err != nil && e.callLineErr == nil {
		e.callLineErr = err
	} else if err == nil {
		e.noteSeq(seq)
	}
	e.event[0] = flow.Event{}
}

// lineContext returns the context of a case:call append made at now: ctx
// without its cancellation, with a deadline between callLineTimeout/2 and
// callLineTimeout away. Consecutive lines under the same ctx share one
// (a timer per line cost more than the line); Run releases the last.
func (e *engine) lineContext(ctx context.Context, now time.Time) context.Context {
	if e.line.ctx == nil || e.line.parent != ctx || e.line.deadline.Sub(now) < callLineTimeout/2 {
		e.stopLineContext()
		e.line.parent, e.line.deadline = ctx, now.Add(callLineTimeout)
		e.line.ctx, e.line.cancel = context.WithDeadline(context.WithoutCancel(ctx), e.line.deadline)
	}
	return e.line.ctx
}

// stopLineContext releases the context lineContext made last.
func (e *engine) stopLineContext() {
	if e.line.cancel != nil {
		e.line.cancel()
	}
	e.line = lineCtx{}
}

// lineCtx is the context case:call appends share.
type lineCtx struct {
	parent, ctx context.Context
	cancel      context.CancelFunc
	deadline    time.Time
}

func (e *engine) spendLocked(c flow.Call, rec bundle.Result) {
	var resp flow.ModelResponse
	model := modelOf(c.Input)
	price, ok := e.prices[model]
	if rec.Result == nil || json.Unmarshal(rec.Result, &resp) != nil || resp.Usage == nil || !ok {
		if e.unobservable == "" && rec.Error == nil {
			e.unobservable = c.ID()
		}
		return
	}
	e.cost += price.Cost(*resp.Usage)
}

// lineExtra turns a line into the fields of its journal event: every field
// but "type"; for a call line the identity goes under "call" (the event's
// own "kind" is case:call).
func lineExtra(v any, call bool) map[string]json.RawMessage {
	raw, _ := json.Marshal(v)
	var m map[string]json.RawMessage
	_ = json.Unmarshal(raw, &m)
	delete(m, "type")
	if call {
		ref, _ := json.Marshal(map[string]json.RawMessage{"kind": m["kind"], "key": m["key"], "fingerprint": m["fingerprint"], "effect": m["effect"]})
		for _, k := range []string{"kind", "key", "fingerprint", "effect"} {
			delete(m, k)
		}
		m["call"] = ref
	}
	return m
}

// callLineEvent is the case:call event of line written at at: the call,
// provenance and seq in the event's typed fields (no map, no JSON built
// per call), or, for a line with values or a change (or without a provenance), every
// field through lineExtra. Both give the same bytes for the same line
// (TestCallLineEventBytes).
func callLineEvent(line CallLine, at time.Time) flow.Event {
	if len(line.Result) > 0 || len(line.Error) > 0 || line.Provenance == "" || line.Change != nil {
		return flow.Event{Kind: runevent.CaseCall, At: at, Extra: lineExtra(line, true)}
	}
	return flow.Event{Kind: runevent.CaseCall, At: at, CallSeq: int64(line.Seq), Provenance: line.Provenance,
		Call: &flow.CallRef{Kind: flow.CallKind(line.Kind), Key: line.Key, Fingerprint: line.Fingerprint, Effect: flow.Effect(line.Effect)}}
}

// outcomeLocked builds the outcome line from the terminal event (or, for a
// suspended run, the runtime's outcome).
func (e *engine) outcomeLocked(term flow.Event, out flow.Outcome) Outcome {
	o := Outcome{Type: "outcome", RunID: e.p.RunID, Target: e.p.Target, Status: out.Status,
		Provenance: maps2(e.counts), PrefixCalls: e.prefixDone, ChangedCalls: slices.Clone(e.changed),
		LiveCalls: e.liveCalls, CostUSD: USD(e.cost), LLMRef: e.llmRef(), CostObservable: e.unobservable == "",
		CodeVersion: CodeVersions{Recorded: e.p.Bundle.Manifest.CodeVersion, Current: e.target.CodeVersion},
		FixtureHash: e.p.FixtureHash, LastSeq: out.LastSeq}
	switch term.Kind {
	case runevent.RunComplete:
		o.Status = flow.StatusComplete
		if e.p.Values {
			o.Result = term.Result
		}
	case runevent.RunError:
		o.Status = flow.StatusError
		o.Code, o.Message = string(term.Code), term.Message
		o.StopKey, o.StopToken = nullable(term.StopKey), nullable(term.StopToken)
		if term.Code == messages.ReplayDiverged {
			o.Reason = e.reason
		}
		if term.Code == messages.PrefixDiverged || term.Code == messages.ReplayDiverged {
			o.Divergence = e.divergence
		}
	case runevent.RunCancelled:
		o.Status = flow.StatusCancelled
		o.Code = string(messages.Cancelled)
	}
	if e.p.ReplayOnly {
		keys := e.unconsumedLocked()
		o.UnconsumedKeys = &keys
	}
	o.UnusedSupply = unusedSupply(e.p.Supply, e.usedSupply)
	o.Changes = append([]ChangeRef{}, e.changes...)
	slices.SortStableFunc(o.Changes, func(a, b ChangeRef) int { return a.Seq - b.Seq })
	if len(o.Changes) > 0 {
		o.Cause = o.Changes[0].Call
	}
	o.ChangedAxes = slices.Clone(e.axes)
	if len(e.usedSupply) > 0 {
		o.ChangedAxes = append(o.ChangedAxes, AxisSuppliedAnswers)
	}
	return o
}

func maps2(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func nullable(s string) json.RawMessage {
	if s == "" {
		return json.RawMessage("null")
	}
	raw, _ := json.Marshal(s)
	return raw
}

// unconsumedLocked lists the recorded post-fork calls the run never made.
func (e *engine) unconsumedLocked() []string {
	var keys []string
	for k, i := range e.index {
		if !e.consumed[i] {
			keys = append(keys, string(k.kind)+":"+k.key)
		}
	}
	slices.Sort(keys)
	if keys == nil {
		keys = []string{}
	}
	return keys
}

// caseLog wraps the run's journal: before the case run's terminal event it
// checks that the whole prefix was consumed (else the run ends with
// prefix_diverged), adds the divergence data and writes case:outcome.
type caseLog struct {
	flow.Log
	e *engine
}

// Append implements flow.Log, noting the case run's last run_seq so that
// its case:outcome can carry the run's real last_seq.
func (l *caseLog) Append(ctx context.Context, runID string, b flow.Batch) (int64, error) {
	seq, err := l.Log.Append(ctx, runID, b)
	if err == nil && runID == l.e.p.RunID {
		l.e.noteSeq(seq)
	}
	return seq, err
}

// Finish implements flow.Log.
func (l *caseLog) Finish(ctx context.Context, runID string, ev flow.Event) (int64, error) {
	e := l.e
	if runID != e.p.RunID {
		return l.Log.Finish(ctx, runID, ev)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if ev.Kind == runevent.RunComplete && !e.p.FromStart && e.prefixDone < len(e.prefix) {
		rec := e.prefix[e.prefixDone]
		e.divergence = &Divergence{Seq: e.prefixDone, Call: "", RecordedCall: rec.ref.ID(), RecordedFingerprint: rec.ref.Fingerprint}
		ev = flow.Event{Kind: runevent.RunError, At: ev.At, Code: messages.PrefixDiverged, StopKey: rec.ref.ID(),
			Message: fmt.Sprintf("the target ended after %d of the %d prefix calls; the recording has %s next", e.prefixDone, len(e.prefix), rec.ref.ID())}
	}
	if ev.Kind == runevent.RunError {
		if ev.Code == messages.ReplayDiverged && e.reason != "" {
			ev.Extra = map[string]json.RawMessage{"reason": nullable(e.reason)}
		}
		if (ev.Code == messages.ReplayDiverged || ev.Code == messages.PrefixDiverged) && e.divergence != nil {
			if ev.Extra == nil {
				ev.Extra = map[string]json.RawMessage{}
			}
			ev.Extra["divergence"], _ = json.Marshal(e.divergence)
		}
	}
	o := e.outcomeLocked(ev, flow.Outcome{})
	if e.priorOutcome != nil {
		// The run wrote its case:outcome before a crash cut it off from its
		// terminal event: keep that one, write only the terminal event.
		o = *e.priorOutcome
	} else {
		// case:outcome, then the terminal event: the run's last two.
		o.LastSeq = e.lastSeq.Load() + 2
		co := flow.Event{Kind: runevent.CaseOutcome, At: ev.At, Extra: lineExtra(o, false)}
		seq, err := l.Log.Append(ctx, runID, flow.Batch{Target: e.p.Target, Events: []flow.Event{co}})
		if err != nil {
			return 0, err
		}
		e.noteSeq(seq)
	}
	seq, err := l.Log.Finish(ctx, runID, ev)
	if err != nil {
		return 0, err
	}
	o.LastSeq = seq
	e.outcome = &o
	return seq, nil
}

// childResolver resolves the calls of child runs: always live (the parent's
// ladder allowed the child call), adding their model spend to the cost.
type childResolver struct{ e *engine }

// Resolve implements flow.Resolver.
func (childResolver) Resolve(context.Context, flow.Call) (flow.Resolution, error) {
	return flow.Live(), nil
}

// Observe implements flow.Observer: a child's model spend counts, and so
// does a signal it sends the case run.
func (r childResolver) Observe(_ context.Context, o flow.Observation) {
	switch o.Call.Kind {
	case flow.KindModel:
		r.e.mu.Lock()
		defer r.e.mu.Unlock()
		r.e.spendLocked(o.Call, o.Record)
	case flow.KindStep:
		if strings.HasPrefix(o.Call.Key, "sigsend:") {
			r.e.mu.Lock()
			defer r.e.mu.Unlock()
			r.e.noteSelfSignal(o.Call, o.Record, true)
		}
	}
}

// JumpClock is the clock of a case run: it reads its base clock plus the
// time it has jumped, and SleepUntil jumps to the wake time at once, so a
// durable sleep advances the run's clock (and now) without waiting.
type JumpClock struct {
	// Base is the underlying clock.
	Base flow.Clock

	mu     sync.Mutex
	offset time.Duration
}

var _ flow.Clock = (*JumpClock)(nil)

// Now implements flow.Clock.
func (c *JumpClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Base.Now().Add(c.offset)
}

// SleepUntil implements flow.Clock without waiting.
func (c *JumpClock) SleepUntil(ctx context.Context, t time.Time) error {
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := t.Sub(c.Base.Now().Add(c.offset)); d > 0 {
		c.offset += d
	}
	return nil
}
