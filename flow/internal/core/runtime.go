package core

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/bundle/volatile"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
)

// Config configures a Runtime. Registry and Log are required; every other
// field has a default.
type Config struct {
	// Registry holds the targets the runtime can run.
	Registry *Registry
	// Log holds the runs' journals.
	Log Log
	// Resolver decides how calls are resolved; default LiveResolver. Child
	// runs (Child, Gather, sub-agent tools) always use this resolver.
	Resolver Resolver
	// Models is the model client of agents that have none of their own.
	Models ModelClient
	// Signals delivers signals (SendSignal, ReceiveSignal). Signals,
	// Interrupts and Streams left nil share one new MemInbox.
	Signals Signals
	// Interrupts holds the answers to interrupts (Interrupt).
	Interrupts Interrupts
	// Streams reads external streams (ReadStream).
	Streams Streams
	// Clock is the runs' clock; default SystemClock.
	Clock Clock
	// Random returns live random numbers in [0, 1); default math/rand/v2.
	Random func() float64
	// FinishTimeout bounds writes that must happen after a run's context is
	// done (the terminal event of a cancelled run, the call:done of a call
	// that finished as the context ended); default 5s.
	FinishTimeout time.Duration
}

// Runtime executes targets durably: every call is journaled in the Log before
// the target sees its result, and a run that stopped without a terminal
// event resumes from its journal when it is run again.
type Runtime struct {
	cfg Config
}

// NewRuntime returns a Runtime for cfg.
func NewRuntime(cfg Config) (*Runtime, error) {
	if cfg.Registry == nil {
		return nil, errors.New("flow: Config.Registry is required")
	}
	if cfg.Log == nil {
		return nil, errors.New("flow: Config.Log is required")
	}
	if cfg.Signals == nil || cfg.Interrupts == nil || cfg.Streams == nil {
		inbox := NewMemInbox()
		cfg.Signals = cmp.Or[Signals](cfg.Signals, inbox)
		cfg.Interrupts = cmp.Or[Interrupts](cfg.Interrupts, inbox)
		cfg.Streams = cmp.Or[Streams](cfg.Streams, inbox)
	}
	cfg.Resolver = cmp.Or[Resolver](cfg.Resolver, LiveResolver{})
	cfg.Clock = cmp.Or[Clock](cfg.Clock, SystemClock{})
	if cfg.Random == nil {
		cfg.Random = rand.Float64
	}
	cfg.FinishTimeout = cmp.Or(cfg.FinishTimeout, 5*time.Second)
	return &Runtime{cfg: cfg}, nil
}

// Registry returns the runtime's registry.
func (rt *Runtime) Registry() *Registry { return rt.cfg.Registry }

// RunParams names the run to execute and how.
type RunParams struct {
	// RunID names the run; required. A run id whose journal has events is
	// resumed; one whose journal has a terminal event is not run again (Run
	// returns its recorded outcome).
	RunID string
	// Target is the registered target's name; required.
	Target string
	// Inputs override the target's defaults, by input name (raw JSON
	// values). They are used when the run starts; a resumed run uses the
	// inputs of its run:start event and ignores these.
	Inputs map[string]json.RawMessage
	// Resolver overrides Config.Resolver for this run (not its children).
	Resolver Resolver
	// Models overrides the model client for the model calls of this run and
	// of its children (child runs, gathers and sub-agent tools).
	Models ModelClient
	// Model, when set, replaces the model id of every model call of this
	// run (--model).
	Model string
	// System, when set, replaces the system prompt of every model call of
	// this run (--prompt-file).
	System string
	// Clock overrides Config.Clock for this run and its children.
	Clock Clock
	// Deps is the dependency set the run's steps and tools read with Dep
	// (and its children's, through their context); nil for none.
	Deps Deps
	// Recorded, when set, is the run's journal as the caller loaded it
	// from Config.Log just before, with nothing written to the run since:
	// Run starts from it instead of loading the run again.
	Recorded *Recorded
}

// Status is how a run ended.
type Status string

