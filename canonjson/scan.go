package canonjson

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strconv"
	"unicode/utf8"
)

// ErrNotCanonical is returned by a Scanner when the text is not in canonical
// form. The text may still be valid JSON whose canonical form differs:
// callers fall back to a Decoder, which gives the canonical form or the
// reason the text is refused.
var ErrNotCanonical = errors.New("canonjson: not canonical")

// scanMaxDepth is the deepest nesting a Scanner follows; deeper values are
// reported as not canonical, so that a Decoder (which counts the depth of
// the whole document) gives the verdict near MaxDepth.
const scanMaxDepth = MaxDepth - 16

// Scanner checks, without copying, that text is already canonical: that
// Append would return it unchanged. It is the fast path for text a Decoder
// wrote before (stored bundles, exports): one pass over bytes in memory,
// no tokens, no output. It accepts only canonical text, and only object
// names without escapes; for anything else it returns ErrNotCanonical.
type Scanner struct {
	src   []byte
	pos   int
	depth int
}

// NewScanner returns a Scanner at the start of src.
func NewScanner(src []byte) *Scanner { return &Scanner{src: src} }

// Reset makes the Scanner read src from offset pos: a longer view of the
// same text, for a caller that gets the text in pieces.
func (s *Scanner) Reset(src []byte, pos int) { s.src, s.pos, s.depth = src, pos, 0 }

// Len is the length of the text the Scanner reads.
func (s *Scanner) Len() int { return len(s.src) }

// Pos is the offset of the next byte to read.
func (s *Scanner) Pos() int { return s.pos }

// Peek returns the next byte, or 0 at the end of the text.
func (s *Scanner) Peek() byte {
	if s.pos < len(s.src) {
		return s.src[s.pos]
	}
	return 0
}

// Skip consumes lit when the text continues with it and reports whether
// it did.
func (s *Scanner) Skip(lit string) bool {
	if len(s.src)-s.pos >= len(lit) && string(s.src[s.pos:s.pos+len(lit)]) == lit {
		s.pos += len(lit)
		return true
	}
	return false
}

// IsCanonical reports whether src is exactly one canonical JSON value, with
// nothing around it: Append would return it unchanged. False says only that
// a Scanner does not take it (Scanner's limits); a Decoder gives the verdict.
func IsCanonical(src []byte) bool {
	_, whole := scanWhole(src)
	return whole
}

// scanWhole runs a Scanner on src from its first byte: value says it took
// a canonical value there, whole that the value is all of src.
func scanWhole(src []byte) (value, whole bool) {
	s := Scanner{src: src}
	value = s.value(nil)
	return value, value && s.pos == len(src)
}

// Value checks the canonical value that starts at the current position and
// returns its bytes (a slice of the text).
func (s *Scanner) Value() ([]byte, error) {
	start := s.pos
	if !s.value(nil) {
		return nil, ErrNotCanonical
	}
	return s.src[start:s.pos], nil
}

// Object checks the canonical object that starts at the current position,
// calling visit (when not nil) with each member's name (without quotes; it
// has no escapes) and canonical value, in order, and returns the object's
// bytes. An error from visit is returned as it is.
func (s *Scanner) Object(visit func(name, value []byte) error) ([]byte, error) {
	start := s.pos
	if s.Peek() != '{' {
		return nil, ErrNotCanonical
	}
	var verr error
	if !s.object(visit, &verr) {
		if verr != nil {
			return nil, verr
		}
		return nil, ErrNotCanonical
	}
	return s.src[start:s.pos], nil
}

// value checks one value; verr receives visit's error of a top object.
func (s *Scanner) value(verr *error) bool {
	if s.pos >= len(s.src) {
		return false
	}
	switch c := s.src[s.pos]; {
	case c == '"':
		_, ok := s.str()
		return ok
	case c == '{':
		return s.object(nil, verr)
	case c == '[':
		return s.array()
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	case c == 't':
		return s.Skip("true")
	case c == 'f':
		return s.Skip("false")
	case c == 'n':
		return s.Skip("null")
	}
	return false
}

func (s *Scanner) object(visit func(name, value []byte) error, verr *error) bool {
	if s.depth >= scanMaxDepth {
		return false
	}
	s.depth++
	ok := s.members(visit, verr)
	s.depth--
	return ok
}

func (s *Scanner) members(visit func(name, value []byte) error, verr *error) bool {
	s.pos++ // '{'
	if s.Peek() == '}' {
		s.pos++
		return true
	}
	var prev []byte
	for first := true; ; first = false {
		if s.Peek() != '"' {
			return false
		}
		nameStart := s.pos + 1
		if escaped, ok := s.str(); !ok || escaped {
			return false
		}
		name := s.src[nameStart : s.pos-1]
		if !first && bytes.Compare(prev, name) >= 0 {
			return false // out of order, or a duplicate
		}
		prev = name
		if s.Peek() != ':' {
			return false
		}
		s.pos++
		vstart := s.pos
		if !s.value(nil) {
			return false
		}
		if visit != nil {
			if err := visit(name, s.src[vstart:s.pos]); err != nil {
				*verr = err
				return false
			}
		}
		switch s.Peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return true
		default:
			return false
		}
	}
}

