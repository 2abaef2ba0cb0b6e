package core

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pyrula/caseworker/bundle/volatile"
	"github.com/pyrula/caseworker/messages"
)

// decodeInto returns a decoder that sets *dst from a result's JSON, in
// place (no copy of T on the heap); *dst is left zero when it fails.
func decodeInto[T any](dst *T) func(json.RawMessage) error {
	return func(raw json.RawMessage) error {
		if err := unmarshalInto(raw, dst); err != nil {
			var zero T
			*dst = zero
			return err
		}
		return nil
	}
}

func ignoreResult(json.RawMessage) error { return nil }

// keyIndex returns the n of a key "<name>:<n>" or "<n>".
func keyIndex(key string) int {
	n, _ := strconv.Atoi(key[strings.LastIndexByte(key, ':')+1:])
	return n
}

// StepOption configures a step call: a value, not a function, so that
// applying options allocates nothing.
type StepOption struct{ o stepOptions }

type stepOptions struct {
	effect   Effect
	volatile []string // a StepDef's volatile fields; nil when it declares none
}

// applyStepOptions returns the options opts set, a later one over an
// earlier one.
func applyStepOptions(opts []StepOption) stepOptions {
	var o stepOptions
	for _, opt := range opts {
		if opt.o.effect != "" {
			o.effect = opt.o.effect
		}
		if opt.o.volatile != nil {
			o.volatile = opt.o.volatile
		}
	}
	return o
}

// WithEffect declares the step's effect at the call. A step that declares
// none takes the effect its target declared in Steps, else Write; declaring
// one that differs from the target's declaration stops the run with
// runtime_error.
func WithEffect(e Effect) StepOption { return StepOption{stepOptions{effect: e}} }

// Step runs fn(ctx, input) as the step name, key "<name>:<n>" for the n-th
// (0-based) call of that name in the run. Its fingerprint is that of input
// without the fields the target declares volatile for the step;
// its result must encode as JSON, and the target receives it decoded from the
// JSON that was journaled. fn's context carries no run: calls made inside fn
// fail with ErrNoRun. An error from fn is recorded and returned as a
// *CallError.
func Step[I, O any](ctx context.Context, name string, input I, fn func(ctx context.Context, in I) (O, error), opts ...StepOption) (O, error) {
	var out O
	r, err := runFrom(ctx)
	if err != nil {
		return out, err
	}
	if err := checkStepName(name); err != nil {
		return out, r.stopf(messages.RuntimeError, "%v", err)
	}
	o := applyStepOptions(opts)
	effect := Write
	si := r.t.step(name)
	declared, isDeclared := si.effect, si.declared
	switch {
	case o.effect != "" && !o.effect.Valid():
		return out, r.stopf(messages.RuntimeError, "step %s: effect %q is not read, write or pure", name, o.effect)
	case o.effect != "" && isDeclared && o.effect != declared:
		return out, r.stopf(messages.RuntimeError, "step %s: effect %s at the call, but %s declared %s", name, o.effect, r.t.info.Name, declared)
	case o.effect != "":
		effect = o.effect
	case isDeclared:
		effect = declared
	}
	rules := si.rules
	if o.volatile != nil && !slices.Equal(o.volatile, rules.Spec().Fields) {
		if !isDeclared {
			return out, r.stopf(messages.RuntimeError, "step %s declares volatile fields %v but %s does not declare the step: put it in the target's Steps, so that its rules are recorded",
				name, o.volatile, r.t.info.Name)
		}
		return out, r.stopf(messages.RuntimeError, "step %s: volatile fields %v at the call, but %s declared %v",
			name, o.volatile, r.t.info.Name, rules.Spec().Fields)
	}
	s := callSpec{kind: KindStep, counter: si.token, prefix: name, name: name,
		effect: effect, input: input, token: si.token, rules: rules}
	err = r.call(ctx, s, func(ctx context.Context, _ Call, _ time.Time) (any, error) {
		return fn(ctx, input)
	}, decodeInto(&out))
	return out, err
}