// The statuses of an Outcome.
const (
	// StatusComplete: run:complete; Outcome.Result is the result.
	StatusComplete Status = "complete"
	// StatusError: run:error; Outcome.Code, Message, StopKey, StopToken.
	StatusError Status = "error"
	// StatusCancelled: run:cancelled.
	StatusCancelled Status = "cancelled"
	// StatusSuspended: the run waits for an answer from outside (an
	// interrupt); no terminal event was written and running it again
	// resumes it.
	StatusSuspended Status = "suspended"
)

// Outcome is how a run ended.
type Outcome struct {
	// RunID is the run's id.
	RunID string
	// Status is how the run ended.
	Status Status
	// Result is the target's result, for StatusComplete.
	Result json.RawMessage
	// Code is the reason code, for StatusError (and messages.Cancelled for
	// StatusCancelled).
	Code messages.Code
	// Message, StopKey and StopToken are the run:error's other fields
	// (empty StopKey and StopToken are null in the event).
	Message   string
	StopKey   string // see Message
	StopToken string // see Message
	// SuspendedAt is the identity of the call the run waits on, for
	// StatusSuspended.
	SuspendedAt string
	// LastSeq is the run's last run_seq.
	LastSeq int64
	// Terminal is the terminal event; nil for StatusSuspended.
	Terminal *Event
}

// Err returns the outcome as an error: nil when the run completed, a
// *StopError for StatusError, and errors wrapping ErrRunCancelled or
// ErrSuspended for the other statuses.
func (o Outcome) Err() error {
	switch o.Status {
	case StatusComplete:
		return nil
	case StatusError:
		return &StopError{Code: o.Code, Message: o.Message, StopKey: o.StopKey, StopToken: o.StopToken}
	case StatusCancelled:
		return fmt.Errorf("run %s: %w", o.RunID, ErrRunCancelled)
	case StatusSuspended:
		return fmt.Errorf("run %s at %s: %w", o.RunID, o.SuspendedAt, ErrSuspended)
	}
	return fmt.Errorf("run %s: unknown status %q", o.RunID, o.Status)
}

// Run executes (or resumes) a run of a registered target until it completes,
// fails, is cancelled or suspends, and returns its Outcome.
//
// The error is non-nil only when the run stopped without an outcome: its
// context was done (the run is abandoned as by a crash, with no terminal
// event, and can be resumed; the error wraps context.Cause), or the Log
// failed. Unknown targets give ErrUnknownTarget, bad inputs
// ErrInvalidInputs, both before anything is journaled. To end a run with
// run:cancelled, cancel its context with cause ErrRunCancelled.
func (rt *Runtime) Run(ctx context.Context, p RunParams) (Outcome, error) {
	if p.RunID == "" {
		return Outcome{}, errors.New("flow: RunParams.RunID is required")
	}
	t, err := rt.cfg.Registry.get(p.Target)
	if err != nil {
		return Outcome{}, err
	}
	return rt.execute(ctx, t, p)
}

type recordedCall struct {
	ref    CallRef
	wakeAt time.Time
}

// run is the state of one executing run.
type run struct {
	rt       *Runtime
	id       string
	t        *target
	resolver Resolver
	recorded RecordedInputs // the resolver, when it is one; else nil
	models   ModelClient
	override ModelClient // RunParams.Models, which the run's children use too
	model    string
	system   string
	clock    Clock

	mu          sync.Mutex // serializes calls
	calls       []recordedCall
	results     map[string]bundle.Result
	pos         int
	counters    map[string]*int
	seen        map[string]bool
	lastSeq     int64
	events      [3]Event         // the batch of a call's append (no allocation per call)
	refs        []CallRef        // the chunk newRefLocked takes the calls' refs from
	records     [1]bundle.Result // see events
	stop        *StopError       // the run stopped with a reason code
	suspendedAt string           // the call the run waits on
	abandoned   error            // the run's context ended
	fatal       error            // the Log failed
}

// newRefLocked returns a copy of ref that outlives the call (its events
// point to it), taken from a chunk of 64 so that a call allocates none.
func (r *run) newRefLocked(ref CallRef) *CallRef {
	if len(r.refs) == cap(r.refs) {
		r.refs = make([]CallRef, 0, 64)
	}
	r.refs = append(r.refs, ref)
	return &r.refs[len(r.refs)-1]
}

type runKey struct{}

// runFrom returns the run of a target's context.
func runFrom(ctx context.Context) (*run, error) {
	r, _ := ctx.Value(runKey{}).(*run)
	if r == nil {
		return nil, ErrNoRun
	}
	return r, nil
}

