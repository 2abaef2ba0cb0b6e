package envelope

import (
	"strings"
	"unicode/utf8"
)

// The results of peekEnvelope.
const (
	// peekOK: raw is valid JSON and the members are as encoding/json
	// would decode them into messages.Envelope.
	peekOK = iota
	// peekInvalid: encoding/json would fail to decode raw into
	// messages.Envelope (not JSON, or a member of the wrong type).
	peekInvalid
	// peekUnsure: the scan does not decide alone (escapes in a key or a
	// member, a key matching a member only case-insensitively, a non-ASCII
	// key, a member that is not valid UTF-8, very deep nesting); decode
	// with encoding/json.
	peekUnsure
)

// maxPeekDepth is the nesting the scan decides; deeper input is left to
// encoding/json (whose own limit, 10000, is well above it).
const maxPeekDepth = 1000

// peekEnvelope validates raw as JSON and reads the message_id, type and
// reply_to members of its top-level object with the result encoding/json
// would give (the last of duplicate members wins, null leaves a member
// unset, a top-level value other than an object sets none), without
// allocating.
func peekEnvelope(raw string) (Header, int) {
	p := scanner{s: raw}
	env, res := p.envelope()
	if p.deep {
		return env, peekUnsure
	}
	return env, res
}

// envelope is the scan of peekEnvelope and Parse.
func (p *scanner) envelope() (Header, int) {
	var env Header
	p.ws()
	if !p.more() || p.s[p.i] != '{' {
		// Not an object: encoding/json fails or (null) sets nothing.
		if !p.value(0) || !p.end() {
			return env, peekInvalid
		}
		if p.unsure {
			return env, peekUnsure
		}
		if strings.TrimSpace(p.s) == "null" {
			return env, peekOK
		}
		return env, peekInvalid
	}
	p.i++
	p.ws()
	if p.more() && p.s[p.i] == '}' {
		p.i++
		return env, p.result(p.end())
	}
	typeErr := false
	for {
		p.ws()
		key, escaped, ok := p.str()
		if !ok {
			return env, peekInvalid
		}
		var member *string
		switch key {
		case "message_id":
			member = &env.MessageID
		case "type":
			member = &env.Type
		case "reply_to":
			member = &env.ReplyTo
		default:
			if escaped || !ascii(key) || strings.EqualFold(key, "message_id") || strings.EqualFold(key, "type") ||
				strings.EqualFold(key, "reply_to") || (key != "body" && strings.EqualFold(key, "body")) {
				p.unsure = true
			}
		}
		if escaped && member != nil {
			p.unsure = true
		}
		p.ws()
		if !p.more() || p.s[p.i] != ':' {
			return env, peekInvalid
		}
		p.i++
		p.ws()
		if member != nil && p.more() {
			switch p.s[p.i] {
			case '"':
				v, esc, ok := p.str()
				if !ok {
					return env, peekInvalid
				}
				if esc || !utf8.ValidString(v) {
					p.unsure = true
				}
				*member = v
			case 'n': // null leaves the member as it is
				if !p.value(1) {
					return env, peekInvalid
				}
			default:
				typeErr = true // decoding goes on, then fails
				if !p.value(1) {
					return env, peekInvalid
				}
			}
		} else {
			start := p.i
			if !p.value(1) {
				return env, peekInvalid
			}
			if key == "body" && !escaped {
				p.body, p.hasBody = p.s[start:p.i], true // the last one wins
			}
		}
		p.ws()
		if !p.more() {
			return env, peekInvalid
		}
		c := p.s[p.i]
		p.i++
		if c == '}' {
			break
		}
		if c != ',' {
			return env, peekInvalid
		}
	}
	if !p.end() {
		return env, peekInvalid
	}
	if p.unsure {
		return env, peekUnsure
	}
	if typeErr {
		return env, peekInvalid
	}
	return env, peekOK
}