// StepDef is a step defined once with its name, effect and function, so the
// same definition serves calls (Call) and registration (it is a Decl: put it
// in the target's Steps).
type StepDef[I, O any] struct {
	name     string
	effect   Effect
	fn       func(context.Context, I) (O, error)
	volatile []string // sorted (volatile.SortFields)
}

// DefineStep returns a step definition.
func DefineStep[I, O any](name string, effect Effect, fn func(ctx context.Context, in I) (O, error)) StepDef[I, O] {
	return StepDef[I, O]{name: name, effect: effect, fn: fn}
}

// Volatile returns a copy of the step whose input fields at paths do not
// count in its calls' fingerprints: a request id, a timestamp. A path is
// dot-separated object keys, "[]" for every element of an array and "*"
// for every member of an object ("request_id", "meta.ts",
// "items[].trace_id"). Registration checks the paths and records them in
// registration.volatile (so put the step in the target's Steps); the
// call's recorded input keeps the real values.
func (s StepDef[I, O]) Volatile(paths ...string) StepDef[I, O] {
	s.volatile = volatile.SortFields(append(slices.Clone(s.volatile), paths...))
	return s
}

// Call runs the step (see Step).
func (s StepDef[I, O]) Call(ctx context.Context, input I) (O, error) {
	if s.volatile != nil {
		return Step(ctx, s.name, input, s.fn, WithEffect(s.effect), withVolatile(s.volatile))
	}
	return Step(ctx, s.name, input, s.fn, WithEffect(s.effect))
}

// withVolatile passes a StepDef's volatile fields to Step, which checks
// them against the target's declaration.
func withVolatile(paths []string) StepOption {
	return StepOption{stepOptions{volatile: paths}}
}

// Name returns the step's name.
func (s StepDef[I, O]) Name() string { return s.name }

func (s StepDef[I, O]) declaration() declaration {
	return declaration{name: s.name, effect: s.effect, volatile: s.volatile}
}

// sleepInput is a sleep's input: {"seconds": d}.
type sleepInput struct {
	Seconds float64 `json:"seconds"`
}

// Sleep is a durable timer, key "<n>", effect pure, input {"seconds": d}.
// Its call:start records wake_at, the time it ends; a live run waits until
// then, and a run resumed after a crash during the sleep waits only what is
// left. Its result is null.
func Sleep(ctx context.Context, d time.Duration) error {
	r, err := runFrom(ctx)
	if err != nil {
		return err
	}
	s := callSpec{kind: KindSleep, counter: "sleep", bare: true, effect: Pure, input: sleepInput{Seconds: d.Seconds()}, wait: d}
	return r.call(ctx, s, func(ctx context.Context, _ Call, wakeAt time.Time) (any, error) {
		if wakeAt.IsZero() {
			return nil, nil
		}
		return nil, r.clock.SleepUntil(ctx, wakeAt)
	}, ignoreResult)
}

// Now reads the run's clock, key "<n>", effect pure, input {}; the result is
// an RFC 3339 string, so a replay sees the recorded time.
func Now(ctx context.Context) (time.Time, error) {
	r, err := runFrom(ctx)
	if err != nil {
		return time.Time{}, err
	}
	var s string
	spec := callSpec{kind: KindNow, counter: "now", bare: true, effect: Pure, input: struct{}{}}
	err = r.call(ctx, spec, func(context.Context, Call, time.Time) (any, error) {
		return r.now().Format(time.RFC3339Nano), nil
	}, decodeInto(&s))
	if err != nil {
		return time.Time{}, err
	}
	return time.Parse(time.RFC3339Nano, s)
}

// Random returns a random number in [0, 1), key "<n>", effect pure, input
// {}; a replay sees the recorded number.
func Random(ctx context.Context) (float64, error) {
	r, err := runFrom(ctx)
	if err != nil {
		return 0, err
	}
	var f float64
	spec := callSpec{kind: KindRandom, counter: "random", bare: true, effect: Pure, input: struct{}{}}
	err = r.call(ctx, spec, func(context.Context, Call, time.Time) (any, error) {
		return r.rt.cfg.Random(), nil
	}, decodeInto(&f))
	return f, err
}

