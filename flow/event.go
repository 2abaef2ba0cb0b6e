package flow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
)

// EventKind is the kind of a run event: runevent.Kind, the one list of
// kinds the runtime, the journals and the replay engine share.
type EventKind = runevent.Kind

// The event kinds, as package runevent defines them. The runtime writes
// run:start, call:start, call:done and the terminal kinds; run:submitted,
// case:call and case:outcome are written by other layers and kept as they
// are (Event.Extra).
const (
	EventRunSubmitted = runevent.RunSubmitted
	EventRunStart     = runevent.RunStart
	EventCallStart    = runevent.CallStart
	EventCallDone     = runevent.CallDone
	EventCaseCall     = runevent.CaseCall
	EventCaseOutcome  = runevent.CaseOutcome
	EventRunComplete  = runevent.RunComplete
	EventRunError     = runevent.RunError
	EventRunCancelled = runevent.RunCancelled
)

// TimeFormat is the layout of an event's "at": runevent.TimeLayout, RFC 3339
// in UTC with microseconds, e.g. "2025-03-14T09:26:53.037512Z", the
// precision every journal stores.
const TimeFormat = runevent.TimeLayout

// Event is one journal event. Its JSON form is an object with run_seq, kind
// and at, then the fields of its kind, exactly these:
//
//	run:start      inputs, code_version
//	call:start     call {kind, key, fingerprint, effect}, input;
//	               wake_at when the call waits until a time (a sleep, a signal
//	               receive with a timeout); tool (the tool's name) for a tool call
//	call:done      call; provenance when a resolver gave one (case runs)
//	run:complete   result
//	run:error      code, message, stop_key, stop_token (null when not applicable)
//	run:cancelled  (nothing else)
//
// Fields of other kinds, and unknown fields of these, are kept in Extra and
// written back unchanged. run_seq is assigned by the Log: an event that has
// not been appended has RunSeq 0 and its JSON has no run_seq.
type Event struct {
	// RunSeq is the 1-based position of the event in the run's journal.
	RunSeq int64
	// Kind is the event kind.
	Kind EventKind
	// At is when the event was written (by the run's clock).
	At time.Time

	// Inputs are the run's inputs, all of them (defaults applied): run:start.
	Inputs json.RawMessage
	// CodeVersion is the target's code version: run:start.
	CodeVersion string

	// Call is the call: call:start and call:done.
	Call *CallRef
	// Input is the canonical JSON of the call's input: call:start.
	Input json.RawMessage
	// WakeAt is when the call's wait ends (zero when it has none): call:start.
	WakeAt time.Time
	// Tool is the tool's name for a tool call: call:start.
	Tool string
	// Provenance says how a case run resolved the call: call:done.
	Provenance string

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

	// Extra holds every other field, by name, as raw JSON.
	Extra map[string]json.RawMessage
}

