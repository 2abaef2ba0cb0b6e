package flow

import (
	"encoding/json"
	"iter"
	"maps"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/pyrula/caseworker/messages"
)

// eventFields are the names Event.UnmarshalJSON takes out of an event of
// each kind (besides run_seq, kind and at): an Extra field with one of
// these names would not come back in Extra.
var eventFields = map[EventKind][]string{
	EventRunStart:    {"inputs", "code_version"},
	EventCallStart:   callStartFields,
	EventCallDone:    callDoneFields,
	EventRunComplete: {"result"},
	EventRunError:    {"code", "message", "stop_key", "stop_token"},
}

var (
	callStartFields = []string{"call", "input", "wake_at", "tool"}
	callDoneFields  = []string{"call", "provenance"}
)

// fieldsOf is eventFields[kind], without the map lookup for the kinds a
// run appends most (a MemLog stores millions of events).
func fieldsOf(kind EventKind) []string {
	switch kind {
	case EventCallStart:
		return callStartFields
	case EventCallDone:
		return callDoneFields
	case EventCaseCall:
		return nil
	}
	return eventFields[kind]
}

// roundTripped returns the event that decoding ev's JSON (Event.MarshalJSON
// then Event.UnmarshalJSON) gives, without encoding it, provided that its
// raw values are valid JSON (validJSON checks that, at Load). It shares the
// raw values, Call and Extra with ev (a Log may keep what a Batch holds);
// cloneEvent copies them. ok is false when it cannot tell for sure (invalid
// UTF-8 in a string, a raw value with white space around it, a time
// outside years 1–9999, an Extra field the decoder would take for a field
// of the kind); the caller then does the round trip.
func roundTripped(ev Event) (out Event, ok bool) {
	if ev.RunSeq <= 0 || !utf8.ValidString(string(ev.Kind)) || !timeOK(ev.At) {
		return Event{}, false
	}
	out = Event{RunSeq: ev.RunSeq, Kind: ev.Kind, At: ev.At.UTC().Truncate(time.Microsecond)}
	ok = true
	str := func(s string) string {
		ok = ok && utf8.ValidString(s)
		return s
	}
	// raw is a field taken by the decoder: null comes back as nil.
	raw := func(v json.RawMessage) json.RawMessage {
		if v == nil || string(v) == "null" {
			return nil
		}
		ok = ok && trimmed(v)
		return v
	}
	switch ev.Kind {
	case EventRunStart:
		out.Inputs, out.CodeVersion = raw(ev.Inputs), str(ev.CodeVersion)
	case EventCallStart:
		out.Call, out.Input, out.Tool = ev.Call, raw(ev.Input), str(ev.Tool)
		ok = ok && callOK(ev.Call)
		if !ev.WakeAt.IsZero() {
			ok = ok && timeOK(ev.WakeAt)
			out.WakeAt = ev.WakeAt.UTC()
		}
	case EventCallDone:
		out.Call, out.Provenance = ev.Call, str(ev.Provenance)
		ok = ok && callOK(ev.Call)
	case EventRunComplete:
		// A null result is kept as the four bytes.
		out.Result = json.RawMessage("null")
		if ev.Result != nil {
			ok = ok && trimmed(ev.Result)
			out.Result = ev.Result
		}
	case EventRunError:
		out.Code, out.Message = messages.Code(str(string(ev.Code))), str(ev.Message)
		out.StopKey, out.StopToken = str(ev.StopKey), str(ev.StopToken)
	}
	nulls := false
	taken := fieldsOf(ev.Kind)
	for name, v := range ev.Extra {
		if name == "run_seq" || name == "kind" || name == "at" || slices.Contains(taken, name) {
			return Event{}, false
		}
		str(name)
		if v == nil {
			nulls = true
		} else {
			ok = ok && trimmed(v)
		}
	}
	if !ok {
		return Event{}, false
	}
	if len(ev.Extra) > 0 {
		out.Extra = ev.Extra
		if nulls {
			out.Extra = maps.Clone(ev.Extra)
			for name, v := range out.Extra {
				if v == nil {
					out.Extra[name] = json.RawMessage("null")
				}
			}
		}
	}
	return out, true
}

