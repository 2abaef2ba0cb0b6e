// Package envelope is the worker's codec of the message stream: it reads
// an entry's envelope (message_id, type, reply_to and the raw body), hashes
// a message's body for its idempotency record, and encodes a reply's
// result. Each has a fast path for the messages the platform client sends
// (a validating scan, or a constant, instead of encoding/json's
// reflection) that gives byte for byte what encoding/json gives, and steps
// aside to encoding/json whenever it cannot decide alone.
//
// It imports nothing of the project but messages.
package envelope

import (
	"encoding/json"

	"github.com/pyrula/caseworker/messages"
)

// Parse decodes raw, the message field of a message stream entry, into an
// envelope with the result (and the error text) json.Unmarshal gives. A
// typical envelope is read once, by the scan that validates it, instead of
// a second time by encoding/json's reflection; the body is the raw JSON
// of the top-level body member (the last one, when there are several).
func Parse(raw string) (messages.Envelope, error) {
	p := scanner{s: raw}
	h, res := p.envelope()
	if res == peekOK && !p.deep {
		env := messages.Envelope{MessageID: h.MessageID, Type: messages.MessageType(h.Type), ReplyTo: h.ReplyTo}
		if p.hasBody {
			env.Body = json.RawMessage(p.body)
		}
		return env, nil
	}
	var env messages.Envelope
	err := json.Unmarshal([]byte(raw), &env)
	return env, err
}

// Header holds the members of an envelope that name and route a message,
// decoded as Parse decodes them.
type Header struct {
	MessageID, Type, ReplyTo string
}

// PeekHeader reads the message_id, type and reply_to members of raw as
// Parse would decode them, and reports whether Parse succeeds (ok false:
// raw is not a JSON envelope). For a typical envelope it allocates
// nothing, so that counting a received message costs the read loop almost
// nothing; what the scan does not decide alone (escapes, keys matching a
// member only case-insensitively, very deep nesting) encoding/json does.
func PeekHeader(raw string) (h Header, ok bool) {
	h, res := peekEnvelope(raw)
	switch res {
	case peekOK:
		return h, true
	case peekInvalid:
		return Header{}, false
	}
	var full struct {
		MessageID string `json:"message_id"`
		Type      string `json:"type"`
		ReplyTo   string `json:"reply_to"`
	}
	if json.Unmarshal([]byte(raw), &full) != nil {
		return Header{}, false
	}
	return Header(full), true
}