// RunID returns the id of the run whose target's context ctx is, or "".
func RunID(ctx context.Context) string {
	if r, err := runFrom(ctx); err == nil {
		return r.id
	}
	return ""
}

func (rt *Runtime) execute(ctx context.Context, t *target, p RunParams) (Outcome, error) {
	var rec Recorded
	if p.Recorded != nil {
		rec = *p.Recorded
	} else {
		var err error
		if rec, err = rt.cfg.Log.Load(ctx, p.RunID); err != nil {
			return Outcome{RunID: p.RunID}, fmt.Errorf("flow: load run %s: %w", p.RunID, err)
		}
	}
	r := &run{
		rt:       rt,
		id:       p.RunID,
		t:        t,
		resolver: cmp.Or(p.Resolver, rt.cfg.Resolver),
		models:   p.Models,
		override: p.Models,
		model:    p.Model,
		system:   p.System,
		clock:    cmp.Or(p.Clock, rt.cfg.Clock),
		results:  make(map[string]bundle.Result, len(rec.Results)),
		counters: make(map[string]*int),
		seen:     make(map[string]bool),
	}
	if r.models == nil {
		r.models = cmp.Or(t.client, rt.cfg.Models)
	}
	r.recorded, _ = r.resolver.(RecordedInputs)
	var start *Event
	for i := range rec.Events {
		ev := &rec.Events[i]
		r.lastSeq = max(r.lastSeq, ev.RunSeq)
		switch {
		case ev.Kind == runevent.RunStart:
			start = ev
		case ev.Kind == runevent.CallStart && ev.Call != nil:
			r.calls = append(r.calls, recordedCall{ref: *ev.Call, wakeAt: ev.WakeAt})
		case ev.Kind.Terminal():
			return outcomeOf(p.RunID, *ev), nil
		}
	}
	for _, res := range rec.Results {
		r.results[res.Kind+":"+res.Key] = res
	}

	var in any
	if start == nil {
		inputs, decoded, err := t.inputs(p.Inputs)
		if err != nil {
			return Outcome{RunID: p.RunID, LastSeq: r.lastSeq}, err
		}
		in = decoded
		ev := Event{Kind: runevent.RunStart, At: r.now(), Inputs: inputs, CodeVersion: t.info.CodeVersion}
		r.mu.Lock()
		err = r.appendLocked(ctx, ctx, Batch{Events: []Event{ev}, Deferrable: true})
		r.mu.Unlock()
		if err != nil {
			return r.abandonedOutcome(ctx, err)
		}
	} else {
		decoded, err := t.decode(start.Inputs)
		if err != nil {
			return r.finish(ctx, nil, Stopf(messages.RuntimeError,
				"the inputs recorded on run:start do not decode into %s's inputs: %v", t.info.Name, err))
		}
		in = decoded
	}

	result, err := r.invoke(context.WithValue(withDeps(ctx, p.Deps), runKey{}, r), in)
	return r.finish(ctx, result, err)
}

// invoke runs the target's body, turning a panic into an error.
func (r *run) invoke(ctx context.Context, in any) (result any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return r.t.run(ctx, in)
}

func (r *run) now() time.Time { return r.clock.Now().UTC() }

