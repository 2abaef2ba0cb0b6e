package core

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/pyrula/caseworker/bundle"
)

// Resolver decides how each new call of a run is resolved: the seam through
// which a higher layer (the case-run engine of docs/cli.md, "case run") runs the ladder
// of reuse, supplied answer, live, or stop. The runtime consults it for every
// call that its own journal has not finished: a new call, or a call that was
// started but not done when the run stopped. Calls the run's journal already
// finished are answered from the journal without asking.
//
// Resolve is called with the run's context before the call's call:start is
// appended. An error from Resolve stops the run with runtime_error (or
// abandons it, when the run's context is done).
type Resolver interface {
	Resolve(ctx context.Context, c Call) (Resolution, error)
}

// ResolverFunc adapts a function to Resolver.
type ResolverFunc func(ctx context.Context, c Call) (Resolution, error)

// Resolve implements Resolver.
func (f ResolverFunc) Resolve(ctx context.Context, c Call) (Resolution, error) { return f(ctx, c) }

// RecordedInputs may be implemented by a Resolver that holds a recording,
// so that a call made with its recorded input, byte for byte, is not hashed
// again. RecordedInput returns the canonical input and the fingerprint the
// recording holds for the call at position seq with that kind, key and name
// (Call.Name), when the recording keeps its input and gives the call the
// volatile-field rules the code gives it: the same input then has the same
// fingerprint. ok is false otherwise. It is called under the run's lock,
// before the call's Resolve; the runtime keeps input (it does not change it).
//
// NextKey returns the key of the call of that kind the recording expects
// at position seq, "" for none: a call made with an equal key keeps the
// recording's string, so that the resolver's comparisons of the two find
// the same string (and the runtime allocates none). Called under the run's
// lock too, before RecordedInput.
type RecordedInputs interface {
	RecordedInput(seq int, kind CallKind, key, name string) (input json.RawMessage, fingerprint string, ok bool)
	NextKey(seq int, kind CallKind) string
}

// Observer may be implemented by a Resolver to see every call it resolved
// once the call's call:done and result are in the journal: a case-run engine
// counts live calls and spend here.
type Observer interface {
	Observe(ctx context.Context, o Observation)
}

// Annotator may be implemented by a Resolver to journal an event of its own
// with each call it resolved, in the same append as the call's call:done
// and result record, so that the journal never holds the one without the
// other: a case-run engine's case:call line.
type Annotator interface {
	// Annotate is called under the run's lock right before the call's
	// call:done is appended, with the Observation an Observer gets once
	// the append succeeded. When ok, ev is appended after call:done in the
	// same batch; urgent makes that batch be written at once even for an
	// answered call (Batch.Deferrable false). The Log may keep what ev
	// points to (its Call, raw values and Extra).
	Annotate(ctx context.Context, o Observation) (ev Event, urgent, ok bool)
}

// Observation is a call that was resolved and journaled.
type Observation struct {
	// Call is the call as the resolver was given it.
	Call Call
	// Resolution is what the resolver decided.
	Resolution Resolution
	// Record is the result record written, {key, kind, fingerprint,
	// result|error}.
	Record bundle.Result
	// At is the time the call's call:done carries, read from the run's
	// clock.
	At time.Time
}

// Action is what a Resolution tells the runtime to do.
type Action int

// The actions.
const (
	// ActLive runs the call live: its step function, model client, tool,
	// inbox or timer.
	ActLive Action = iota
	// ActAnswer uses Resolution.Result (or Resolution.Error) as the call's
	// result without running anything. The answer must have the shape of the
	// call's kind (ValidateAnswer) and decode into the caller's type, else
	// the run stops with missing_context.
	ActAnswer
	// ActStop stops the run with Resolution.Stop; nothing is appended for
	// the call.
	ActStop
)

