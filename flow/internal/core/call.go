package core

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
)

// CallKind is the kind of a call, the first half of its identity kind:key:
// runevent.CallKind, the type of the call member of the run's events.
type CallKind = runevent.CallKind

// The call kinds of flow/README.md.
const (
	// KindStep is a step; key "<name>:<n>", or "child:<n>", "sigsend:<n>",
	// "gather:<id>" for child runs, signal sends and gathers.
	KindStep CallKind = "step"
	// KindModel is an agent's model call; key "<n>".
	KindModel CallKind = "model"
	// KindTool is a tool call; key the tool-use id, e.g. "toolu_01".
	KindTool CallKind = "tool"
	// KindSleep is a durable timer; key "<n>".
	KindSleep CallKind = "sleep"
	// KindNow is a clock read; key "<n>".
	KindNow CallKind = "now"
	// KindRandom is a random number; key "<n>".
	KindRandom CallKind = "random"
	// KindSignal is a signal receive; key "<name>:<n>".
	KindSignal CallKind = "signal"
	// KindInterrupt is an interrupt (a question to a human); key "<name>:<n>".
	KindInterrupt CallKind = "interrupt"
	// KindStream is an external stream read; key "<name>:<n>".
	KindStream CallKind = "stream"
)

// Effect says what a call does to the outside world: runevent.Effect
// (Valid reports whether it is one of Read, Write and Pure).
type Effect = runevent.Effect

// The effects. A step that declares none is a Write.
const (
	// Read calls observe the outside world without changing it.
	Read = runevent.EffectRead
	// Write calls change the outside world.
	Write = runevent.EffectWrite
	// Pure calls depend only on their input (and on the run's clock or
	// randomness); they never count against a live budget.
	Pure = runevent.EffectPure
)

// CallRef is a call as the journal shows it, the "call" object of
// call:start and call:done events: runevent.Call, with Kind and Key (the
// identity kind:key, ID), Fingerprint (the lowercase hex SHA-256 of the
// canonical JSON of the call's input, without its volatile fields:
// FingerprintRules) and Effect.
type CallRef = runevent.Call

// Call is one call of a run as the runtime sees it before resolving it: what a
// Resolver is given.
type Call struct {
	CallRef
	// RunID is the run that makes the call (a child run has its own).
	RunID string
	// Input is the canonical JSON of the call's input, volatile fields
	// included; Fingerprint is its SHA-256 under the call's volatile-field
	// rules (FingerprintRules).
	Input json.RawMessage
	// Name is the step, tool, signal, interrupt or stream name, or the child
	// target of a child run or gather; empty for model, sleep, now and random.
	Name string
	// Token is the permission token that names the call, what a case run
	// is given to let a write run live: "tool:<name>" for
	// tools, "step:<name>" for steps, "step:<id>" for child runs, signal sends
	// and gathers ("step:child:0"); empty for other kinds.
	Token string
	// Seq is the call's 0-based position among the calls of its run.
	Seq int
	// Model is a model call's request as the model client gets it (with
	// ToolSpecs and MaxTokens, which are not part of Input); nil for other
	// kinds. A resolver prices a live call's worst case from it.
	Model *ModelRequest
}

// Fingerprint returns the canonical JSON of input (the canonical form of
// what encoding/json writes for it, so a json.RawMessage passes through;
// the usual types are written directly) and its fingerprint:
// the lowercase hex SHA-256 of that canonical JSON.
func Fingerprint(input any) (canonicalInput json.RawMessage, fingerprint string, err error) {
	return FingerprintRules(input, nil)
}

// fingerprintOf returns the lowercase hex SHA-256 of b, in one allocation
// (a case run computes one per call).
func fingerprintOf(b []byte) string {
	sum := sha256.Sum256(b)
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], sum[:])
	return string(out[:])
}