// finish ends the run after its body returned: it writes the terminal event
// (unless the run was abandoned or suspended) and returns the outcome.
func (r *run) finish(ctx context.Context, result any, err error) (Outcome, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.abandoned != nil || (err != nil && ctx.Err() != nil) {
		if errors.Is(context.Cause(ctx), ErrRunCancelled) {
			return r.terminalLocked(ctx, Event{Kind: runevent.RunCancelled, At: r.now()})
		}
		cause := r.abandoned
		if cause == nil {
			cause = fmt.Errorf("flow: run %s abandoned: %w", r.id, context.Cause(ctx))
		}
		return Outcome{RunID: r.id, LastSeq: r.lastSeq}, cause
	}
	if r.fatal != nil {
		return Outcome{RunID: r.id, LastSeq: r.lastSeq}, r.fatal
	}
	if r.suspendedAt != "" || errors.Is(err, ErrSuspended) {
		return Outcome{RunID: r.id, Status: StatusSuspended, SuspendedAt: r.suspendedAt, LastSeq: r.lastSeq}, nil
	}
	stop := r.stop
	if stop == nil && r.pos < len(r.calls) {
		rec := r.calls[r.pos]
		stop = &StopError{
			Code: messages.ReplayInputChanged,
			Message: fmt.Sprintf("the journal recorded call %d %s (fingerprint %s) but the resumed run ended without making it",
				r.pos, rec.ref.ID(), rec.ref.Fingerprint),
			StopKey: rec.ref.ID(),
		}
	}
	if stop == nil && err != nil && !errors.As(err, &stop) {
		stop = &StopError{Code: messages.RuntimeError, Message: err.Error()}
	}
	if stop == nil {
		raw, merr := marshalCanonical(result)
		if merr != nil {
			stop = Stopf(messages.RuntimeError, "the result of %s does not encode as JSON: %v", r.t.info.Name, merr)
		} else {
			return r.terminalLocked(ctx, Event{Kind: runevent.RunComplete, At: r.now(), Result: raw})
		}
	}
	return r.terminalLocked(ctx, Event{Kind: runevent.RunError, At: r.now(), Code: stop.Code,
		Message: stop.Message, StopKey: stop.StopKey, StopToken: stop.StopToken})
}

func (r *run) terminalLocked(ctx context.Context, ev Event) (Outcome, error) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.rt.cfg.FinishTimeout)
	defer cancel()
	seq, err := r.rt.cfg.Log.Finish(wctx, r.id, ev)
	if err != nil {
		return Outcome{RunID: r.id, LastSeq: r.lastSeq}, fmt.Errorf("flow: finish run %s: %w", r.id, err)
	}
	ev.RunSeq = seq
	r.lastSeq = seq
	return outcomeOf(r.id, ev), nil
}

func (r *run) abandonedOutcome(ctx context.Context, err error) (Outcome, error) {
	if ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrRunCancelled) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.terminalLocked(ctx, Event{Kind: runevent.RunCancelled, At: r.now()})
	}
	return Outcome{RunID: r.id, LastSeq: r.lastSeq}, err
}

// outcomeOf reads an outcome from a terminal event.
func outcomeOf(runID string, ev Event) Outcome {
	o := Outcome{RunID: runID, LastSeq: ev.RunSeq, Terminal: &ev}
	switch ev.Kind {
	case runevent.RunComplete:
		o.Status = StatusComplete
		o.Result = ev.Result
	case runevent.RunError:
		o.Status = StatusError
		o.Code, o.Message, o.StopKey, o.StopToken = ev.Code, ev.Message, ev.StopKey, ev.StopToken
	case runevent.RunCancelled:
		o.Status = StatusCancelled
		o.Code = messages.Cancelled
	}
	return o
}

// callSpec describes a call before it gets its key.
type callSpec struct {
	kind CallKind
	// key is a fixed key (a tool-use id, gather:<id>); when empty the key is
	// "<prefix>:<n>" (just "<n>" when bare), n the count of earlier calls
	// with the same counter.
	key     string
	counter string
	prefix  string
	bare    bool
	name    string
	effect  Effect
	input   any
	// token is the --allow-write token; tokenIsKey makes it "step:<key>".
	token      string
	tokenIsKey bool
	// wait, when positive, makes the call wait until wake_at = its start +
	// wait; a resumed call keeps the recorded wake_at.
	wait time.Duration
	// tool is the tool's name for tool calls.
	tool string
	// rules are the call's volatile-field rules (nil: none).
	rules *volatile.Rules
}

// liveFunc runs a call live. ctx carries no run. wakeAt is the end of the
// call's wait (zero without one). It returns the result to encode as JSON,
// or an error: a *StopError stops the run, ErrSuspended suspends it, an
// opError fails it without recording, anything else is recorded as the
// call's error.
type liveFunc func(ctx context.Context, c Call, wakeAt time.Time) (any, error)

// opError is an operational failure of a live call (a child run's journal
// failed): not recorded, the run fails with it.
type opError struct{ err error }

func (e opError) Error() string { return e.err.Error() }
func (e opError) Unwrap() error { return e.err }

