package host

import (
	"encoding/json"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/bundle/volatile"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/internal/core"
	"github.com/pyrula/caseworker/messages"
)

// ActAnswer uses Resolution.Result (or Resolution.Error) as the call's
// result without running anything. The answer must have the shape of the
// call's kind (ValidateAnswer) and decode into the caller's type, else
// the run stops with missing_context.
const ActAnswer = core.ActAnswer

// ActLive runs the call live: its step function, model client, tool,
// inbox or timer.
const ActLive = core.ActLive

// ActStop stops the run with Resolution.Stop; nothing is appended for
// the call.
const ActStop = core.ActStop

// Action is what a Resolution tells the runtime to do.
type Action = core.Action

// Answer is the Resolution that answers a call with result, with provenance
// written on call:done.
func Answer(result json.RawMessage, provenance string) Resolution {
	return core.Answer(result, provenance)
}

// AnswerError is the Resolution that answers a call with a recorded error.
func AnswerError(err *flow.CallError, provenance string) Resolution {
	return core.AnswerError(err, provenance)
}

// Batch is what one Append writes atomically.
type Batch = core.Batch

// Build returns the registry a binary serves: reg (a new registry when
// nil) with what register adds to it, checked (Check). Its error, prefixed
// "register targets: ", names the target; the daemon and the CLI print it
// as their one error line at start-up.
func Build(reg *flow.Registry, register func(*flow.Registry) error) (*flow.Registry, error) {
	return core.Build(reg, register)
}

// Call is one call of a run as the runtime sees it before resolving it: what a
// Resolver is given.
type Call = core.Call

// CallKind is the kind of a call, the first half of its identity kind:key:
// runevent.CallKind, the type of the call member of the run's events.
type CallKind = core.CallKind

// CallRef is a call as the journal shows it, the "call" object of
// call:start and call:done events: runevent.Call, with Kind and Key (the
// identity kind:key, ID), Fingerprint (the lowercase hex SHA-256 of the
// canonical JSON of the call's input, without its volatile fields:
// FingerprintRules) and Effect.
type CallRef = core.CallRef

// Clock is the run's time: the "at" of its events, live now() reads, and the
// waits of durable sleeps and signal timeouts. Tests inject a fake one
// (flowtest.Clock); a case run may inject a clock that never waits.
type Clock = core.Clock

// Config configures a Runtime. Registry and Log are required; every other
// field has a default.
type Config = core.Config

// ErrFinished: the run's journal already has a terminal event.
var ErrFinished = core.ErrFinished

// ErrInvalidInputs: the inputs given to a run name an input the target
// does not accept, or do not decode into its input type.
var ErrInvalidInputs = core.ErrInvalidInputs

// ErrResultExists: a result record with the same kind and key is already
// in the run's journal.
var ErrResultExists = core.ErrResultExists

// ErrUnknownTarget: no target is registered under the name.
var ErrUnknownTarget = core.ErrUnknownTarget

// Event is one event of a run's journal: runevent.Event, the one type of
// events the runtime, the journals, bundles' histories and the CLI share.
// Its typed fields are the members of the kinds the runtime writes
// (run:start: Inputs, CodeVersion; call:start: Call, Input, WakeAt, Tool;
// call:done: Call, Provenance; run:complete: Result; run:error: Code,
// Message, StopKey, StopToken); every other member is in Extra. Its JSON
// (AppendJSON, MarshalJSON) is the canonical object a journal stores:
// run_seq (assigned by the Log; an event not yet appended has RunSeq 0 and
// its JSON no run_seq), kind, at in UTC with microseconds, then its
// members, names sorted.
type Event = core.Event

// EventKind is the kind of a run event: runevent.Kind. The kinds are
// runevent's constants (runevent.CallDone, …), spelled only there.
type EventKind = core.EventKind

// Fingerprint returns the canonical JSON of input (encoded with
// encoding/json first, so a json.RawMessage passes through) and its
// fingerprint: the lowercase hex SHA-256 of that canonical JSON.
func Fingerprint(input any) (canonicalInput json.RawMessage, fingerprint string, err error) {
	return core.Fingerprint(input)
}

// FingerprintRules is Fingerprint under a call's volatile-field rules: the
// canonical JSON of input (the real values, what call:start records) and
// the lowercase hex SHA-256 of that JSON with the rules applied (the
// volatile fields removed, the prompt patterns' matches removed from the
// prompt text). With nil rules it is Fingerprint.
func FingerprintRules(input any, rules *volatile.Rules) (canonicalInput json.RawMessage, fingerprint string, err error) {
	return core.FingerprintRules(input, rules)
}

