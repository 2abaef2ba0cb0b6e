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
	m, err := ParseMessage(raw)
	return m.Envelope(), err
}

// Message is an envelope as ParseMessage reads it: its header, and its
// body as text ("" when there is none). Read by the scan, the body is a
// part of the text read, not a copy.
type Message struct {
	Header
	Body string
}

// ParseMessage is Parse without a copy of the body: for a typical
// envelope it allocates nothing.
func ParseMessage(raw string) (Message, error) {
	p := scanner{s: raw}
	h, res := p.envelope()
	if res == peekOK && !p.deep {
		m := Message{Header: h}
		if p.hasBody {
			m.Body = p.body
		}
		return m, nil
	}
	var env messages.Envelope
	err := json.Unmarshal([]byte(raw), &env)
	return Message{Header: Header{MessageID: env.MessageID, Type: string(env.Type), ReplyTo: env.ReplyTo}, Body: string(env.Body)}, err
}

// Envelope is m as Parse gives it: the body, when there is one, copied
// into Body.
func (m Message) Envelope() messages.Envelope {
	env := messages.Envelope{MessageID: m.MessageID, Type: messages.MessageType(m.Type), ReplyTo: m.ReplyTo}
	if m.Body != "" {
		env.Body = json.RawMessage(m.Body)
	}
	return env
}

// Header holds the members of an envelope that name and route a message,
// decoded as Parse decodes them.
type Header struct {
	MessageID, Type, ReplyTo string
}