// stopf stops the run with a reason code (used by the typed calls for
// misuse, such as an invalid step name).
func (r *run) stopf(code messages.Code, format string, args ...any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.blockedLocked(); err != nil {
		return err
	}
	return r.stopLocked(Stopf(code, format, args...))
}

func (r *run) stopLocked(s *StopError) error {
	if r.stop == nil {
		r.stop = s
	}
	return r.stop
}

func (r *run) abandonLocked(ctx context.Context) error {
	if r.abandoned == nil {
		r.abandoned = fmt.Errorf("flow: run %s abandoned: %w", r.id, context.Cause(ctx))
	}
	return r.abandoned
}

// blockedLocked returns the error every call gets once the run cannot go on.
func (r *run) blockedLocked() error {
	switch {
	case r.abandoned != nil:
		return r.abandoned
	case r.fatal != nil:
		return r.fatal
	case r.stop != nil:
		return r.stop
	case r.suspendedAt != "":
		return fmt.Errorf("%w: waiting on %s", ErrSuspended, r.suspendedAt)
	}
	return nil
}

// appendLocked appends b under wctx; runCtx tells an append that failed
// because the run's context ended from one where the Log failed.
func (r *run) appendLocked(runCtx, wctx context.Context, b Batch) error {
	b.Target = r.t.info.Name
	seq, err := r.rt.cfg.Log.Append(wctx, r.id, b)
	if err != nil {
		if runCtx.Err() != nil {
			return r.abandonLocked(runCtx)
		}
		r.fatal = fmt.Errorf("flow: run %s: append: %w", r.id, err)
		return r.fatal
	}
	r.lastSeq = seq
	return nil
}

// call makes one call: it checks the call against the run's journal,
// resolves it, journals it and hands its result to decode. It returns nil,
// a *CallError (the call's recorded error) or the error that stops the run.
func (r *run) call(ctx context.Context, s callSpec, live liveFunc, decode func(json.RawMessage) error) (err error) {
	in := writeInput(s.input)
	defer in.release()

	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.blockedLocked(); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return r.abandonLocked(ctx)
	}
	c, err := r.newCallLocked(s, &in)
	if err != nil {
		return err
	}
	var trc callTrace
	if parent := trace.SpanFromContext(ctx); parent.IsRecording() {
		ctx = trc.start(ctx, parent, c)
		defer func() { trc.end(err) }()
	}
	// 1. The run's own journal.
	inflight, done, err := r.fromJournalLocked(c, decode)
	if done {
		trc.journaled = true
		return err
	}
	// 2. The resolver.
	res, answer, err := r.resolveLocked(ctx, c, s.kind, decode)
	trc.res = res
	if err != nil {
		return err
	}
	// 3. call:start, unless the journal has it.
	st, err := r.startCallLocked(ctx, c, s, res, inflight)
	if err != nil {
		return err
	}
	// 4. The result.
	result, cerr := answer, res.Error
	if res.Action == ActLive {
		if result, cerr, err = r.runLiveLocked(ctx, c, live, st.wakeAt); err != nil {
			return err
		}
	}
	trc.result = result
	// 5. call:done and the result record.
	return r.doneCallLocked(ctx, c, res, st, result, cerr, decode)
}

// newCallLocked is the identity of the call s makes with input in: its key
// (the next of its counter unless s fixes one), fingerprint, token and
// position. A call whose input does not fingerprint, or a fixed key made
// twice, stops the run.
func (r *run) newCallLocked(s callSpec, in *callInput) (Call, error) {
	key := s.key
	if key == "" {
		next := r.counters[s.counter] // one map operation per call
		if next == nil {
			next = new(int)
			r.counters[s.counter] = next
		}
		n := *next
		*next++
		var b [48]byte // at most one allocation for the key
		buf := b[:0]
		if !s.bare {
			buf = append(append(buf, s.prefix...), ':')
		}
		buf = strconv.AppendInt(buf, int64(n), 10)
		if rec := r.nextKeyLocked(s.kind); string(buf) == rec {
			key = rec // the recording's string: none allocated
		} else {
			key = string(buf)
		}
	}
	c := Call{
		CallRef: CallRef{Kind: s.kind, Key: key, Effect: s.effect},
		RunID:   r.id,
		Name:    s.name,
		Token:   s.token,
		Seq:     r.pos,
	}
	var ferr error
	c.Input, c.Fingerprint, ferr = r.inputLocked(&c, in, s.rules)
	if s.tokenIsKey {
		c.Token = "step:" + key
	}
	if s.kind == KindModel {
		if req, ok := s.input.(ModelRequest); ok {
			c.Model = &req // only a model call pays for the copy
		}
	}
	if ferr != nil {
		return c, r.stopLocked(&StopError{Code: messages.RuntimeError, Message: fmt.Sprintf("call %s: %v", c.ID(), ferr), StopKey: c.ID()})
	}
	// Keys from a counter are unique by construction; only fixed keys
	// (tool-use and gather ids) can repeat.
	if s.key != "" {
		id := c.ID()
		if r.seen[id] {
			return c, r.stopLocked(&StopError{Code: messages.RuntimeError,
				Message: fmt.Sprintf("call %s made twice in one run (tool-use and gather ids must be unique)", id), StopKey: id})
		}
		r.seen[id] = true
	}
	return c, nil
}

