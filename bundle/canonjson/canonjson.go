// Package canonjson writes canonical JSON: byte-for-byte what Python's
// json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
// writes for the value json.loads reads from the same text, with the rules
// and refusals of docs/bundle-format.md. It is the basis of bundle hashes and call
// fingerprints. It imports nothing of the project.
//
// The rules, in short: object keys sorted by code point, no whitespace;
// strings as raw UTF-8 with only '"', '\\' and U+0000–U+001F escaped
// (\n \r \t \b \f, else \u00XX in lowercase hex); integers keep every digit
// ("-0" becomes "0"); other numbers are parsed as IEEE doubles and written as
// Python's repr of that double (100.0, 1e-05, 1e+16, -0.0). Input that Python
// would read differently from the text, or that Go cannot represent the same
// way, is refused: invalid UTF-8, lone surrogate escapes, NaN and Infinity,
// numbers that overflow a double, duplicate keys, nesting deeper than
// MaxDepth, integers longer than MaxIntDigits.
//
// The work is a single pass over jsontext tokens that appends canonical bytes
// to one buffer; an object whose members arrive out of order is reordered in
// place when it closes, so canonical input costs no extra copy.
package canonjson

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// Limits that match what CPython accepts.
const (
	// MaxDepth is the deepest nesting of arrays and objects accepted.
	MaxDepth = 1000
	// MaxIntDigits is the most digits an integer may have (CPython's
	// int max_str_digits default).
	MaxIntDigits = 4300
)

// ErrInvalid is wrapped by every error about the input text: invalid JSON,
// invalid UTF-8, lone surrogates, NaN/Infinity, overflowing numbers,
// duplicate object keys, too deep nesting, too long integers.
var ErrInvalid = errors.New("canonjson: invalid input")

// ErrTooLarge is wrapped when the canonical output would pass the limit set
// with Decoder.SetMaxOutput.
var ErrTooLarge = errors.New("canonjson: output too large")

// Append appends the canonical form of the single JSON value in src to dst.
// Whitespace around the value is allowed; anything else after it is an error.
func Append(dst, src []byte) ([]byte, error) {
	if cap(dst)-len(dst) < len(src) {
		dst = slices.Grow(dst, len(src))
	}
	d := NewDecoder(bytes.NewReader(src))
	out, err := d.AppendValue(dst)
	if err != nil {
		return dst, err
	}
	if err := d.CheckEOF(); err != nil {
		return dst, err
	}
	return out, nil
}

// Canonicalize returns the canonical form of the JSON value in src.
func Canonicalize(src []byte) ([]byte, error) { return Append(nil, src) }

// Decoder reads JSON text from a stream and appends canonical forms of its
// values. Callers that need to see structure (the bundle package reads the
// top of a bundle itself) mix ReadToken, ReadName and AppendValue.
type Decoder struct {
	dec       *jsontext.Decoder
	maxOut    int
	scratch   []byte     // reorder buffer for objects
	unquoted  []byte     // unescaped string buffer
	members   [][]member // per depth, reused
	names     [][]byte   // reorder's sort keys, reused
	idx       []int      // reorder's permutation, reused
	baseDepth int        // jsontext stack depth when AppendValue started
}

// member locates one object member in the output buffer.
type member struct {
	start   int    // offset of the name's opening quote
	nameEnd int    // offset just past the name's closing quote
	end     int    // offset just past the value
	key     []byte // the unescaped name, set only when the canonical name has escapes
}

// NewDecoder returns a Decoder reading from r.
func NewDecoder(r io.Reader) *Decoder {
	return &Decoder{dec: jsontext.NewDecoder(r), maxOut: math.MaxInt}
}

// SetMaxOutput makes AppendValue fail with ErrTooLarge once the buffer it
// appends to grows past n bytes.
func (d *Decoder) SetMaxOutput(n int64) {
	if n > 0 && n < math.MaxInt {
		d.maxOut = int(n)
	}
}

// Kind of the next token: '{', '}', '[', ']', '"', '0', 'n', 't', 'f', or 0
// at the end of input or on error.
func (d *Decoder) PeekKind() byte { return byte(d.dec.PeekKind()) }