// signalInput is a signal receive's input.
type signalInput struct {
	Name           string   `json:"name"`
	TimeoutSeconds *float64 `json:"timeout_seconds,omitempty"`
}

// signalResult is a signal receive's result: {"payload": …}, with
// "timed_out": true (and a null payload) when the timeout passed first.
type signalResult struct {
	Payload  json.RawMessage `json:"payload"`
	TimedOut bool            `json:"timed_out,omitempty"`
}

var errSignalTimeout = errors.New("flow: signal timeout")

// ReceiveSignal waits for the next signal named name sent to this run, key
// "<name>:<n>", effect read, input {"name", "timeout_seconds"}. The result
// is {"payload": …}, and the payload is decoded into a T. With a positive
// timeout, the wait ends at a wake_at recorded on call:start (a resumed run
// waits only what is left): then ok is false, the result is {"payload":
// null, "timed_out": true} and the payload is T's zero value. Without one a
// live run waits until the signal comes or its context is done.
func ReceiveSignal[T any](ctx context.Context, name string, timeout time.Duration) (payload T, ok bool, err error) {
	r, err := runFrom(ctx)
	if err != nil {
		return payload, false, err
	}
	in := signalInput{Name: name}
	if timeout > 0 {
		secs := timeout.Seconds()
		in.TimeoutSeconds = &secs
	}
	var res signalResult
	s := callSpec{kind: KindSignal, counter: "signal:" + name, prefix: name, name: name,
		effect: Read, input: in, wait: max(timeout, 0)}
	err = r.call(ctx, s, func(ctx context.Context, c Call, wakeAt time.Time) (any, error) {
		p, timedOut, err := r.receive(ctx, name, keyIndex(c.Key), wakeAt)
		if err != nil {
			return nil, err
		}
		if timedOut {
			return signalResult{Payload: json.RawMessage("null"), TimedOut: true}, nil
		}
		return signalResult{Payload: p}, nil
	}, func(raw json.RawMessage) error {
		var v signalResult
		if err := json.Unmarshal(raw, &v); err != nil {
			return err
		}
		var p T
		if !v.TimedOut && v.Payload != nil {
			if err := json.Unmarshal(v.Payload, &p); err != nil {
				return fmt.Errorf("signal payload: %w", err)
			}
		}
		res, payload = v, p
		return nil
	})
	if err != nil {
		return payload, false, err
	}
	return payload, !res.TimedOut, nil
}

// receive waits for the n-th signal named name, until wakeAt when it is set.
func (r *run) receive(ctx context.Context, name string, n int, wakeAt time.Time) (json.RawMessage, bool, error) {
	signals := r.rt.cfg.Signals
	if wakeAt.IsZero() {
		p, err := signals.Receive(ctx, r.id, name, n)
		return p, false, err
	}
	// A signal that is already there wins over the timeout, without
	// starting the timer: Receive returns it even with a done context.
	done, stop := context.WithCancel(ctx)
	stop()
	if p, err := signals.Receive(done, r.id, name, n); err == nil {
		return p, false, nil
	}
	rctx, cancel := context.WithCancelCause(ctx)
	timerDone := make(chan struct{})
	go func() {
		defer close(timerDone)
		if r.clock.SleepUntil(rctx, wakeAt) == nil {
			cancel(errSignalTimeout)
		}
	}()
	p, err := signals.Receive(rctx, r.id, name, n)
	cancel(nil)
	<-timerDone
	switch {
	case err == nil:
		return p, false, nil
	case ctx.Err() != nil:
		return nil, false, context.Cause(ctx)
	case errors.Is(context.Cause(rctx), errSignalTimeout):
		return nil, true, nil
	}
	return nil, false, err
}

// SendSignal sends a signal to a run (this one or another) as the step
// "sigsend:<n>", effect write, input {"run_id", "name", "payload"}; the
// result is null.
func SendSignal(ctx context.Context, p SignalParams) error {
	r, err := runFrom(ctx)
	if err != nil {
		return err
	}
	if err := r.t.checkDeclared(stepSigSend, p.Name); err != nil {
		return r.stopf(messages.RuntimeError, "%v", err)
	}
	s := callSpec{kind: KindStep, counter: "step:" + stepSigSend, prefix: stepSigSend, name: p.Name,
		effect: Write, input: p, tokenIsKey: true}
	return r.call(ctx, s, func(ctx context.Context, _ Call, _ time.Time) (any, error) {
		return nil, r.rt.cfg.Signals.Send(ctx, p)
	}, ignoreResult)
}