// validJSON reports whether the raw values of an event that roundTripped
// vouched for are valid JSON, as decoding its JSON requires.
func validJSON(ev *Event) bool {
	for _, v := range [...]json.RawMessage{ev.Inputs, ev.Input, ev.Result} {
		if v != nil && !json.Valid(v) {
			return false
		}
	}
	for _, v := range ev.Extra {
		if !json.Valid(v) {
			return false
		}
	}
	return true
}

// timeOK reports whether t survives formatting and parsing as RFC 3339.
func timeOK(t time.Time) bool {
	y := t.UTC().Year()
	return y >= 1 && y <= 9999
}

// trimmed reports whether v has no JSON white space around it, so that
// decoding it (when valid) as a json.RawMessage gives the same bytes.
func trimmed(v json.RawMessage) bool {
	return len(v) > 0 && !isSpace(v[0]) && !isSpace(v[len(v)-1])
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func callOK(c *CallRef) bool {
	return c == nil || utf8.ValidString(string(c.Kind)) && utf8.ValidString(c.Key) &&
		utf8.ValidString(c.Fingerprint) && utf8.ValidString(string(c.Effect))
}

// cloneEvent returns a copy of ev that shares no memory with it.
func cloneEvent(ev Event) Event {
	if ev.Call != nil {
		cp := *ev.Call
		ev.Call = &cp
	}
	ev.Inputs, ev.Input, ev.Result = slices.Clone(ev.Inputs), slices.Clone(ev.Input), slices.Clone(ev.Result)
	if ev.Extra != nil {
		ev.Extra = maps.Clone(ev.Extra)
		for name, v := range ev.Extra {
			ev.Extra[name] = slices.Clone(v)
		}
	}
	return ev
}

// memEvent is one stored event, in the smallest of three forms (a long
// run holds millions): enc, when set, is the event's JSON (decoded at
// Load); else full, when set, is the event as roundTripped gives it; else
// the event is a call:start without wait or tool, a call:done, or an event
// of a kind with no fields of its own (case:call, run:submitted, …), held
// in the fields below.
type memEvent struct {
	runSeq int64
	kind   EventKind
	at     time.Time
	call   *CallRef
	input  json.RawMessage // call:start
	prov   string          // call:done
	extra  map[string]json.RawMessage
	full   *Event
	enc    json.RawMessage
}

// compact stores ev, which roundTripped returned.
func compact(ev Event) memEvent {
	me := memEvent{runSeq: ev.RunSeq, kind: ev.Kind, at: ev.At, call: ev.Call, extra: ev.Extra}
	switch {
	case ev.Kind == EventCallStart && ev.WakeAt.IsZero() && ev.Tool == "":
		me.input = ev.Input
	case ev.Kind == EventCallDone:
		me.prov = ev.Provenance
	case fieldsOf(ev.Kind) == nil && !ev.Kind.Terminal() && ev.Kind != EventRunStart:
		// Only run_seq, kind, at and Extra.
	default:
		full := ev // only this branch allocates
		return memEvent{full: &full}
	}
	return me
}

// value returns the event of a memEvent without enc, sharing its memory.
func (me *memEvent) value() Event {
	if me.full != nil {
		return *me.full
	}
	return Event{RunSeq: me.runSeq, Kind: me.kind, At: me.at, Call: me.call, Input: me.input,
		Provenance: me.prov, Extra: me.extra}
}

// chunked is a list kept in chunks that never move once written, so that
// appending to a long run copies nothing (an event is large, and a run may
// hold millions of events and results).
type chunked[T any] struct {
	chunks [][]T
	n      int
}

func (l *chunked[T]) add(v T) {
	last := len(l.chunks) - 1
	if last < 0 || len(l.chunks[last]) == cap(l.chunks[last]) {
		size := 16
		if last >= 0 {
			size = min(2*cap(l.chunks[last]), 1024)
		}
		l.chunks = append(l.chunks, make([]T, 0, size))
		last++
	}
	l.chunks[last] = append(l.chunks[last], v)
	l.n++
}

// all yields pointers to the values, in order.
func (l *chunked[T]) all() iter.Seq[*T] {
	return func(yield func(*T) bool) {
		for _, c := range l.chunks {
			for i := range c {
				if !yield(&c[i]) {
					return
				}
			}
		}
	}
}
