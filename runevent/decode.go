package runevent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/pyrula/caseworker/canonjson"
	"github.com/pyrula/caseworker/messages"
)

// Decode reads an event object: kind (a non-empty string) and at (an RFC
// 3339 time in years 1–9999, read in UTC) are required; run_seq, when present, is an
// integer of at least 1. AppendJSON of the event is the canonical form of
// data (at aside: it is written in TimeLayout): see Event. The event's raw
// values (Inputs, Input, Result, Extra) are sub-slices of data, which the
// caller gives up (UnmarshalJSON copies it).
func Decode(data []byte) (Event, error) {
	var buf [12]rawMember
	ms, err := objectMembers(data, "event", buf[:0])
	if err != nil {
		return Event{}, err
	}
	var e Event
	var hasKind, hasAt bool
	n := 0
	for _, m := range ms {
		switch string(m.name) {
		case nameRunSeq:
			e.RunSeq, err = strconv.ParseInt(string(m.value), 10, 64)
			if err != nil || e.RunSeq < 1 {
				return Event{}, fmt.Errorf("%w: event has run_seq %.30s", ErrInvalid, m.value)
			}
		case nameKind:
			s, ok := unquote(m.value)
			if !ok || len(s) == 0 {
				return Event{}, fmt.Errorf("%w: event has kind %.60s", ErrInvalid, m.value)
			}
			e.Kind, hasKind = knownKind(s), true
		case nameAt:
			s, ok := str(m.value)
			t, err := time.Parse(time.RFC3339Nano, s)
			if !ok || err != nil || !yearOK(t) {
				return Event{}, fmt.Errorf("%w: event has at %.60s", ErrInvalid, m.value)
			}
			e.At, hasAt = t.UTC(), true
		default:
			ms[n] = m
			n++
		}
	}
	switch {
	case !hasKind:
		return Event{}, fmt.Errorf("%w: event %d has no kind", ErrInvalid, e.RunSeq)
	case !hasAt:
		return Event{}, fmt.Errorf("%w: event %d has no at", ErrInvalid, e.RunSeq)
	}
	e.setMembers(ms[:n])
	return e, nil
}

// UnmarshalJSON implements json.Unmarshaler with Decode (on a copy of
// data).
func (e *Event) UnmarshalJSON(data []byte) error {
	ev, err := Decode(bytes.Clone(data))
	if err != nil {
		return err
	}
	*e = ev
	return nil
}

// FromMembers returns the event of kind whose members besides run_seq,
// kind and at are members, exactly (an event a journal's caller builds
// from named values): AppendJSON writes those members and no others, as
// Decode reads them. It fails, wrapping ErrInvalid, when a name is
// run_seq, kind or at or is not valid UTF-8. The event shares the values
// of members; At is zero.
func FromMembers(kind Kind, members map[string]json.RawMessage) (Event, error) {
	e := Event{Kind: kind}
	ms := make([]rawMember, 0, len(members))
	for name, v := range members {
		if err := checkName(name, kind); err != nil {
			return Event{}, err
		}
		switch {
		case len(v) == 0:
			v = json.RawMessage("null")
		case !canonjson.IsCanonical(v) && !json.Valid(v):
			// Kept as it is, for AppendJSON to refuse.
			if e.Extra == nil {
				e.Extra = make(map[string]json.RawMessage, len(members))
			}
			e.Extra[name] = v
			continue
		}
		ms = append(ms, rawMember{name: []byte(name), value: v})
	}
	e.setMembers(ms)
	return e, nil
}

// rawMember is one member of an object: its name (unescaped) and its value.
type rawMember struct {
	name, value []byte
}

// setMembers sets e's members of its kind from ms, the members of its
// object besides run_seq, kind and at: each into its field when the field
// holds it exactly, else into Extra; a member of the kind that ms lacks is
// marked lacking.
func (e *Event) setMembers(ms []rawMember) {
	var seen members
	for _, rm := range ms {
		name := string(rm.name)
		if m, ok := memberOf(e.Kind, name); ok {
			seen |= 1 << m
			if e.setField(m, rm.value) {
				continue
			}
		}
		if e.Extra == nil {
			e.Extra = make(map[string]json.RawMessage, len(ms))
		}
		e.Extra[name] = rm.value[:len(rm.value):len(rm.value)]
	}
	for _, m := range membersOf(e.Kind) {
		if !seen.has(m) && !optional.has(m) {
			e.lacking |= 1 << m
		}
	}
}

