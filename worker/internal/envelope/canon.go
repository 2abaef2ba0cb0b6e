package envelope

import "bytes"

// maxCanonDepth is the nesting canonicalJSON decides; deeper input takes
// HashBody's slow path.
const maxCanonDepth = 64

// canonicalJSON reports whether b is already the canonical JSON HashBody
// hashes, that is exactly what decoding b (UseNumber) into an any and
// json.Marshal give: no whitespace, object keys in strictly increasing
// byte order (no duplicates), strings of printable ASCII without escapes
// and without the characters json.Marshal escapes (<, >, &), numbers as
// written. Messages from the platform client are usually in that form, so
// that hashing their body costs a scan instead of a decode and an encode.
// It is conservative: false only means taking the slow path.
func canonicalJSON(b []byte) bool {
	c := canonScanner{b: b}
	return c.value(0) && c.i == len(b)
}

type canonScanner struct {
	b []byte
	i int
}

func (c *canonScanner) value(depth int) bool {
	if c.i >= len(c.b) || depth > maxCanonDepth {
		return false
	}
	switch ch := c.b[c.i]; {
	case ch == '"':
		_, ok := c.str()
		return ok
	case ch == '{':
		c.i++
		if c.i < len(c.b) && c.b[c.i] == '}' {
			c.i++
			return true
		}
		var prev []byte
		for first := true; ; first = false {
			key, ok := c.str()
			if !ok || !first && bytes.Compare(prev, key) >= 0 {
				return false
			}
			prev = key
			if c.i >= len(c.b) || c.b[c.i] != ':' {
				return false
			}
			c.i++
			if !c.value(depth + 1) {
				return false
			}
			if c.i >= len(c.b) {
				return false
			}
			ch := c.b[c.i]
			c.i++
			if ch == '}' {
				return true
			}
			if ch != ',' {
				return false
			}
		}
	case ch == '[':
		c.i++
		if c.i < len(c.b) && c.b[c.i] == ']' {
			c.i++
			return true
		}
		for {
			if !c.value(depth + 1) {
				return false
			}
			if c.i >= len(c.b) {
				return false
			}
			ch := c.b[c.i]
			c.i++
			if ch == ']' {
				return true
			}
			if ch != ',' {
				return false
			}
		}
	case ch == 't':
		return c.lit("true")
	case ch == 'f':
		return c.lit("false")
	case ch == 'n':
		return c.lit("null")
	case ch == '-' || isDigit(ch):
		return c.number()
	}
	return false
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (c *canonScanner) number() bool {
	if c.b[c.i] == '-' {
		c.i++
	}
	switch {
	case c.i < len(c.b) && c.b[c.i] == '0':
		c.i++
	case c.i < len(c.b) && isDigit(c.b[c.i]):
		c.digits()
	default:
		return false
	}
	if c.i < len(c.b) && c.b[c.i] == '.' {
		c.i++
		if !c.digits() {
			return false
		}
	}
	if c.i < len(c.b) && (c.b[c.i] == 'e' || c.b[c.i] == 'E') {
		c.i++
		if c.i < len(c.b) && (c.b[c.i] == '+' || c.b[c.i] == '-') {
			c.i++
		}
		if !c.digits() {
			return false
		}
	}
	return true
}

// digits scans one or more digits.
func (c *canonScanner) digits() bool {
	start := c.i
	for c.i < len(c.b) && isDigit(c.b[c.i]) {
		c.i++
	}
	return c.i > start
}

// str scans a string that json.Marshal would write as it is, returning its
// contents.
func (c *canonScanner) str() ([]byte, bool) {
	if c.i >= len(c.b) || c.b[c.i] != '"' {
		return nil, false
	}
	// The loop keeps its index in a local (not c.i, written back on
	// every byte).
	start := c.i + 1
	for i := start; i < len(c.b); i++ {
		switch ch := c.b[i]; {
		case ch == '"':
			c.i = i + 1
			return c.b[start:i], true
		case ch < 0x20 || ch >= 0x7f || ch == '\\' || ch == '<' || ch == '>' || ch == '&':
			return nil, false
		}
	}
	return nil, false
}

func (c *canonScanner) lit(word string) bool {
	if !bytes.HasPrefix(c.b[c.i:], []byte(word)) {
		return false
	}
	c.i += len(word)
	return true
}