// ascii reports whether s is all ASCII.
func ascii(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// scanner is a validating JSON scanner over s from i.
type scanner struct {
	s      string
	i      int
	unsure bool // the scan found something encoding/json must decide
	deep   bool // nesting deeper than maxPeekDepth
	// body is the raw value of the top-level body member, when hasBody.
	body    string
	hasBody bool
}

func (p *scanner) more() bool { return p.i < len(p.s) }

// result is peekOK, or peekUnsure when the scan was unsure, given that the
// input is valid so far (ok).
func (p *scanner) result(ok bool) int {
	switch {
	case !ok:
		return peekInvalid
	case p.unsure:
		return peekUnsure
	}
	return peekOK
}

// ws skips JSON whitespace.
func (p *scanner) ws() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// end skips trailing whitespace and reports whether the input ends there.
func (p *scanner) end() bool {
	p.ws()
	return p.i == len(p.s)
}

// str scans a string at i, returning its contents between the quotes
// (escapes left as they are, and reported).
func (p *scanner) str() (v string, escaped, ok bool) {
	if !p.more() || p.s[p.i] != '"' {
		return "", false, false
	}
	p.i++
	start := p.i
	for p.i < len(p.s) {
		// The plain bytes in a local loop (not p.i, written back on every
		// byte).
		i := p.i
		for i < len(p.s) && p.s[i] >= 0x20 && p.s[i] != '"' && p.s[i] != '\\' {
			i++
		}
		if p.i = i; i == len(p.s) {
			break
		}
		c := p.s[i]
		switch {
		case c == '"':
			v = p.s[start:p.i]
			p.i++
			return v, escaped, true
		case c < 0x20:
			return "", false, false
		case c == '\\':
			escaped = true
			p.i++
			if !p.more() {
				return "", false, false
			}
			switch p.s[p.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.i++
			case 'u':
				p.i++
				for range 4 {
					if !p.more() || !isHex(p.s[p.i]) {
						return "", false, false
					}
					p.i++
				}
			default:
				return "", false, false
			}
		}
	}
	return "", false, false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// value scans one JSON value at i (after whitespace), depth levels deep.
func (p *scanner) value(depth int) bool {
	if depth > maxPeekDepth {
		p.deep = true
		return false
	}
	p.ws()
	if !p.more() {
		return false
	}
	switch c := p.s[p.i]; {
	case c == '"':
		_, _, ok := p.str()
		return ok
	case c == '{':
		return p.container(depth, '}', true)
	case c == '[':
		return p.container(depth, ']', false)
	case c == 't':
		return p.lit("true")
	case c == 'f':
		return p.lit("false")
	case c == 'n':
		return p.lit("null")
	case c == '-' || isDigit(c):
		return p.number()
	}
	return false
}

// container scans an object (keyed) or an array ending in closer.
func (p *scanner) container(depth int, closer byte, keyed bool) bool {
	p.i++
	p.ws()
	if p.more() && p.s[p.i] == closer {
		p.i++
		return true
	}
	for {
		if keyed {
			p.ws()
			if _, _, ok := p.str(); !ok {
				return false
			}
			p.ws()
			if !p.more() || p.s[p.i] != ':' {
				return false
			}
			p.i++
		}
		if !p.value(depth + 1) {
			return false
		}
		p.ws()
		if !p.more() {
			return false
		}
		c := p.s[p.i]
		p.i++
		if c == closer {
			return true
		}
		if c != ',' {
			return false
		}
	}
}

func (p *scanner) lit(word string) bool {
	if !strings.HasPrefix(p.s[p.i:], word) {
		return false
	}
	p.i += len(word)
	return true
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *scanner) number() bool {
	if p.s[p.i] == '-' {
		p.i++
	}
	if !p.more() {
		return false
	}
	if p.s[p.i] == '0' {
		p.i++
	} else if isDigit(p.s[p.i]) {
		for p.more() && isDigit(p.s[p.i]) {
			p.i++
		}
	} else {
		return false
	}
	if p.more() && p.s[p.i] == '.' {
		p.i++
		if !p.more() || !isDigit(p.s[p.i]) {
			return false
		}
		for p.more() && isDigit(p.s[p.i]) {
			p.i++
		}
	}
	if p.more() && (p.s[p.i] == 'e' || p.s[p.i] == 'E') {
		p.i++
		if p.more() && (p.s[p.i] == '+' || p.s[p.i] == '-') {
			p.i++
		}
		if !p.more() || !isDigit(p.s[p.i]) {
			return false
		}
		for p.more() && isDigit(p.s[p.i]) {
			p.i++
		}
	}
	return true
}
