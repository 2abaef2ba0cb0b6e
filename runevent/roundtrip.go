package runevent

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/pyrula/caseworker/canonjson"
)

// RoundTrip returns the event that decoding e's JSON gives, Decode of
// AppendJSON of e: what a journal gives back for e once it has stored it
// (At in UTC to the microsecond, raw values canonical, fields that are not
// of the kind dropped, invalid UTF-8 replaced), or AppendJSON's error. It
// does not encode the event when it need not (the common case: raw values
// already canonical, strings valid UTF-8, no Extra member named like a
// member of the kind), and then shares e's Call, raw values and Extra.
func (e Event) RoundTrip() (Event, error) {
	if out, ok := e.roundTripFast(); ok {
		return out, nil
	}
	raw, err := e.AppendJSON(nil)
	if err != nil {
		return Event{}, err
	}
	return Decode(raw)
}

// roundTripFast is RoundTrip without encoding; ok is false when it cannot
// tell (or AppendJSON would fail).
func (e *Event) roundTripFast() (out Event, ok bool) {
	if e.checkHead() != nil {
		return Event{}, false
	}
	out = Event{Kind: e.Kind, At: Truncate(e.At)}
	if e.RunSeq > 0 {
		out.RunSeq = e.RunSeq
	}
	ok = true
	for _, m := range membersOf(e.Kind) {
		src, _ := e.sourceOf(m)
		switch src {
		case fromExtra:
			return Event{}, false // Decode decides between the field and Extra
		case left:
			if !optional.has(m) {
				out.lacking |= 1 << m
			}
			continue
		case fromDefault:
			if m == mResult {
				out.Result = json.RawMessage("null") // null is kept as a result
			}
			continue
		}
		switch m {
		case mCall:
			out.Call = e.Call
			if !callValid(e.Call) {
				return Event{}, false
			}
		case mCode:
			out.Code, ok = e.Code, utf8.ValidString(string(e.Code))
		case mCodeVersion:
			out.CodeVersion, ok = e.CodeVersion, utf8.ValidString(e.CodeVersion)
		case mInput:
			out.Input, ok = canonicalRaw(e.Input)
		case mInputs:
			out.Inputs, ok = canonicalRaw(e.Inputs)
		case mMessage:
			out.Message, ok = e.Message, utf8.ValidString(e.Message)
		case mProvenance:
			out.Provenance, ok = e.Provenance, utf8.ValidString(e.Provenance)
		case mResult:
			out.Result, ok = e.Result, canonjson.IsCanonical(e.Result)
		case mSeq:
			out.CallSeq = e.CallSeq
		case mStopKey:
			out.StopKey, ok = e.StopKey, utf8.ValidString(e.StopKey)
		case mStopToken:
			out.StopToken, ok = e.StopToken, utf8.ValidString(e.StopToken)
		case mTool:
			out.Tool, ok = e.Tool, utf8.ValidString(e.Tool)
		case mWakeAt:
			out.WakeAt, ok = e.WakeAt.UTC(), yearOK(e.WakeAt)
		}
		if !ok {
			return Event{}, false
		}
	}
	if len(e.Extra) == 0 {
		return out, true
	}
	for name, v := range e.Extra {
		if _, ours := memberOf(e.Kind, name); ours || reserved(name) || !utf8.ValidString(name) || len(v) == 0 || !canonjson.IsCanonical(v) {
			return Event{}, false
		}
	}
	out.Extra = e.Extra
	return out, true
}

// canonicalRaw is the field Decode gives for v, a canonical raw value
// (null is nil); ok is false when v is not canonical.
func canonicalRaw(v json.RawMessage) (json.RawMessage, bool) {
	if string(v) == "null" {
		return nil, true
	}
	return v, canonjson.IsCanonical(v)
}

// callValid reports whether c's strings are valid UTF-8.
func callValid(c *Call) bool {
	return utf8.ValidString(string(c.Kind)) && utf8.ValidString(c.Key) &&
		utf8.ValidString(c.Fingerprint) && utf8.ValidString(string(c.Effect))
}