// CallError is an error returned by a call and recorded as the result's
// error, {"type", "message"}. A target receives a *CallError from every call
// that failed, live or replayed from the journal, so that it sees the same
// error both times.
type CallError struct {
	// Type names the kind of failure, e.g. "CouponExpired". Errors that do
	// not say (see ErrorType) are recorded with type "error".
	Type string `json:"type"`
	// Message is the error's text.
	Message string `json:"message"`
}

// Error implements error: "type: message".
func (e *CallError) Error() string { return e.Type + ": " + e.Message }

// Errorf returns a *CallError of the given type with a formatted message: the
// way for a step, tool or model client to fail with a named error type.
func Errorf(typ, format string, args ...any) *CallError {
	return &CallError{Type: typ, Message: fmt.Sprintf(format, args...)}
}

// ErrorType may be implemented by errors that calls return, to name the type
// recorded for them.
type ErrorType interface {
	ErrorType() string
}

// DefaultErrorType is the type recorded for a call error that is neither a
// *CallError nor an ErrorType.
const DefaultErrorType = "error"

// toCallError turns what a call returned into the recorded error.
func toCallError(err error) *CallError {
	var ce *CallError
	if errors.As(err, &ce) {
		return &CallError{Type: ce.Type, Message: ce.Message}
	}
	var et ErrorType
	if errors.As(err, &et) {
		return &CallError{Type: et.ErrorType(), Message: err.Error()}
	}
	return &CallError{Type: DefaultErrorType, Message: err.Error()}
}

// StopError stops a run with a reason code: the run ends with a run:error
// event carrying the code, message, stop_key and stop_token. Every call the
// target makes after a stop returns the same *StopError.
type StopError struct {
	// Code is the reason code, e.g. messages.ReplayInputChanged.
	Code messages.Code
	// Message says what happened, naming the call.
	Message string
	// StopKey is the identity ("kind:key") of the call that stopped the run,
	// or empty (null in the event) when no call did.
	StopKey string
	// StopToken is the permission token (Call.Token) of a refused write, or empty
	// (null in the event).
	StopToken string
}

// Error implements error: "code: message".
func (e *StopError) Error() string { return string(e.Code) + ": " + e.Message }

// Unwrap returns the equivalent *messages.Error, so messages.CodeOf works.
func (e *StopError) Unwrap() error { return &messages.Error{Code: e.Code, Message: e.Message} }

// Stopf returns a *StopError with a formatted message and no stop key.
func Stopf(code messages.Code, format string, args ...any) *StopError {
	return &StopError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Errors of the package. Log implementations return (wrapped) ErrFinished and
// ErrResultExists.
var (
	// ErrNoRun: a call was made outside a run (or inside a step's function,
	// whose context carries no run: nested calls are not journaled).
	ErrNoRun = errors.New("flow: call outside a run")
	// ErrSuspended: the run cannot go on until an answer arrives from outside
	// (an interrupt without an answer). The run ends with status suspended
	// and no terminal event; running it again resumes it.
	ErrSuspended = errors.New("flow: run suspended")
	// ErrRunCancelled is the cause to cancel a run's context with
	// (context.WithCancelCause) to end the run with run:cancelled. Any other
	// cancellation abandons the run without a terminal event, as a crash
	// would, so that it can be resumed.
	ErrRunCancelled = errors.New("flow: run cancelled")
	// ErrUnknownTarget: no target is registered under the name.
	ErrUnknownTarget = errors.New("flow: unknown target")
	// ErrInvalidInputs: the inputs given to a run name an input the target
	// does not accept, or do not decode into its input type.
	ErrInvalidInputs = errors.New("flow: invalid inputs")
	// ErrDuplicateTarget: a target is already registered under the name.
	ErrDuplicateTarget = errors.New("flow: target already registered")
	// ErrInvalidTarget: a target definition is incomplete or inconsistent.
	ErrInvalidTarget = errors.New("flow: invalid target")
	// ErrFinished: the run's journal already has a terminal event.
	ErrFinished = errors.New("flow: run already finished")
	// ErrResultExists: a result record with the same kind and key is already
	// in the run's journal.
	ErrResultExists = errors.New("flow: result already recorded")
)
