package envelope

import (
	"encoding/json"

	"github.com/pyrula/caseworker/messages"
)

// EncodeResult is json.Marshal(result), the result member of an ok reply,
// without reflection for the results of delete_case_bundle.
func EncodeResult(result any) ([]byte, error) {
	if r, ok := result.(messages.DeleteCaseBundleResult); ok {
		if r.Deleted {
			return []byte(`{"deleted":true}`), nil
		}
		return []byte(`{"deleted":false}`), nil
	}
	return json.Marshal(result)
}

// EncodeReply is json.Marshal(r), without reflection when none of r's
// strings needs escaping and its result is compact JSON without characters
// that json.Marshal escapes: the replies the worker makes itself. Any
// other reply goes through json.Marshal.
func EncodeReply(r messages.Reply) ([]byte, error) {
	b, err := AppendReply(make([]byte, 0, 64+len(r.MessageID)+len(r.Message)+len(r.EntryID)+len(r.Result)), r)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// AppendReply appends EncodeReply(r) to b and returns the extended b, so
// that a caller can encode a reply into a buffer of its own (the
// idempotency record that holds it) without an allocation of the reply's.
func AppendReply(b []byte, r messages.Reply) ([]byte, error) {
	if !plainString(r.MessageID) || !plainString(string(r.Type)) || !plainString(string(r.Status)) ||
		!plainString(string(r.Code)) || !plainString(r.Message) || !plainString(r.EntryID) || !plainResult(r.Result) {
		raw, err := json.Marshal(r)
		if err != nil {
			return b, err
		}
		return append(b, raw...), nil
	}
	b = append(b, `{"message_id":"`...)
	b = append(b, r.MessageID...)
	b = append(b, `","type":"`...)
	b = append(b, r.Type...)
	b = append(b, `","status":"`...)
	b = append(b, r.Status...)
	b = append(b, '"')
	for _, m := range [...]struct{ name, value string }{{"code", string(r.Code)}, {"message", r.Message}, {"entry_id", r.EntryID}} {
		if m.value != "" {
			b = append(b, `,"`...)
			b = append(b, m.name...)
			b = append(b, `":"`...)
			b = append(b, m.value...)
			b = append(b, '"')
		}
	}
	if len(r.Result) > 0 {
		b = append(b, `,"result":`...)
		b = append(b, r.Result...)
	}
	return append(b, '}'), nil
}

// plainString reports whether json.Marshal writes s as it is, between
// quotes: printable ASCII without the quote, the backslash and the
// characters it escapes for HTML.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// plainResult reports whether json.Marshal writes raw, a json.RawMessage,
// as it is: valid JSON of printable ASCII without whitespace between its
// tokens (or anywhere) and without the characters it escapes for HTML.
func plainResult(raw json.RawMessage) bool {
	for _, c := range raw {
		if c <= 0x20 || c > 0x7e || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return len(raw) == 0 || json.Valid(raw)
}