// ReadDelim reads the next token, which must be the delimiter want ('{',
// '}', '[' or ']').
func (d *Decoder) ReadDelim(want byte) error {
	tok, err := d.dec.ReadToken()
	if err != nil {
		return d.wrap(err)
	}
	if byte(tok.Kind()) != want {
		return fmt.Errorf("%w: expected %q at byte %d, found %s", ErrInvalid, want, d.dec.InputOffset(), tok.Kind())
	}
	return nil
}

// ReadName reads an object member name and returns it unescaped. The
// returned slice is valid until the next call on d.
func (d *Decoder) ReadName() ([]byte, error) {
	raw, err := d.dec.ReadValue()
	if err != nil {
		return nil, d.wrap(err)
	}
	if len(raw) == 0 || raw[0] != '"' {
		return nil, fmt.Errorf("%w: expected a name at byte %d", ErrInvalid, d.dec.InputOffset())
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw[1 : len(raw)-1], nil
	}
	d.unquoted, err = jsontext.AppendUnquote(d.unquoted[:0], raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return d.unquoted, nil
}

// InputOffset is the number of input bytes read so far.
func (d *Decoder) InputOffset() int64 { return d.dec.InputOffset() }

// CheckEOF returns an error unless only whitespace remains in the input.
func (d *Decoder) CheckEOF() error {
	_, err := d.dec.ReadToken()
	if err == io.EOF {
		return nil
	}
	if err != nil {
		return d.wrap(err)
	}
	return fmt.Errorf("%w: unexpected data after the top-level value at byte %d", ErrInvalid, d.dec.InputOffset())
}

// AppendValue reads the next complete value and appends its canonical form
// to dst. On error the returned slice is dst as it was given.
func (d *Decoder) AppendValue(dst []byte) ([]byte, error) {
	d.baseDepth = d.dec.StackDepth()
	n := len(dst)
	out, err := d.appendValue(dst)
	if err != nil {
		return dst[:n], err
	}
	return out, nil
}

// AppendObject reads the next value, which must be an object, and appends
// its canonical form to dst, calling visit (when not nil) with each member's
// unescaped name and canonical value before the members are sorted. The
// slices passed to visit are valid only during the call.
func (d *Decoder) AppendObject(dst []byte, visit func(name, value []byte) error) ([]byte, error) {
	d.baseDepth = d.dec.StackDepth()
	n := len(dst)
	if d.PeekKind() != '{' {
		if err := d.peekErr(); err != nil {
			return dst, err
		}
		return dst, fmt.Errorf("%w: expected an object at byte %d", ErrInvalid, d.dec.InputOffset())
	}
	out, err := d.appendObject(dst, visit)
	if err != nil {
		return dst[:n], err
	}
	return out, nil
}

func (d *Decoder) appendValue(dst []byte) ([]byte, error) {
	switch k := d.dec.PeekKind(); k {
	case '{':
		return d.appendObject(dst, nil)
	case '[':
		return d.appendArray(dst)
	case '"':
		raw, err := d.dec.ReadValue()
		if err != nil {
			return dst, d.wrap(err)
		}
		dst, _, err = d.appendString(dst, raw)
		return dst, err
	case '0':
		raw, err := d.dec.ReadValue()
		if err != nil {
			return dst, d.wrap(err)
		}
		return appendNumber(dst, raw)
	case 'n', 't', 'f':
		raw, err := d.dec.ReadValue()
		if err != nil {
			return dst, d.wrap(err)
		}
		return append(dst, raw...), nil
	default:
		if err := d.peekErr(); err != nil {
			return dst, err
		}
		return dst, fmt.Errorf("%w: unexpected %s at byte %d", ErrInvalid, jsontext.Kind(k), d.dec.InputOffset())
	}
}

// peekErr finds out why PeekKind returned no kind.
func (d *Decoder) peekErr() error {
	_, err := d.dec.ReadToken()
	if err == io.EOF {
		return fmt.Errorf("%w: unexpected end of input", ErrInvalid)
	}
	if err != nil {
		return d.wrap(err)
	}
	return nil
}

func (d *Decoder) checkDepth() error {
	if d.dec.StackDepth() > MaxDepth {
		return fmt.Errorf("%w: nesting deeper than %d levels at byte %d", ErrInvalid, MaxDepth, d.dec.InputOffset())
	}
	return nil
}

func (d *Decoder) appendArray(dst []byte) ([]byte, error) {
	if _, err := d.dec.ReadToken(); err != nil {
		return dst, d.wrap(err)
	}
	if err := d.checkDepth(); err != nil {
		return dst, err
	}
	dst = append(dst, '[')
	first := true
	for {
		if d.dec.PeekKind() == ']' {
			break
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		var err error
		if dst, err = d.appendValue(dst); err != nil {
			return dst, err
		}
		if len(dst) > d.maxOut {
			return dst, ErrTooLarge
		}
	}
	if _, err := d.dec.ReadToken(); err != nil {
		return dst, d.wrap(err)
	}
	return append(dst, ']'), nil
}

func (d *Decoder) appendObject(dst []byte, visit func(name, value []byte) error) ([]byte, error) {
	if _, err := d.dec.ReadToken(); err != nil {
		return dst, d.wrap(err)
	}
	if err := d.checkDepth(); err != nil {
		return dst, err
	}
	level := d.dec.StackDepth() - d.baseDepth
	for len(d.members) <= level {
		d.members = append(d.members, nil)
	}
	ms := d.members[level][:0]
	dst = append(dst, '{')
	bodyStart := len(dst)
	sorted := true
	for d.dec.PeekKind() != '}' {
		if len(ms) > 0 {
			dst = append(dst, ',')
		}
		raw, err := d.dec.ReadValue()
		if err != nil {
			return dst, d.wrap(err)
		}
		m := member{start: len(dst)}
		var escaped bool
		if dst, escaped, err = d.appendString(dst, raw); err != nil {
			return dst, err
		}
		m.nameEnd = len(dst)
		if escaped {
			m.key = bytes.Clone(d.unquoted)
		}
		dst = append(dst, ':')
		valueStart := len(dst)
		if dst, err = d.appendValue(dst); err != nil {
			return dst, err
		}
		m.end = len(dst)
		if visit != nil {
			if err := visit(m.name(dst), dst[valueStart:m.end]); err != nil {
				return dst, err
			}
		}
		if len(ms) > 0 && bytes.Compare(ms[len(ms)-1].name(dst), m.name(dst)) > 0 {
			sorted = false
		}
		ms = append(ms, m)
		if len(dst) > d.maxOut {
			return dst, ErrTooLarge
		}
	}
	if _, err := d.dec.ReadToken(); err != nil {
		return dst, d.wrap(err)
	}
	if !sorted {
		d.reorder(dst, bodyStart, ms)
	}
	d.members[level] = ms[:0]
	return append(dst, '}'), nil
}

// name returns the member's unescaped name.
func (m *member) name(buf []byte) []byte {
	if m.key != nil {
		return m.key
	}
	return buf[m.start+1 : m.nameEnd-1]
}

// reorder rewrites the members in buf[bodyStart:] in sorted order. The
// length of the body does not change.
func (d *Decoder) reorder(buf []byte, bodyStart int, ms []member) {
	d.scratch = append(d.scratch[:0], buf[bodyStart:]...)
	old := d.scratch
	names := d.names[:0]
	idx := d.idx[:0]
	for i, m := range ms {
		name := m.key
		if m.key == nil {
			name = old[m.start-bodyStart+1 : m.nameEnd-bodyStart-1]
		}
		names = append(names, name)
		idx = append(idx, i)
	}
	d.names, d.idx = names, idx
	sortIndexes(idx, names)
	w := bodyStart
	for i, j := range idx {
		if i > 0 {
			buf[w] = ','
			w++
		}
		w += copy(buf[w:], old[ms[j].start-bodyStart:ms[j].end-bodyStart])
	}
}

// sortIndexes sorts idx by names[idx[i]] in byte order (code-point order
// for UTF-8).
func sortIndexes(idx []int, names [][]byte) {
	// Insertion sort for the common small object.
	if len(idx) < 12 {
		for i := 1; i < len(idx); i++ {
			for j := i; j > 0 && bytes.Compare(names[idx[j-1]], names[idx[j]]) > 0; j-- {
				idx[j-1], idx[j] = idx[j], idx[j-1]
			}
		}
		return
	}
	slices.SortFunc(idx, func(a, b int) int { return bytes.Compare(names[a], names[b]) })
}

// appendString appends the canonical form of the raw JSON string raw (with
// quotes) and reports whether the canonical form differs from the unescaped
// value (then d.unquoted holds the unescaped value).
func (d *Decoder) appendString(dst, raw []byte) ([]byte, bool, error) {
	if bytes.IndexByte(raw, '\\') < 0 {
		// jsontext has checked that raw is valid UTF-8 with no raw control
		// characters: it is already canonical.
		return append(dst, raw...), false, nil
	}
	var err error
	d.unquoted, err = jsontext.AppendUnquote(d.unquoted[:0], raw)
	if err != nil {
		return dst, false, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if !utf8.Valid(d.unquoted) {
		return dst, false, fmt.Errorf("%w: string is not valid UTF-8", ErrInvalid)
	}
	return AppendQuoted(dst, d.unquoted), true, nil
}

// AppendQuoted appends s (valid UTF-8) as a canonical JSON string.
func AppendQuoted(dst, s []byte) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	last := 0
	for i, c := range s {
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[last:i]...)
		last = i + 1
		switch c {
		case '"':
			dst = append(dst, '\\', '"')
		case '\\':
			dst = append(dst, '\\', '\\')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
	}
	dst = append(dst, s[last:]...)
	return append(dst, '"')
}

// appendNumber appends the canonical form of the raw JSON number raw.
func appendNumber(dst, raw []byte) ([]byte, error) {
	if !bytes.ContainsAny(raw, ".eE") {
		digits := len(raw)
		if raw[0] == '-' {
			digits--
		}
		if digits > MaxIntDigits {
			return dst, fmt.Errorf("%w: integer of %d digits (more than %d)", ErrInvalid, digits, MaxIntDigits)
		}
		if len(raw) == 2 && raw[0] == '-' && raw[1] == '0' {
			return append(dst, '0'), nil
		}
		return append(dst, raw...), nil
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		// Syntax was checked by jsontext, so this is a range error; only
		// overflow reports one (underflow rounds to zero, as Python does).
		return dst, fmt.Errorf("%w: number %.40s overflows a double", ErrInvalid, raw)
	}
	return AppendFloat(dst, f), nil
}

// AppendFloat appends f as Python's repr writes it (f must be finite).
func AppendFloat(dst []byte, f float64) []byte {
	if f == 0 {
		if math.Signbit(f) {
			return append(dst, "-0.0"...)
		}
		return append(dst, "0.0"...)
	}
	var tmp [32]byte
	e := strconv.AppendFloat(tmp[:0], f, 'e', -1, 64)
	// e is "[-]d[.ddd]e±XX": Python switches to exponent notation when the
	// decimal exponent is below -4 or at least 16.
	i := bytes.IndexByte(e, 'e')
	exp, _ := strconv.Atoi(string(e[i+1:]))
	if exp < -4 || exp >= 16 {
		return append(dst, e...)
	}
	start := len(dst)
	dst = strconv.AppendFloat(dst, f, 'f', -1, 64)
	if bytes.IndexByte(dst[start:], '.') < 0 {
		dst = append(dst, '.', '0')
	}
	return dst
}

// wrap classifies a jsontext error: syntax errors (including truncated
// input) wrap ErrInvalid; errors of the underlying reader are returned as
// they are, so that a caller's limit or decompression error keeps its type.
func (d *Decoder) wrap(err error) error {
	var se *jsontext.SyntacticError
	switch {
	case errors.As(err, &se), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	case err == io.EOF:
		return fmt.Errorf("%w: unexpected end of input", ErrInvalid)
	}
	return err
}