// nextKeyLocked is the key the resolver's recording expects next for a
// call of that kind (RecordedInputs.NextKey), "" for none.
func (r *run) nextKeyLocked(kind CallKind) string {
	if r.recorded == nil {
		return ""
	}
	return r.recorded.NextKey(r.pos, kind)
}

// inputLocked returns the input call c keeps and its fingerprint: the
// recording's own when the resolver holds c recorded with this very input
// (RecordedInputs), so that a replayed call hashes nothing, else in's bytes
// copied out of their buffer and hashed under rules. The hash needs the
// call's key, so it is taken under the run's lock: the concurrent calls of
// a Gather hash one at a time.
func (r *run) inputLocked(c *Call, in *callInput, rules *volatile.Rules) (json.RawMessage, string, error) {
	if r.recorded != nil && in.err == nil {
		if input, fp, ok := r.recorded.RecordedInput(c.Seq, c.Kind, c.Key, c.Name); ok && bytes.Equal(input, in.canon) {
			return input[:len(input):len(input)], fp, nil
		}
	}
	return in.keep(rules)
}

// fromJournalLocked checks the call against the run's own journal: a call
// the journal has at its position must be the same (else the run stops
// diverged), and one the journal finished is delivered from it (done).
// inflight is the journal's call:start of a call it did not finish.
func (r *run) fromJournalLocked(c Call, decode func(json.RawMessage) error) (inflight *recordedCall, done bool, err error) {
	if c.Seq >= len(r.calls) {
		r.pos++
		return nil, false, nil
	}
	rec := &r.calls[c.Seq]
	if rec.ref.Kind != c.Kind || rec.ref.Key != c.Key || rec.ref.Fingerprint != c.Fingerprint {
		return nil, true, r.stopLocked(divergence(c, rec.ref))
	}
	r.pos++
	if res, ok := r.results[c.ID()]; ok {
		return nil, true, r.deliverRecorded(c, res, decode)
	}
	return rec, false, nil
}

// resolveLocked asks the resolver how to make the call: live, an answer
// (checked against the call kind's shape, returned as answer) or a stop,
// which stops the run.
func (r *run) resolveLocked(ctx context.Context, c Call, kind CallKind, decode func(json.RawMessage) error) (Resolution, json.RawMessage, error) {
	res, err := r.resolver.Resolve(ctx, c)
	if err != nil {
		if ctx.Err() != nil {
			return res, nil, r.abandonLocked(ctx)
		}
		return res, nil, r.stopLocked(&StopError{Code: messages.RuntimeError, Message: fmt.Sprintf("resolve %s: %v", c.ID(), err), StopKey: c.ID()})
	}
	var answer json.RawMessage
	switch res.Action {
	case ActLive:
	case ActStop:
		stop := Stopf(messages.RuntimeError, "the resolver stopped call %s without a reason", c.ID())
		if res.Stop != nil {
			cp := *res.Stop
			stop = &cp
		}
		if stop.StopKey == "" {
			stop.StopKey = c.ID()
		}
		return res, nil, r.stopLocked(stop)
	case ActAnswer:
		if res.Error == nil {
			answer, err = checkAnswer(kind, res.Result, res.Canonical, decode)
			if err != nil {
				return res, nil, r.stopLocked(&StopError{Code: messages.MissingContext,
					Message: fmt.Sprintf("the answer for %s has the wrong shape: %v", c.ID(), err), StopKey: c.ID()})
			}
		}
	default:
		return res, nil, r.stopLocked(&StopError{Code: messages.RuntimeError, Message: fmt.Sprintf("resolve %s: unknown action %v", c.ID(), res.Action), StopKey: c.ID()})
	}
	return res, answer, nil
}