// InterruptAnswer is a person's answer to an interrupt: {"action", "value"}.
type InterruptAnswer struct {
	// Action is what the person chose, e.g. "approve".
	Action string `json:"action"`
	// Value is any JSON that goes with the action.
	Value json.RawMessage `json:"value"`
}

// Interrupt asks a person (through Interrupts) and returns the answer, key
// "<name>:<n>", effect read; request is the input. When a live run finds no
// answer yet, the call returns an error wrapping ErrSuspended and the run
// ends with status suspended (no terminal event, the call:start stays in the
// journal); running the run again once an answer is there resumes it.
func Interrupt(ctx context.Context, name string, request any) (InterruptAnswer, error) {
	var out InterruptAnswer
	r, err := runFrom(ctx)
	if err != nil {
		return out, err
	}
	s := callSpec{kind: KindInterrupt, counter: "interrupt:" + name, prefix: name, name: name,
		effect: Read, input: request}
	err = r.call(ctx, s, func(ctx context.Context, c Call, _ time.Time) (any, error) {
		a, ok, err := r.rt.cfg.Interrupts.Answer(ctx, r.id, c.Key)
		if err != nil {
			return nil, opError{err}
		}
		if !ok {
			return nil, ErrSuspended
		}
		if a.Value == nil {
			a.Value = json.RawMessage("null")
		}
		return a, nil
	}, decodeInto(&out))
	return out, err
}

// ReadStream reads the next item of an external stream, key "<name>:<n>",
// effect read, with an explicit input (a cursor, a filter); the item is
// decoded into an O.
func ReadStream[I, O any](ctx context.Context, name string, input I) (O, error) {
	var out O
	r, err := runFrom(ctx)
	if err != nil {
		return out, err
	}
	s := callSpec{kind: KindStream, counter: "stream:" + name, prefix: name, name: name,
		effect: Read, input: input}
	err = r.call(ctx, s, func(ctx context.Context, c Call, _ time.Time) (any, error) {
		return r.rt.cfg.Streams.Read(ctx, StreamRead{RunID: r.id, Name: name, N: keyIndex(c.Key), Input: c.Input})
	}, decodeInto(&out))
	return out, err
}

// ChildParams names a child run: a registered target and its inputs (an
// object of overrides of the target's defaults, or nil).
type ChildParams struct {
	// Target is the registered target to run.
	Target string `json:"target"`
	// Inputs override the target's defaults; they must encode as a JSON
	// object (or be nil).
	Inputs any `json:"inputs"`
}

// Child runs a registered target as a child run, as the step "child:<n>",
// effect write, input {"target", "inputs"}; the result is the child's result.
// The child is a run of its own with the run id "<parent run id>/child:<n>"
// in the same Log, so a parent resumed while its child was running resumes
// the child too. A child that ends with run:error or run:cancelled is a call
// error whose type is the child's code; a suspended child suspends the parent.
func Child[O any](ctx context.Context, p ChildParams) (O, error) {
	var out O
	r, err := runFrom(ctx)
	if err != nil {
		return out, err
	}
	if err := r.t.checkDeclared(stepChild, p.Target); err != nil {
		return out, r.stopf(messages.RuntimeError, "%v", err)
	}
	s := callSpec{kind: KindStep, counter: "step:" + stepChild, prefix: stepChild, name: p.Target,
		effect: Write, input: p, tokenIsKey: true}
	err = r.call(ctx, s, func(ctx context.Context, c Call, _ time.Time) (any, error) {
		return r.runChild(ctx, p, r.id+"/"+c.Key)
	}, decodeInto(&out))
	return out, err
}

// gatherInput is a gather's input.
type gatherInput struct {
	Children []ChildParams `json:"children"`
}