// MarshalJSON implements json.Marshaler with the field set described on Event.
func (e Event) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	field := func(name string, v any) error {
		raw, err := encodeValue(name, v)
		if err != nil {
			return err
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		key, _ := json.Marshal(name)
		b.Write(key)
		b.WriteByte(':')
		b.Write(raw)
		return nil
	}
	var fields []kv
	if e.RunSeq > 0 {
		fields = append(fields, kv{"run_seq", e.RunSeq})
	}
	fields = append(fields, kv{"kind", e.Kind}, kv{"at", runevent.FormatTime(e.At)})
	fields = e.members(fields)
	// Keys in code-point order, as a journal stores every event, so that an
	// event has one encoding wherever it is printed.
	slices.SortFunc(fields, func(a, b kv) int { return strings.Compare(a.name, b.name) })
	for _, f := range fields {
		if err := field(f.name, f.v); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// kv is one member of an event's JSON object.
type kv struct {
	name string
	v    any
}

// members appends to fields (which holds what is already written: run_seq,
// kind, at) the members of e's kind and its Extra, unsorted: the one
// definition of an event's field set, for MarshalJSON and Fields.
func (e Event) members(fields []kv) []kv {
	nullable := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	switch e.Kind {
	case EventRunStart:
		fields = append(fields, kv{"inputs", e.Inputs}, kv{"code_version", e.CodeVersion})
	case EventCallStart:
		fields = append(fields, kv{"call", sortedCallOf(e.Call)}, kv{"input", e.Input})
		if !e.WakeAt.IsZero() {
			fields = append(fields, kv{"wake_at", e.WakeAt.UTC().Format(time.RFC3339Nano)})
		}
		if e.Tool != "" {
			fields = append(fields, kv{"tool", e.Tool})
		}
	case EventCallDone:
		fields = append(fields, kv{"call", sortedCallOf(e.Call)})
		if e.Provenance != "" {
			fields = append(fields, kv{"provenance", e.Provenance})
		}
	case EventRunComplete:
		fields = append(fields, kv{"result", e.Result})
	case EventRunError:
		fields = append(fields, kv{"code", e.Code}, kv{"message", e.Message},
			kv{"stop_key", nullable(e.StopKey)}, kv{"stop_token", nullable(e.StopToken)})
	}
	written := make(map[string]bool, len(fields))
	for _, f := range fields {
		written[f.name] = true
	}
	for name, v := range e.Extra {
		if !written[name] {
			fields = append(fields, kv{name, v})
		}
	}
	return fields
}

// Fields returns the members of e's JSON object besides run_seq, kind and
// at, by name: the fields of its kind and Extra, each value as MarshalJSON
// writes it. A journal stores an event as these with its kind and at
// (flow/journallog); EventOf is the inverse.
func (e Event) Fields() (map[string]json.RawMessage, error) {
	reserved := []kv{{"run_seq", nil}, {"kind", nil}, {"at", nil}}
	members := e.members(reserved)[len(reserved):]
	out := make(map[string]json.RawMessage, len(members))
	for _, f := range members {
		raw, err := encodeValue(f.name, f.v)
		if err != nil {
			return nil, err
		}
		out[f.name] = raw
	}
	return out, nil
}

// encodeValue is the JSON of the member name's value v: a raw value as it
// is (nil as null), anything else with encoding/json.
func encodeValue(name string, v any) (json.RawMessage, error) {
	raw, ok := v.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(v); err != nil {
			return nil, fmt.Errorf("flow: encode event field %s: %w", name, err)
		}
	} else if raw == nil {
		raw = json.RawMessage("null")
	}
	return raw, nil
}

// sortedCall is a call's identity as an event encodes it: keys in
// code-point order, as a journal stores them.
type sortedCall struct {
	Effect      Effect   `json:"effect"`
	Fingerprint string   `json:"fingerprint"`
	Key         string   `json:"key"`
	Kind        CallKind `json:"kind"`
}

func sortedCallOf(c *CallRef) any {
	if c == nil {
		return nil
	}
	return sortedCall{c.Effect, c.Fingerprint, c.Key, c.Kind}
}

// UnmarshalJSON implements json.Unmarshaler: the inverse of MarshalJSON.
func (e *Event) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("flow: decode event: %w", err)
	}
	ev, err := decodeEvent(m, nil)
	if err != nil {
		return err
	}
	*e = ev
	return nil
}

// EventOf returns the event with run_seq seq, kind and at whose other
// members are fields (as a journal stores them): the inverse of Fields, and
// the event UnmarshalJSON gives for the whole object. fields is not
// modified; the event shares its values.
func EventOf(seq int64, kind EventKind, at time.Time, fields map[string]json.RawMessage) (Event, error) {
	m := maps.Clone(fields)
	if m == nil {
		m = map[string]json.RawMessage{}
	}
	return decodeEvent(m, &Event{RunSeq: seq, Kind: kind, At: at})
}

// decodeEvent decodes the members m of an event's object, taking out of m
// what it decodes. With head nil it reads run_seq, kind and at from m;
// else they are head's.
func decodeEvent(m map[string]json.RawMessage, head *Event) (Event, error) {
	var ev Event
	take := func(name string, dst any) error {
		raw, ok := m[name]
		if !ok {
			return nil
		}
		delete(m, name)
		if string(raw) == "null" {
			return nil
		}
		if rm, ok := dst.(*json.RawMessage); ok {
			*rm = raw
			return nil
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			return fmt.Errorf("flow: decode event field %s: %w", name, err)
		}
		return nil
	}
	takeTime := func(name string, dst *time.Time) error {
		var s string
		if err := take(name, &s); err != nil || s == "" {
			return err
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return fmt.Errorf("flow: decode event field %s: %w", name, err)
		}
		*dst = t
		return nil
	}
	if head != nil {
		ev = *head
	} else {
		if err := take("run_seq", &ev.RunSeq); err != nil {
			return Event{}, err
		}
		if err := take("kind", &ev.Kind); err != nil {
			return Event{}, err
		}
		if err := takeTime("at", &ev.At); err != nil {
			return Event{}, err
		}
	}
	var errs []error
	switch ev.Kind {
	case EventRunStart:
		errs = append(errs, take("inputs", &ev.Inputs), take("code_version", &ev.CodeVersion))
	case EventCallStart:
		errs = append(errs, take("call", &ev.Call), take("input", &ev.Input),
			takeTime("wake_at", &ev.WakeAt), take("tool", &ev.Tool))
	case EventCallDone:
		errs = append(errs, take("call", &ev.Call), take("provenance", &ev.Provenance))
	case EventRunComplete:
		// A null result is a result: keep it as the four bytes.
		if raw, ok := m["result"]; ok {
			ev.Result = raw
			delete(m, "result")
		}
	case EventRunError:
		errs = append(errs, take("code", &ev.Code), take("message", &ev.Message),
			take("stop_key", &ev.StopKey), take("stop_token", &ev.StopToken))
	}
	for _, err := range errs {
		if err != nil {
			return Event{}, err
		}
	}
	if len(m) > 0 {
		ev.Extra = m
	}
	return ev, nil
}