// callStart is what startCallLocked wrote or staged of a call's start.
type callStart struct {
	ref     *CallRef // one copy of the identity for both events (a Log may keep it)
	startAt time.Time
	wakeAt  time.Time
	nEvents int // call:start events staged in r.events for the call:done append
}

// startCallLocked writes the call's call:start, unless the journal has it:
// at once for a live call, staged in r.events for an answered call, which
// runs nothing between its call:start and its call:done, so that both go
// in one append.
func (r *run) startCallLocked(ctx context.Context, c Call, s callSpec, res Resolution, inflight *recordedCall) (callStart, error) {
	var st callStart
	if s.wait > 0 {
		if inflight != nil && !inflight.wakeAt.IsZero() {
			st.wakeAt = inflight.wakeAt
		} else {
			st.wakeAt = r.now().Add(s.wait)
		}
	}
	st.ref = r.newRefLocked(c.CallRef)
	if inflight != nil {
		return st, nil
	}
	st.startAt = r.now()
	r.events[0] = Event{Kind: runevent.CallStart, At: st.startAt, Call: st.ref, Input: c.Input, WakeAt: st.wakeAt, Tool: s.tool}
	st.nEvents = 1
	if res.Action == ActLive {
		acts := c.Kind == KindModel || c.Effect == Write
		err := r.appendLocked(ctx, ctx, Batch{Events: r.events[:1], Acts: acts})
		r.events[0], st.nEvents = Event{}, 0
		if err != nil {
			return st, err
		}
	}
	return st, nil
}

// runLiveLocked runs a live call: its canonical result, or the call's own
// error (cerr), or the error that stops the run (err).
func (r *run) runLiveLocked(ctx context.Context, c Call, live liveFunc, wakeAt time.Time) (result json.RawMessage, cerr *CallError, err error) {
	out, err := live(context.WithValue(ctx, runKey{}, (*run)(nil)), c, wakeAt)
	var stop *StopError
	var op opError
	switch {
	case err == nil:
		raw, merr := marshalCanonical(out)
		if merr != nil {
			if ctx.Err() != nil {
				return nil, nil, r.abandonLocked(ctx)
			}
			return nil, nil, r.stopLocked(&StopError{Code: messages.RuntimeError,
				Message: fmt.Sprintf("the result of %s does not encode as JSON: %v", c.ID(), merr), StopKey: c.ID()})
		}
		return raw, nil, nil
	case ctx.Err() != nil:
		return nil, nil, r.abandonLocked(ctx)
	case errors.Is(err, ErrSuspended):
		r.suspendedAt = c.ID()
		return nil, nil, fmt.Errorf("%w: waiting on %s", ErrSuspended, c.ID())
	case errors.As(err, &stop):
		cp := *stop
		if cp.StopKey == "" {
			cp.StopKey = c.ID()
		}
		return nil, nil, r.stopLocked(&cp)
	case errors.As(err, &op):
		r.fatal = fmt.Errorf("flow: run %s: %s: %w", r.id, c.ID(), op.err)
		return nil, nil, r.fatal
	}
	return nil, toCallError(err), nil
}