// Gather runs several child runs concurrently and records their results as
// one step, "gather:<id>", effect write, input {"children": [{"target",
// "inputs"}, …]}; the result is the array of the children's results, in
// order. Child i has the run id "<parent run id>/gather:<id>/<i>". The first
// failed child (in order) makes the gather's error; id must be unique in the
// run.
func Gather[O any](ctx context.Context, id string, children []ChildParams) ([]O, error) {
	var out []O
	r, err := runFrom(ctx)
	if err != nil {
		return out, err
	}
	if id == "" {
		return out, r.stopf(messages.RuntimeError, "a gather needs an id")
	}
	if err := r.t.checkDeclared(stepGather, id); err != nil {
		return out, r.stopf(messages.RuntimeError, "%v", err)
	}
	if children == nil {
		children = []ChildParams{}
	}
	s := callSpec{kind: KindStep, key: stepGather + ":" + id, name: id, effect: Write,
		input: gatherInput{Children: children}, tokenIsKey: true}
	err = r.call(ctx, s, func(ctx context.Context, c Call, _ time.Time) (any, error) {
		results := make([]json.RawMessage, len(children))
		errs := make([]error, len(children))
		var wg sync.WaitGroup
		for i, ch := range children {
			wg.Go(func() {
				results[i], errs[i] = r.runChild(ctx, ch, fmt.Sprintf("%s/%s/%d", r.id, c.Key, i))
			})
		}
		wg.Wait()
		var op opError
		var stop *StopError
		for _, err := range errs {
			if errors.As(err, &op) || errors.Is(err, ErrSuspended) {
				return nil, err
			}
		}
		for i, err := range errs {
			if errors.As(err, &stop) {
				return nil, err
			}
			if err != nil {
				ce := toCallError(err)
				return nil, &CallError{Type: ce.Type, Message: fmt.Sprintf("child %d: %s", i, ce.Message)}
			}
		}
		return results, nil
	}, decodeInto(&out))
	return out, err
}

// runChild executes a child run to its end and turns its outcome into a
// call result.
func (r *run) runChild(ctx context.Context, p ChildParams, runID string) (json.RawMessage, error) {
	t, err := r.rt.cfg.Registry.get(p.Target)
	if err != nil {
		return nil, Stopf(messages.RuntimeError, "child run %s: %v", runID, err)
	}
	var inputs map[string]json.RawMessage
	if p.Inputs != nil {
		raw, err := json.Marshal(p.Inputs)
		if err != nil {
			return nil, Errorf("invalid_inputs", "child run %s: %v", runID, err)
		}
		if err := json.Unmarshal(raw, &inputs); err != nil {
			return nil, Errorf("invalid_inputs", "child run %s: inputs must be an object: %v", runID, err)
		}
	}
	out, err := r.rt.execute(ctx, t, RunParams{RunID: runID, Target: p.Target, Inputs: inputs, Clock: r.clock, Models: r.override})
	if err != nil {
		if errors.Is(err, ErrInvalidInputs) {
			return nil, Errorf("invalid_inputs", "%v", err)
		}
		return nil, opError{err}
	}
	switch out.Status {
	case StatusComplete:
		return out.Result, nil
	case StatusSuspended:
		return nil, fmt.Errorf("%w: child run %s waits on %s", ErrSuspended, runID, out.SuspendedAt)
	case StatusCancelled:
		return nil, Errorf(string(messages.Cancelled), "child run %s was cancelled", runID)
	}
	return nil, Errorf(string(out.Code), "child run %s: %s", runID, out.Message)
}