// setField sets m's field from v, the member's JSON value, when AppendJSON
// writes the field as v's canonical form; else it leaves the field zero
// and returns false.
func (e *Event) setField(m member, v []byte) bool {
	switch m {
	case mCall:
		if string(v) == "null" {
			return true
		}
		c, ok := callOf(v)
		if ok {
			e.Call = c
		}
		return ok
	case mInput, mInputs:
		raw := json.RawMessage(v[:len(v):len(v)])
		if string(v) == "null" {
			raw = nil
		}
		if m == mInput {
			e.Input = raw
		} else {
			e.Inputs = raw
		}
		return true
	case mResult:
		e.Result = v[:len(v):len(v)]
		return true
	case mSeq:
		// Exactly an integer written as AppendInt writes it; else Extra.
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil || strconv.FormatInt(n, 10) != string(v) {
			return false
		}
		e.CallSeq = n
		return true
	case mStopKey, mStopToken:
		s := ""
		if string(v) != "null" {
			var ok bool
			if s, ok = str(v); !ok || s == "" {
				return false
			}
		}
		if m == mStopKey {
			e.StopKey = s
		} else {
			e.StopToken = s
		}
		return true
	case mWakeAt:
		s, ok := str(v)
		if !ok {
			return false
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil || t.IsZero() || !yearOK(t) || t.UTC().Format(time.RFC3339Nano) != s {
			return false
		}
		e.WakeAt = t.UTC()
		return true
	}
	s, ok := str(v)
	if !ok {
		return false
	}
	switch m {
	case mCode:
		e.Code = messages.Code(s)
	case mCodeVersion:
		e.CodeVersion = s
	case mMessage:
		e.Message = s
	case mProvenance, mTool:
		if s == "" {
			return false // written only when not empty
		}
		if m == mTool {
			e.Tool = s
		} else {
			e.Provenance = s
		}
	}
	return true
}

// callOf reads a call object: exactly the members effect, fingerprint,
// key and kind, all strings.
func callOf(v []byte) (*Call, bool) {
	var buf [4]rawMember
	ms, err := objectMembers(v, "call", buf[:0])
	if err != nil || len(ms) != 4 {
		return nil, false
	}
	var c Call
	var seen [4]bool
	for _, m := range ms {
		s, ok := unquote(m.value)
		if !ok {
			return nil, false
		}
		i := 0
		switch string(m.name) {
		case "effect":
			c.Effect, i = knownEffect(s), 0
		case "fingerprint":
			c.Fingerprint, i = string(s), 1
		case "key":
			c.Key, i = string(s), 2
		case "kind":
			c.Kind, i = CallKind(s), 3
		default:
			return nil, false
		}
		if seen[i] {
			return nil, false
		}
		seen[i] = true
	}
	return &c, true
}

// knownKind is Kind(s), sharing the string of a kind the project writes.
func knownKind(s []byte) Kind {
	for _, k := range kinds {
		if string(k) == string(s) {
			return k
		}
	}
	return Kind(s)
}

// kinds are Kinds(), most frequent first.
var kinds = []Kind{CallStart, CallDone, CaseCall, RunStart, RunSubmitted, CaseOutcome, RunComplete, RunError, RunCancelled, SuitePlan, SuiteProgress, SuiteOutcome, CaseCharge}

// knownEffect is Effect(s), sharing the string of one of the three.
func knownEffect(s []byte) Effect {
	for _, e := range [...]Effect{EffectRead, EffectWrite, EffectPure} {
		if string(e) == string(s) {
			return e
		}
	}
	return Effect(s)
}

// str reads a JSON string value.
func str(v []byte) (string, bool) {
	u, ok := unquote(v)
	return string(u), ok
}

// unquote reads a JSON string value, without a copy when it has no escape.
func unquote(v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' {
		return nil, false
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return v[1 : len(v)-1], true
	}
	u, err := jsontext.AppendUnquote(nil, v)
	return u, err == nil
}

// objectMembers appends to ms the members of the JSON object data, in
// order, their values sub-slices of data; what names the object in
// errors. Canonical text (what a journal stores) is read in place;
// anything else with a full JSON decoder, which refuses duplicate names.
func objectMembers(data []byte, what string, ms []rawMember) ([]rawMember, error) {
	s := canonjson.NewScanner(data)
	n := len(ms)
	if _, err := s.Object(func(name, value []byte) error {
		ms = append(ms, rawMember{name, value})
		return nil
	}); err == nil && s.Pos() == len(data) {
		return ms, nil
	}
	return decodeMembers(data, what, ms[:n])
}

// decoders reuse jsontext decoders across decodes.
var decoders = sync.Pool{New: func() any { return jsontext.NewDecoder(bytes.NewReader(nil)) }}

// decodeMembers is objectMembers for any JSON text.
func decodeMembers(data []byte, what string, ms []rawMember) ([]rawMember, error) {
	d := decoders.Get().(*jsontext.Decoder)
	defer func() {
		d.Reset(bytes.NewReader(nil)) // drop data
		decoders.Put(d)
	}()
	d.Reset(bytes.NewReader(data))
	bad := func(err error) error { return fmt.Errorf("%w: %s: %w", ErrInvalid, what, err) }
	tok, err := d.ReadToken()
	if err != nil {
		return nil, bad(err)
	}
	if tok.Kind() != '{' {
		return nil, fmt.Errorf("%w: %s is not an object", ErrInvalid, what)
	}
	for d.PeekKind() != '}' {
		tok, err := d.ReadToken()
		if err != nil {
			return nil, bad(err)
		}
		name := tok.String()
		v, err := d.ReadValue()
		if err != nil {
			return nil, bad(err)
		}
		end := int(d.InputOffset())
		ms = append(ms, rawMember{[]byte(name), data[end-len(v) : end : end]})
	}
	if _, err := d.ReadToken(); err != nil {
		return nil, bad(err)
	}
	if _, err := d.ReadToken(); err != io.EOF {
		return nil, fmt.Errorf("%w: %s has data after the object", ErrInvalid, what)
	}
	return ms, nil
}
