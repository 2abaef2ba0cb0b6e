package envelope

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
	"unsafe"

	"github.com/pyrula/caseworker/messages"
)

// HashBody is the SHA-256 (hex) of env's type, a zero byte and the
// canonical JSON of its body (keys sorted, numbers as written, an empty
// body as null), so that a resend with other spacing or key order is the
// same message; message_id and reply_to do not count. The body is the raw
// JSON value Parse gives. One holding invalid UTF-8 or a lone surrogate
// escape is refused (encoding/json would decode either to U+FFFD, and two
// different bodies would hash alike), as is one that does not decode.
func HashBody(env messages.Envelope) (string, error) {
	return hashBody(string(env.Type), env.Body)
}

// HashMessage is HashBody of m.Envelope(), without its copy of the body.
func HashMessage(m Message) (string, error) {
	// The hash only reads the body: its bytes are viewed, not copied.
	return hashBody(m.Type, unsafe.Slice(unsafe.StringData(m.Body), len(m.Body)))
}

// hashBody is HashBody of type typ and body; it neither keeps nor changes
// body.
func hashBody(typ string, body []byte) (string, error) {
	// A body already in canonical form (canon.go) is hashed as it is.
	canon := body
	if !canonicalJSON(canon) {
		if err := checkBodyText(body); err != nil {
			return "", err
		}
		var err error
		if canon, err = canonicalize(body); err != nil {
			return "", err
		}
	}
	h := sha256.New()
	h.Write([]byte(typ))
	h.Write([]byte{0})
	h.Write(canon)
	var sum [sha256.Size]byte
	var text [2 * sha256.Size]byte
	hex.Encode(text[:], h.Sum(sum[:0]))
	return string(text[:]), nil
}

// checkBodyText refuses a body (JSON text) holding invalid UTF-8 or a
// lone surrogate escape ("\ud800" without its pair, "\udc00" alone): text
// that is not Unicode, which decoding would replace by U+FFFD. The body's
// JSON syntax is checked by its decoding, not here.
func checkBodyText(body []byte) error {
	if !utf8.Valid(body) {
		return errors.New("not valid UTF-8")
	}
	if !bytes.Contains(body, []byte(`\u`)) {
		return nil
	}
	in := false
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case !in:
			in = c == '"'
		case c == '"':
			in = false
		case c == '\\' && i+1 < len(body):
			i++
			if body[i] != 'u' {
				continue
			}
			r, ok := hex4(body[i+1:])
			if !ok {
				continue // not a valid escape: decoding refuses it
			}
			i += 4
			switch {
			case r >= 0xdc00 && r <= 0xdfff:
				return fmt.Errorf("lone surrogate escape \\u%04x", r)
			case r >= 0xd800 && r <= 0xdbff:
				lo, ok := uint16(0), false
				if i+2 < len(body) && body[i+1] == '\\' && body[i+2] == 'u' {
					lo, ok = hex4(body[i+3:])
				}
				if !ok || lo < 0xdc00 || lo > 0xdfff {
					return fmt.Errorf("lone surrogate escape \\u%04x", r)
				}
				i += 6
			}
		}
	}
	return nil
}

// hex4 decodes the four hex digits at the start of b.
func hex4(b []byte) (uint16, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r uint16
	for _, c := range b[:4] {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | uint16(d)
	}
	return r, true
}

// canonicalize is the canonical JSON of body: decoded (numbers as written)
// and encoded again by encoding/json (keys sorted, no spaces); an empty
// body is null.
func canonicalize(body []byte) ([]byte, error) {
	var v any
	if len(bytes.TrimSpace(body)) > 0 {
		d := json.NewDecoder(bytes.NewReader(body))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			return nil, err
		}
	}
	return json.Marshal(v)
}