// doneCallLocked writes call:done and the result record (after call:start
// for an answered call, before the resolver's own event when it is an
// Annotator) in one append, tells the resolver (an Observer) and hands the
// result to decode. A live call that finished as the run's
// context ended is still recorded.
func (r *run) doneCallLocked(ctx context.Context, c Call, res Resolution, st callStart, result json.RawMessage, cerr *CallError, decode func(json.RawMessage) error) error {
	record := bundle.Result{Key: c.Key, Kind: string(c.Kind), Fingerprint: c.Fingerprint}
	if cerr != nil {
		raw, _ := json.Marshal(cerr)
		record.Error, _ = canonical(raw)
	} else {
		record.Result = result
	}
	// An answered call's call:done is written in the same instant as its
	// call:start (one append, nothing ran between): it shares the clock
	// reading.
	doneAt := st.startAt
	if res.Action == ActLive || doneAt.IsZero() {
		doneAt = r.now()
	}
	n := st.nEvents
	r.events[n] = Event{Kind: runevent.CallDone, At: doneAt, Call: st.ref, Provenance: res.Provenance}
	n++
	r.records[0] = record
	wctx := ctx
	if res.Action == ActLive {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), r.rt.cfg.FinishTimeout)
		defer cancel()
	} else if ctx.Err() != nil {
		r.events, r.records[0] = [len(r.events)]Event{}, bundle.Result{}
		return r.abandonLocked(ctx)
	}
	o := Observation{Call: c, Resolution: res, Record: record, At: doneAt}
	deferrable := res.Action != ActLive
	if an, ok := r.resolver.(Annotator); ok {
		if ev, urgent, ok := an.Annotate(ctx, o); ok {
			r.events[n] = ev
			n++
			deferrable = deferrable && !urgent
		}
	}
	err := r.appendLocked(ctx, wctx, Batch{Events: r.events[:n], Results: r.records[:1], Deferrable: deferrable})
	r.events, r.records[0] = [len(r.events)]Event{}, bundle.Result{}
	if err != nil {
		return err
	}
	if obs, ok := r.resolver.(Observer); ok {
		obs.Observe(ctx, o)
	}
	if cerr != nil {
		return &CallError{Type: cerr.Type, Message: cerr.Message}
	}
	if res.Action == ActLive {
		if err := decode(result); err != nil {
			return r.stopLocked(&StopError{Code: messages.RuntimeError,
				Message: fmt.Sprintf("the result of %s does not decode: %v", c.ID(), err), StopKey: c.ID()})
		}
	}
	return nil
}

// deliverRecorded hands a result recorded in the run's journal to the target.
func (r *run) deliverRecorded(c Call, res bundle.Result, decode func(json.RawMessage) error) error {
	if res.Error != nil {
		var ce CallError
		if err := json.Unmarshal(res.Error, &ce); err != nil {
			return r.stopLocked(&StopError{Code: messages.RuntimeError,
				Message: fmt.Sprintf("the recorded error of %s does not decode: %v", c.ID(), err), StopKey: c.ID()})
		}
		return &ce
	}
	if err := decode(res.Result); err != nil {
		return r.stopLocked(&StopError{Code: messages.RuntimeError,
			Message: fmt.Sprintf("the recorded result of %s does not decode: %v", c.ID(), err), StopKey: c.ID()})
	}
	return nil
}

// checkAnswer validates a resolver's answer and returns its canonical form;
// an answer the resolver vouches is canonical (Resolution.Canonical) is
// only checked for its shape and decoded.
func checkAnswer(kind CallKind, result json.RawMessage, vouched bool, decode func(json.RawMessage) error) (json.RawMessage, error) {
	if result == nil {
		result = json.RawMessage("null")
	}
	canon := result
	if vouched {
		if err := answerShape(kind, result); err != nil {
			return nil, err
		}
	} else {
		if err := ValidateAnswer(kind, result); err != nil {
			return nil, err
		}
		var err error
		if canon, err = canonical(result); err != nil {
			return nil, err
		}
	}
	if err := decode(canon); err != nil {
		return nil, err
	}
	return canon, nil
}

// divergence is the stop for a resumed run whose call differs from the one
// its journal recorded at the same position.
func divergence(c Call, rec CallRef) *StopError {
	var msg string
	if rec.ID() == c.ID() {
		msg = fmt.Sprintf("call %d %s: the journal recorded fingerprint %s, the resumed run made it with fingerprint %s (input %s)",
			c.Seq, c.ID(), rec.Fingerprint, c.Fingerprint, c.Input)
	} else {
		msg = fmt.Sprintf("call %d: the journal recorded %s (fingerprint %s), the resumed run made %s (fingerprint %s)",
			c.Seq, rec.ID(), rec.Fingerprint, c.ID(), c.Fingerprint)
	}
	return &StopError{Code: messages.ReplayInputChanged, Message: msg, StopKey: c.ID()}
}
