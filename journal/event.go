package journal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/pyrula/caseworker/journal/internal/wire"
	"github.com/pyrula/caseworker/runevent"
)

// Kind is the kind of an event: runevent.Kind, the one list of kinds.
type Kind = runevent.Kind

// The event kinds, as package runevent defines them (documented there). A
// journal stores any non-empty kind; these are the ones the runtime, the
// capture and the CLI write and read. run:submitted is written by Create:
// its fields are target_name plus whatever the submitter adds
// (CreateParams.Fields).
const (
	KindRunSubmitted = runevent.RunSubmitted
	KindRunStart     = runevent.RunStart
	KindCallStart    = runevent.CallStart
	KindCallDone     = runevent.CallDone
	KindCaseCall     = runevent.CaseCall
	KindCaseOutcome  = runevent.CaseOutcome
	KindRunComplete  = runevent.RunComplete
	KindRunError     = runevent.RunError
	KindRunCancelled = runevent.RunCancelled
)

// IsTerminal reports whether kind ends a run (run:complete, run:error,
// run:cancelled). Only Finish writes terminal events, always last.
func IsTerminal(kind Kind) bool { return kind.Terminal() }

// TerminalStatus is the status a run ends in after a terminal event of kind,
// and false when kind is not terminal.
func TerminalStatus(kind Kind) (Status, bool) {
	switch kind {
	case KindRunComplete:
		return StatusComplete, true
	case KindRunError:
		return StatusError, true
	case KindRunCancelled:
		return StatusCancelled, true
	}
	return "", false
}

// TimeLayout is how an event's at is written: RFC 3339 in UTC with exactly
// six fractional digits, e.g. "2025-01-02T03:04:05.678901Z". At is truncated
// to the microsecond when the event is written.
const TimeLayout = wire.TimeLayout

// Event is one journal event. On the wire (Valkey stream entries, the
// archive, bundles, `pyrula events`) it is one JSON object: the members
// run_seq, kind and at merged with Fields, in canonical form (docs/bundle-format.md:
// names sorted, no whitespace), which JSON returns.
//
// Events read from a journal hold canonical field values, so JSON returns
// exactly the stored bytes. To append, build an Event with Kind, Fields and
// optionally At (NewEvent helps); the journal assigns RunSeq.
type Event struct {
	// RunSeq is the 1-based position of the event in its run, assigned by
	// the journal on append. In an event given to Append it must be 0 (the
	// journal assigns the next number) or the number the journal would
	// assign (else ErrSeqConflict), which lets a writer append at an exact
	// position.
	RunSeq int64
	// Kind is the event kind, such as KindCallStart.
	Kind Kind
	// At is when the event happened, in UTC with microsecond precision.
	// Zero in an event given to Append means now (by the journal's clock).
	At time.Time
	// Fields are the kind-specific members: raw JSON values by member name.
	// They may not use the names run_seq, kind and at.
	Fields map[string]json.RawMessage
}

// NewEvent returns an event of kind whose Fields are the members of the JSON
// object that fields marshals to (a struct or a map; nil for none). At is
// left zero, to be stamped by the journal.
func NewEvent(kind Kind, fields any) (Event, error) {
	e := Event{Kind: kind}
	if fields == nil {
		return e, nil
	}
	raw, err := json.Marshal(fields)
	if err != nil {
		return Event{}, fmt.Errorf("journal: fields of a %s event: %w", kind, err)
	}
	if err := json.Unmarshal(raw, &e.Fields); err != nil || e.Fields == nil {
		return Event{}, fmt.Errorf("%w: fields of a %s event are not a JSON object", ErrInvalid, kind)
	}
	for name := range e.Fields {
		if err := wire.CheckFieldName(name); err != nil {
			return Event{}, fmt.Errorf("journal: %s event: %w", kind, err)
		}
	}
	return e, nil
}

// JSON returns the event as one canonical JSON object, run_seq, kind and at
// included: the bytes the journal stores and a bundle's history holds. It
// fails (with ErrInvalid) when a field is not valid JSON or uses a reserved
// name. Prefer it to json.Marshal, which escapes <, >, & and U+2028 in the
// output of MarshalJSON and so changes the bytes.
func (e Event) JSON() (json.RawMessage, error) {
	out, err := wire.AppendEvent(nil, e.RunSeq, e.Kind, e.At, e.Fields)
	if err != nil {
		return nil, fmt.Errorf("journal: event %d: %w", e.RunSeq, err)
	}
	return out, nil
}

// MarshalJSON implements json.Marshaler with JSON.
func (e Event) MarshalJSON() ([]byte, error) { return e.JSON() }

// UnmarshalJSON implements json.Unmarshaler: it reads an event object as
// JSON writes it (run_seq, kind and at are required).
func (e *Event) UnmarshalJSON(data []byte) error {
	seq, kind, at, fields, err := wire.DecodeEvent(bytes.Clone(data))
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	*e = Event{RunSeq: seq, Kind: kind, At: at, Fields: fields}
	return nil
}

// Field decodes the field name into v with encoding/json. It returns false
// (and no error) when the event has no such field.
func (e Event) Field(name string, v any) (bool, error) {
	raw, ok := e.Fields[name]
	if !ok {
		return false, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return true, fmt.Errorf("journal: field %q of event %d (%s): %w", name, e.RunSeq, e.Kind, err)
	}
	return true, nil
}

// Call decodes the event's "call" field, the identity of the call a
// call:start or call:done event is about. ok is false when the event has no
// call field or it is not a call object.
func (e Event) Call() (c Call, ok bool) {
	found, err := e.Field("call", &c)
	return c, found && err == nil && c.Kind != "" && c.Key != ""
}

// Call is the "call" object of call:start and call:done events.
type Call struct {
	// Kind is the call kind: step, model, tool, sleep, now, random, signal,
	// interrupt, stream.
	Kind string `json:"kind"`
	// Key identifies the call among those of its kind (flow/README.md).
	Key string `json:"key"`
	// Fingerprint is the lowercase hex SHA-256 of the canonical JSON of the
	// call's input.
	Fingerprint string `json:"fingerprint"`
	// Effect is read, write or pure.
	Effect string `json:"effect"`
}

// ID is the call's identity "kind:key", the field its result is stored
// under.
func (c Call) ID() string { return ResultID(c.Kind, c.Key) }

// ResultID is the identity "kind:key" of a call result.
func ResultID(kind, key string) string { return wire.ResultID(kind, key) }
