package runevent

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/pyrula/caseworker/messages"
)

// ErrInvalid is wrapped by every error about an event that has no JSON
// form, or JSON that is not an event: an event without a kind, a kind or
// member name that is not valid UTF-8, an Extra member named run_seq,
// kind or at, a raw value that is not valid JSON (or that canonical JSON
// refuses: docs/bundle-format.md), an at or wake_at outside years
// 1–9999; in decoding, text that is not such an object.
var ErrInvalid = errors.New("invalid run event")

// Event is one event of a run, as the runtime writes it, the journals
// store it, a bundle's history holds it and every command prints it. Its
// JSON form (AppendJSON) is one canonical object (docs/bundle-format.md:
// names sorted, no white space, canonical values): run_seq (when
// assigned), kind and at, then the members of its kind, which have typed
// fields:
//
//	run:start      inputs, code_version
//	call:start     call {effect, fingerprint, key, kind}, input;
//	               wake_at when the call waits until a time (a sleep, a
//	               signal receive with a timeout); tool (the tool's name) for a tool call
//	call:done      call; provenance when a resolver gave one (case runs)
//	run:complete   result
//	run:error      code, message, stop_key, stop_token (null when empty)
//	case:call      call, provenance, seq (a case run's call line; its
//	               result or error, with values, are in Extra)
//
// A member of the kind is written from its field: the zero value as null
// ("" for code_version, code and message), except that wake_at, tool and
// provenance are left out when zero. Every other member, of these kinds
// or of the others (run:submitted, case:call, case:outcome, run:cancelled,
// and kinds the project does not know), is in Extra. Fields that are not
// of the event's kind are not written.
//
// Decoding (Decode, UnmarshalJSON) gives back exactly what was written:
// AppendJSON of a decoded event is the canonical form of the decoded text,
// byte for byte. A member of the kind whose value its field cannot hold
// exactly (a call object with other members, a wake_at in another zone, an
// empty tool) is kept in Extra instead, and written from there while the
// field is zero; a member the text lacks (a run:complete without result)
// is remembered as lacking (Lacks) and left out again while its field is
// zero.
type Event struct {
	// RunSeq is the 1-based position of the event in its run's journal,
	// assigned by the journal on append (0 until then, and then not
	// written).
	RunSeq int64
	// Kind is the event kind.
	Kind Kind
	// At is when the event was written, by the run's clock; it is written
	// in UTC with microseconds (TimeLayout). A journal stamps an event
	// appended with a zero At.
	At time.Time

	// Inputs are the run's inputs, all of them (defaults applied): run:start.
	Inputs json.RawMessage
	// CodeVersion is the target's code version: run:start.
	CodeVersion string

	// Call is the call: call:start and call:done.
	Call *Call
	// Input is the canonical JSON of the call's input: call:start.
	Input json.RawMessage
	// WakeAt is when the call's wait ends (zero when it has none):
	// call:start. It is written in UTC with the precision it has (RFC 3339,
	// up to nanoseconds), so that a resumed wait ends at exactly the
	// recorded instant.
	WakeAt time.Time
	// Tool is the tool's name for a tool call: call:start.
	Tool string
	// Provenance says how a case run resolved the call: call:done and
	// case:call.
	Provenance string
	// CallSeq is the call's position among the run's calls, from 0: the
	// "seq" of case:call.
	CallSeq int64

	// Result is the target's result: run:complete.
	Result json.RawMessage

	// Code is a run:error's reason code.
	Code messages.Code
	// Message is a run:error's message.
	Message string
	// StopKey is the identity of the call that stopped the run (run:error);
	// empty is written as null.
	StopKey string
	// StopToken is the --allow-write token of a refused write (run:error);
	// empty is written as null.
	StopToken string

	// Extra holds every other member, by name, as raw JSON (nil is null).
	// It may not use the names run_seq, kind and at. A member named like
	// a member of the kind is written only while that member's field is
	// zero.
	Extra map[string]json.RawMessage

	// lacking are the members of the kind the decoded text did not have.
	lacking members
}

// Call is the "call" member of call:start and call:done events: the
// identity of a call and what it does to the outside world.
type Call struct {
	// Kind and Key are the call's identity kind:key.
	Kind CallKind `json:"kind"`
	Key  string   `json:"key"` // see Kind
	// Fingerprint is the lowercase hex SHA-256 of the canonical JSON of the
	// call's input, without its volatile fields.
	Fingerprint string `json:"fingerprint"`
	// Effect is read, write or pure.
	Effect Effect `json:"effect"`
}

// ID is the call's identity "kind:key", e.g. "tool:toolu_01": the form
// stop_key, supplied answers and result records use.
func (c Call) ID() string { return string(c.Kind) + ":" + c.Key }

// CallKind is the kind of a call, the first half of its identity kind:key:
// step, model, tool, sleep, now, random, signal, interrupt, stream (package
// flow names them).
type CallKind string

// Effect says what a call does to the outside world.
type Effect string

// The effects.
const (
	// EffectRead calls observe the outside world without changing it.
	EffectRead Effect = "read"
	// EffectWrite calls change the outside world.
	EffectWrite Effect = "write"
	// EffectPure calls depend only on their input (and on the run's clock
	// or randomness).
	EffectPure Effect = "pure"
)

// Valid reports whether e is one of the three effects.
func (e Effect) Valid() bool { return e == EffectRead || e == EffectWrite || e == EffectPure }