// String returns "live", "answer" or "stop".
func (a Action) String() string {
	switch a {
	case ActLive:
		return "live"
	case ActAnswer:
		return "answer"
	case ActStop:
		return "stop"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Resolution is a Resolver's decision for one call.
type Resolution struct {
	// Action is what to do.
	Action Action
	// Result is the answer, for ActAnswer, as JSON.
	Result json.RawMessage
	// Error, for ActAnswer, answers with a recorded error instead of Result.
	Error *CallError
	// Canonical, for ActAnswer, says that Result is canonical JSON already
	// (as every value of a bundle read with bundle.Read is), so the runtime
	// neither validates nor canonicalises it again; it still checks the
	// answer's shape and decodes it. A resolver that is not sure leaves it
	// false.
	Canonical bool
	// Provenance, when set, is written on the call's call:done event
	// (case runs: "reused", "simulated", "live", "changed").
	Provenance string
	// Stop is the reason code, message and stop token for ActStop. An empty
	// StopKey is filled with the call's identity.
	Stop *StopError
}

// Live is the Resolution that runs a call live.
func Live() Resolution { return Resolution{Action: ActLive} }

// Answer is the Resolution that answers a call with result, with provenance
// written on call:done.
func Answer(result json.RawMessage, provenance string) Resolution {
	return Resolution{Action: ActAnswer, Result: result, Provenance: provenance}
}

// AnswerError is the Resolution that answers a call with a recorded error.
func AnswerError(err *CallError, provenance string) Resolution {
	return Resolution{Action: ActAnswer, Error: err, Provenance: provenance}
}

// StopWith is the Resolution that stops the run.
func StopWith(stop *StopError) Resolution { return Resolution{Action: ActStop, Stop: stop} }

// LiveResolver runs every call live: the default policy of the runtime.
type LiveResolver struct{}

// Resolve implements Resolver.
func (LiveResolver) Resolve(context.Context, Call) (Resolution, error) { return Live(), nil }

// ValidateAnswer checks that an answer (a recorded or supplied result) has
// the shape flow/README.md and the seed require for the call's kind:
// model answers are a string or {"role": "assistant", "content": [...]};
// signal answers are objects with "payload"; interrupt answers are
// {"action": string, "value": ...}; now answers are RFC 3339 strings;
// random answers are numbers. Other kinds accept any JSON value.
func ValidateAnswer(kind CallKind, result json.RawMessage) error {
	if !json.Valid(result) {
		return fmt.Errorf("%s answer is not JSON", kind)
	}
	return answerShape(kind, result)
}

// answerShape is ValidateAnswer for a result known to be valid JSON.
func answerShape(kind CallKind, result json.RawMessage) error {
	switch kind {
	case KindModel:
		var r ModelResponse
		if err := json.Unmarshal(result, &r); err != nil {
			return fmt.Errorf("model answer: %w", err)
		}
	case KindSignal:
		var m map[string]json.RawMessage
		if err := json.Unmarshal(result, &m); err != nil || m == nil {
			return fmt.Errorf("signal answer must be an object with payload")
		}
		if _, ok := m["payload"]; !ok {
			return fmt.Errorf("signal answer must be an object with payload")
		}
	case KindInterrupt:
		var m map[string]json.RawMessage
		if err := json.Unmarshal(result, &m); err != nil || m == nil {
			return fmt.Errorf(`interrupt answer must be {"action": …, "value": …}`)
		}
		var action string
		if err := json.Unmarshal(m["action"], &action); err != nil || action == "" {
			return fmt.Errorf(`interrupt answer must be {"action": …, "value": …} with a string action`)
		}
		if _, ok := m["value"]; !ok {
			return fmt.Errorf(`interrupt answer must be {"action": …, "value": …}`)
		}
	case KindNow:
		var s string
		if err := json.Unmarshal(result, &s); err != nil {
			return fmt.Errorf("now answer must be an RFC 3339 string")
		}
		if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
			return fmt.Errorf("now answer must be an RFC 3339 string: %w", err)
		}
	case KindRandom:
		var f float64
		if err := json.Unmarshal(result, &f); err != nil || bytes.HasPrefix(bytes.TrimSpace(result), []byte("n")) {
			return fmt.Errorf("random answer must be a number")
		}
	}
	return nil
}