func (s *Scanner) array() bool {
	if s.depth >= scanMaxDepth {
		return false
	}
	s.depth++
	ok := s.elements()
	s.depth--
	return ok
}

func (s *Scanner) elements() bool {
	s.pos++ // '['
	if s.Peek() == ']' {
		s.pos++
		return true
	}
	for {
		if !s.value(nil) {
			return false
		}
		switch s.Peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return true
		default:
			return false
		}
	}
}

// plain marks the bytes that a canonical string holds as they are and that
// need no further check: printable ASCII but '"' and '\\'.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// skipPlain returns the position of the first byte of src from i that is
// not plain: eight bytes at a time while a word holds only plain ones (a
// fingerprint, a key, most text), then byte by byte.
func skipPlain(src []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(src); i += 8 {
		x := binary.LittleEndian.Uint64(src[i:])
		quote, backslash := x^(ones*'"'), x^(ones*'\\')
		// A byte under 0x20, a zero byte of quote or backslash (a '"' or
		// a '\\'), or a byte from 0x80: the high bit of its lane is set.
		if ((x-ones*0x20)|(quote-ones)&^quote|(backslash-ones)&^backslash|x)&highs != 0 {
			break
		}
	}
	for i < len(src) && plain[src[i]] {
		i++
	}
	return i
}

// str checks a canonical string and reports whether it has escapes.
func (s *Scanner) str() (escaped, ok bool) {
	src := s.src
	start := s.pos + 1
	i := start
	high := false
	for {
		i = skipPlain(src, i)
		if i >= len(src) {
			return false, false
		}
		switch c := src[i]; {
		case c == '"':
			if high && !utf8.Valid(src[start:i]) {
				return false, false
			}
			s.pos = i + 1
			return escaped, true
		case c == '\\':
			if !canonicalEscape(src[i:]) {
				return false, false
			}
			escaped = true
			if src[i+1] == 'u' {
				i += 6
			} else {
				i += 2
			}
		case c < 0x20:
			return false, false
		default:
			high = true
			i++
		}
	}
}

// canonicalEscape reports whether e starts with an escape that AppendQuoted
// writes: \" \\ \n \r \t \b \f, or \u00xx (lowercase hex) for the other
// control characters.
func canonicalEscape(e []byte) bool {
	if len(e) < 2 {
		return false
	}
	switch e[1] {
	case '"', '\\', 'n', 'r', 't', 'b', 'f':
		return true
	case 'u':
	default:
		return false
	}
	if len(e) < 6 || e[2] != '0' || e[3] != '0' || e[4] != '0' && e[4] != '1' {
		return false
	}
	var lo byte
	switch c := e[5]; {
	case c >= '0' && c <= '9':
		lo = c - '0'
	case c >= 'a' && c <= 'f':
		lo = c - 'a' + 10
	default:
		return false
	}
	switch v := (e[4]-'0')<<4 | lo; v {
	case '\n', '\r', '\t', '\b', '\f':
		return false
	}
	return true
}

// number checks a canonical number: an integer as written (not -0, at
// most MaxIntDigits digits), or a double as AppendFloat writes it.
func (s *Scanner) number() bool {
	src := s.src
	start, i := s.pos, s.pos
	for i < len(src) && numberByte[src[i]] {
		i++
	}
	raw := src[start:i]
	intEnd, fracEnd, ok := numberSyntax(raw)
	if !ok {
		return false
	}
	s.pos = i
	if intEnd == len(raw) {
		n := intEnd
		if raw[0] == '-' {
			n--
		}
		return n <= MaxIntDigits && string(raw) != "-0"
	}
	if fracEnd == len(raw) && shortestFixed(raw[:intEnd], raw[intEnd+1:]) {
		return true
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		return false
	}
	var tmp [32]byte
	return bytes.Equal(AppendFloat(tmp[:0], f), raw)
}

// shortestFixed reports, without parsing, that a float written as
// intPart.frac (no exponent; intPart may start with '-') is in canonical
// form: at most 15 significant digits, so that no shorter decimal names
// the same float64 (every decimal of up to 15 digits round-trips), a value
// from 1e-4 up (fixed notation, not an exponent, as AppendFloat writes
// it), and no trailing zero in the fraction unless the fraction is "0" of
// a non-zero integer. Anything else (zero, exponents, long or tiny
// numbers) is left to the full check; false never means "not canonical".
func shortestFixed(intPart, frac []byte) bool {
	if len(intPart) > 0 && intPart[0] == '-' {
		intPart = intPart[1:]
	}
	if len(frac) == 0 || len(intPart) == 0 {
		return false
	}
	if intPart[0] != '0' && string(frac) == "0" {
		return len(intPart) <= 15 // an integer of up to 15 digits, exactly
	}
	if frac[len(frac)-1] == '0' {
		return false
	}
	if intPart[0] != '0' {
		return len(intPart)+len(frac) <= 15
	}
	lead := 0
	for lead < len(frac) && frac[lead] == '0' {
		lead++
	}
	return lead <= 3 && len(frac)-lead <= 15 // from 1e-4 up
}