// Model calls the run's model client, key "<n>", effect read. The request's
// JSON form {"model", "system", "messages", "tools"} is the input: an empty
// Model or System is filled from the agent, a nil Tools with the names of
// all the agent's tools, and RunParams.Model and RunParams.System replace
// them when set. The answer is decoded as a ModelResponse (a recorded or
// supplied string answer becomes one text block).
func Model(ctx context.Context, req ModelRequest) (ModelResponse, error) {
	var out ModelResponse
	r, err := runFrom(ctx)
	if err != nil {
		return out, err
	}
	if r.model != "" {
		req.Model = r.model
	} else if req.Model == "" {
		req.Model = r.t.info.Model
	}
	if r.system != "" {
		req.System = r.system
	} else if req.System == "" {
		req.System = r.t.system
	}
	if req.Messages == nil {
		req.Messages = []Message{}
	}
	if req.Tools == nil {
		req.Tools = []string{}
		for _, spec := range r.t.toolSpecs {
			req.Tools = append(req.Tools, spec.Name)
		}
	}
	if req.MaxTokens <= 0 {
		req.MaxTokens = cmp.Or(r.t.maxTokens, DefaultMaxTokens)
	}
	req.ToolSpecs = nil
	for _, name := range req.Tools {
		for _, spec := range r.t.toolSpecs {
			if spec.Name == name {
				req.ToolSpecs = append(req.ToolSpecs, spec)
			}
		}
	}
	s := callSpec{kind: KindModel, counter: "model", bare: true, effect: Read, input: req, rules: r.t.promptRules}
	err = r.call(ctx, s, func(ctx context.Context, _ Call, _ time.Time) (any, error) {
		if r.models == nil {
			return nil, Stopf(messages.RuntimeError, "%s has no model client", r.t.info.Name)
		}
		return r.models.Call(ctx, req)
	}, decodeInto(&out))
	return out, err
}

// CallTool calls the agent's tool named by a tool_use block, key the
// tool-use id, effect write unless the tool is read-only or a sub-agent,
// input the tool_use input. The result is the tool's result as JSON. A tool
// the agent does not offer is a call error of type "unknown_tool". A
// sub-agent tool runs its agent as the child run "<parent run id>/tool:<id>".
func CallTool(ctx context.Context, use Block) (json.RawMessage, error) {
	var out json.RawMessage
	r, err := runFrom(ctx)
	if err != nil {
		return out, err
	}
	if use.ID == "" {
		return out, r.stopf(messages.RuntimeError, "tool call %s has no tool-use id", use.Name)
	}
	tool := r.t.tools[use.Name]
	effect := Write
	if tool != nil && !tool.Writes() {
		effect = Read
	}
	input := use.Input
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	var rules *volatile.Rules
	if tool != nil {
		rules = tool.rules
	}
	s := callSpec{kind: KindTool, key: use.ID, name: use.Name, effect: effect, input: input,
		token: "tool:" + use.Name, tool: use.Name, rules: rules}
	err = r.call(ctx, s, func(ctx context.Context, c Call, _ time.Time) (any, error) {
		switch {
		case tool == nil:
			return nil, Errorf("unknown_tool", "%s offers no tool %q", r.t.info.Name, use.Name)
		case tool.subAgent != "":
			var inputs map[string]json.RawMessage
			if err := json.Unmarshal(c.Input, &inputs); err != nil {
				return nil, Errorf("invalid_tool_input", "tool %s: the input must be an object: %v", use.Name, err)
			}
			return r.runChild(ctx, ChildParams{Target: tool.subAgent, Inputs: inputs}, r.id+"/"+c.ID())
		}
		return tool.fn(ctx, c.Input)
	}, decodeInto(&out))
	return out, err
}

// RunTools calls every tool a model answer asks for, in order, and returns
// the user message of tool_result blocks to continue the conversation with.
// A tool's call error becomes a tool_result with is_error and the error's
// message; other errors (the run stopped, suspended or was abandoned) are
// returned.
func RunTools(ctx context.Context, resp ModelResponse) (Message, error) {
	blocks := []Block{}
	for _, use := range resp.ToolUses() {
		out, err := CallTool(ctx, use)
		var ce *CallError
		switch {
		case errors.As(err, &ce):
			msg, _ := json.Marshal(ce.Error())
			blocks = append(blocks, Block{Type: "tool_result", ToolUseID: use.ID, Content: msg, IsError: true})
		case err != nil:
			return Message{}, err
		default:
			blocks = append(blocks, Block{Type: "tool_result", ToolUseID: use.ID, Content: out})
		}
	}
	return Message{Role: "user", Blocks: blocks}, nil
}