// HasVolatile reports whether reg declares any volatile-field rule.
func HasVolatile(reg bundle.Registration) bool {
	return core.HasVolatile(reg)
}

// Interrupts holds the answers people give to a run's interrupts: the live
// side of Interrupt.
type Interrupts = core.Interrupts

// KindInterrupt is an interrupt (a question to a human); key "<name>:<n>".
const KindInterrupt = core.KindInterrupt

// KindModel is an agent's model call; key "<n>".
const KindModel = core.KindModel

// KindNow is a clock read; key "<n>".
const KindNow = core.KindNow

// KindRandom is a random number; key "<n>".
const KindRandom = core.KindRandom

// KindSignal is a signal receive; key "<name>:<n>".
const KindSignal = core.KindSignal

// KindSleep is a durable timer; key "<n>".
const KindSleep = core.KindSleep

// KindStep is a step; key "<name>:<n>", or "child:<n>", "sigsend:<n>",
// "gather:<id>" for child runs, signal sends and gathers.
const KindStep = core.KindStep

// KindStream is an external stream read; key "<name>:<n>".
const KindStream = core.KindStream

// KindTool is a tool call; key the tool-use id, e.g. "toolu_01".
const KindTool = core.KindTool

// Live is the Resolution that runs a call live.
func Live() Resolution {
	return core.Live()
}

// LiveResolver runs every call live: the default policy of the runtime.
type LiveResolver = core.LiveResolver

// Log is the persistence the runtime needs: the journals of runs, each named
// by its run id. The journal package adapts its Valkey and Postgres journals
// to it; MemLog is the in-memory implementation.
//
// A run's journal is its events, numbered by run_seq (1, 2, 3, … in the order
// they were appended), and its result records, at most one per (kind, key).
// The runtime writes one run at a time from one goroutine; children of a run
// (Child, Gather, sub-agent tools) are runs of their own, with their own run
// ids, and may be written concurrently with their parent.
type Log = core.Log

// MemInbox is an in-memory Signals, Interrupts and Streams, safe for
// concurrent use. A stream named s holds the items pushed with PushStream;
// the n-th read of s by any run returns the n-th item.
type MemInbox = core.MemInbox

// MemLog is an in-memory Log for tests and embedded use. Load returns
// exactly what a journal returns for the same appends: each event as
// decoding its JSON gives it (Event.RoundTrip: At in UTC to the
// microsecond, raw values canonical, fields not of its kind dropped). But
// Append only numbers and keeps the events it is given, as Go values: the
// round trip is made by Load, and the encoding by EventsJSON. So Load fails
// (and Events and EventsJSON panic) for a run holding an event a journal
// would have refused at Append (Event.AppendJSON fails: no kind, a raw value
// that is not valid JSON, …). As the Log contract allows, Append keeps the
// raw values, Call and Extra of the events it is given: callers must not
// change them afterwards. Load returns copies. It is safe for concurrent
// use.
type MemLog = core.MemLog

// HTTP 401, 403
const ModelAuthentication = core.ModelAuthentication

// an answer that is not the wire format
const ModelBadResponse = core.ModelBadResponse

// the request did not reach the provider
const ModelConnection = core.ModelConnection

// ModelError is a failed model call as a provider client reports it. It
// is recorded as the call's error with type "model_<kind>" (ErrorType), and
// its message never holds credentials.
type ModelError = core.ModelError

// ModelErrorKind classifies a failed model call, so that a recorded error
// and a case run that fails on it say which failure it was.
type ModelErrorKind = core.ModelErrorKind

// HTTP 400, 404, 413, 422
const ModelInvalidRequest = core.ModelInvalidRequest

// HTTP 529 (Anthropic) or 503
const ModelOverloaded = core.ModelOverloaded

// HTTP 429
const ModelRateLimited = core.ModelRateLimited

// other HTTP 5xx
const ModelServerError = core.ModelServerError

// no answer within the per-call timeout
const ModelTimeout = core.ModelTimeout

// NewMemInbox returns an empty MemInbox.
func NewMemInbox() *MemInbox {
	return core.NewMemInbox()
}

// NewMemLog returns an empty MemLog.
func NewMemLog() *MemLog {
	return core.NewMemLog()
}