// member is a member of an event kind that has a typed field. The order is
// the code-point order of the names, so that a kind's members in this
// order are sorted.
type member uint8

const (
	mCall member = iota
	mCode
	mCodeVersion
	mInput
	mInputs
	mMessage
	mProvenance
	mResult
	mSeq
	mStopKey
	mStopToken
	mTool
	mWakeAt
	nMembers
)

// memberNames are the members' names, by member.
var memberNames = [nMembers]string{
	"call", "code", "code_version", "input", "inputs", "message",
	"provenance", "result", "seq", "stop_key", "stop_token", "tool", "wake_at",
}

// members is a set of members.
type members uint16

func (s members) has(m member) bool { return s&(1<<m) != 0 }

// optional are the members left out when their field is zero.
const optional members = 1<<mWakeAt | 1<<mTool | 1<<mProvenance

// The members of each kind that has any, in name order.
var (
	runStartMembers    = []member{mCodeVersion, mInputs}
	callStartMembers   = []member{mCall, mInput, mTool, mWakeAt}
	callDoneMembers    = []member{mCall, mProvenance}
	runCompleteMembers = []member{mResult}
	runErrorMembers    = []member{mCode, mMessage, mStopKey, mStopToken}
	caseCallMembers    = []member{mCall, mProvenance, mSeq}
)

// membersOf returns the members of kind with a typed field, in name order.
func membersOf(kind Kind) []member {
	switch kind {
	case CallStart:
		return callStartMembers
	case CallDone:
		return callDoneMembers
	case RunStart:
		return runStartMembers
	case RunComplete:
		return runCompleteMembers
	case RunError:
		return runErrorMembers
	case CaseCall:
		return caseCallMembers
	}
	return nil
}

// memberOf returns the member of kind named name.
func memberOf(kind Kind, name string) (member, bool) {
	for _, m := range membersOf(kind) {
		if memberNames[m] == name {
			return m, true
		}
	}
	return 0, false
}

// Reserved member names: the event's own, never in Extra.
const (
	nameRunSeq = "run_seq"
	nameKind   = "kind"
	nameAt     = "at"
)

func reserved(name string) bool { return name == nameRunSeq || name == nameKind || name == nameAt }

// zero reports whether the field of m is zero.
func (e *Event) zero(m member) bool {
	switch m {
	case mCall:
		return e.Call == nil
	case mCode:
		return e.Code == ""
	case mCodeVersion:
		return e.CodeVersion == ""
	case mInput:
		return len(e.Input) == 0
	case mInputs:
		return len(e.Inputs) == 0
	case mMessage:
		return e.Message == ""
	case mProvenance:
		return e.Provenance == ""
	case mResult:
		return len(e.Result) == 0
	case mSeq:
		return e.CallSeq == 0
	case mStopKey:
		return e.StopKey == ""
	case mStopToken:
		return e.StopToken == ""
	case mTool:
		return e.Tool == ""
	case mWakeAt:
		return e.WakeAt.IsZero()
	}
	return true
}

// source is where the value of a member of the kind comes from.
type source uint8

const (
	fromField   source = iota // the field, not zero
	fromExtra                 // Extra, the field being zero
	fromDefault               // the zero value: null, or "" for strings
	left                      // not written
)

// sourceOf says where the value of m, a member of e's kind, comes from;
// extra is Extra's value when it is from Extra.
func (e *Event) sourceOf(m member) (src source, extra json.RawMessage) {
	switch {
	case !e.zero(m):
		return fromField, nil
	case e.Extra != nil:
		if v, ok := e.Extra[memberNames[m]]; ok {
			return fromExtra, v
		}
	}
	if optional.has(m) || e.lacking.has(m) {
		return left, nil
	}
	return fromDefault, nil
}

// Lacks reports whether e was decoded from JSON (Decode, UnmarshalJSON,
// FromMembers) that lacked name, a member its kind always has (such as
// result of run:complete): AppendJSON leaves it out again while its field
// is zero and Extra has no member of that name.
func (e Event) Lacks(name string) bool {
	return e.lacking != 0 && e.lacks(name) // inlined: most events lack nothing
}

func (e *Event) lacks(name string) bool {
	m, ok := memberOf(e.Kind, name)
	return ok && !optional.has(m) && e.lacking.has(m)
}

// Field decodes the member name of e's JSON object (a member of the kind or
// of Extra, but not run_seq, kind or at) into v with encoding/json. It
// returns false (and no error) when e's JSON has no such member.
func (e Event) Field(name string, v any) (bool, error) {
	raw, ok, err := e.member(name)
	if err != nil || !ok {
		return ok, err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return true, fmt.Errorf("runevent: member %q of event %d (%s): %w", name, e.RunSeq, e.Kind, err)
	}
	return true, nil
}

// member returns the value of the member name as AppendJSON writes it
// (Extra's as it is).
func (e *Event) member(name string) (json.RawMessage, bool, error) {
	if reserved(name) {
		return nil, false, nil
	}
	if m, ok := memberOf(e.Kind, name); ok {
		switch src, extra := e.sourceOf(m); src {
		case fromField:
			out, err := e.appendField(nil, m)
			return out, true, err
		case fromExtra:
			return orNull(extra), true, nil
		case fromDefault:
			return appendDefault(nil, m), true, nil
		default:
			return nil, false, nil
		}
	}
	v, ok := e.Extra[name]
	return orNull(v), ok, nil
}

// orNull is v, or null when v is empty.
func orNull(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return json.RawMessage("null")
	}
	return v
}