// NewRuntime returns a Runtime for cfg.
func NewRuntime(cfg Config) (*Runtime, error) {
	return core.NewRuntime(cfg)
}

// Observation is a call that was resolved and journaled.
type Observation = core.Observation

// Observer may be implemented by a Resolver to see every call it resolved
// once the call's call:done and result are in the journal: a case-run engine
// counts live calls and spend here.
type Observer = core.Observer

// Annotator may be implemented by a Resolver to journal an event of its own
// in the same append as each call's call:done: a case-run engine's
// case:call line.
type Annotator = core.Annotator

// RecordedInputs may be implemented by a Resolver that holds a recording:
// a call made with its recorded input, byte for byte and under the same
// volatile-field rules, takes the recorded fingerprint instead of being
// hashed again (a case-run engine).
type RecordedInputs = core.RecordedInputs

// Outcome is how a run ended.
type Outcome = core.Outcome

// Recorded is what Load returns: a run's journal.
type Recorded = core.Recorded

// ReservedModelClients are the names of the built-in provider clients
// (package llm): RegisterModelClient refuses them.
var ReservedModelClients = core.ReservedModelClients

// Resolution is a Resolver's decision for one call.
type Resolution = core.Resolution

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
type Resolver = core.Resolver

// ResolverFunc adapts a function to Resolver.
type ResolverFunc = core.ResolverFunc

// RunParams names the run to execute and how.
type RunParams = core.RunParams

// Runtime executes targets durably: every call is journaled in the Log before
// the target sees its result, and a run that stopped without a terminal
// event resumes from its journal when it is run again.
type Runtime = core.Runtime

// Signals delivers signals between runs: the live side of SendSignal and
// ReceiveSignal. Signals sent to a run under one name form a list; the n-th
// receive of that name (key "<name>:<n>") reads the n-th signal, so a
// receive that runs again after a crash reads the same signal.
type Signals = core.Signals

// Status is how a run ended.
type Status = core.Status

// StatusCancelled: run:cancelled.
const StatusCancelled = core.StatusCancelled

// StatusComplete: run:complete; Outcome.Result is the result.
const StatusComplete = core.StatusComplete

// StatusError: run:error; Outcome.Code, Message, StopKey, StopToken.
const StatusError = core.StatusError

// StatusSuspended: the run waits for an answer from outside (an
// interrupt); no terminal event was written and running it again
// resumes it.
const StatusSuspended = core.StatusSuspended

// StopError stops a run with a reason code: the run ends with a run:error
// event carrying the code, message, stop_key and stop_token. Every call the
// target makes after a stop returns the same *StopError.
type StopError = core.StopError

// StopWith is the Resolution that stops the run.
func StopWith(stop *StopError) Resolution {
	return core.StopWith(stop)
}

// Stopf returns a *StopError with a formatted message and no stop key.
func Stopf(code messages.Code, format string, args ...any) *StopError {
	return core.Stopf(code, format, args...)
}

// StreamRead is one external stream read.
type StreamRead = core.StreamRead

// Streams reads external streams: the live side of ReadStream.
type Streams = core.Streams

// SystemClock is the Clock of the machine.
type SystemClock = core.SystemClock

// TargetInfo describes a registered target: what `pyrula targets` prints and
// what a bundle's manifest records.
type TargetInfo = core.TargetInfo

// TimeFormat is the layout of an event's "at": runevent.TimeLayout, RFC 3339
// in UTC with microseconds, e.g. "2025-03-14T09:26:53.037512Z", the
// precision every journal stores.
const TimeFormat = core.TimeFormat

// ValidateAnswer checks that an answer (a recorded or supplied result) has
// the shape flow/README.md and the seed require for the call's kind:
// model answers are a string or {"role": "assistant", "content": [...]};
// signal answers are objects with "payload"; interrupt answers are
// {"action": string, "value": ...}; now answers are RFC 3339 strings;
// random answers are numbers. Other kinds accept any JSON value.
func ValidateAnswer(kind CallKind, result json.RawMessage) error {
	return core.ValidateAnswer(kind, result)
}

// VolatileOf returns the volatile-field rules that reg (a target's
// registration, or the one a bundle recorded) gives the call c: a declared
// step's fields (by the step's name; child runs, signal sends and gathers
// have none), a tool's fields or, for a model call, the prompt patterns.
// Other calls have none.
func VolatileOf(reg bundle.Registration, c Call) volatile.Spec {
	return core.VolatileOf(reg, c)
}
