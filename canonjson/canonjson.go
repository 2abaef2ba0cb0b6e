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
// The work is a single pass over the input's bytes that appends canonical
// bytes to one buffer; an object whose members arrive out of order is
// reordered in place when it closes, so canonical input costs no extra copy.
// Before that pass, Append and a Decoder's AppendValue and AppendObject try
// a Scanner on the value: text already canonical (bundles, journal records
// and results this project wrote) is checked and copied as it is, in about a
// quarter of the time of reading it token by token; a Decoder that
// meets text that is not canonical reads the next few values without the
// check.
// AppendGo writes the canonical JSON of a Go value (what json.Marshal then
// Append give) directly, for the types call inputs usually have.
package canonjson

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
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
// Text that is canonical already (a Scanner accepts it whole: results and
// inputs read from a bundle or a journal) is copied as it is, in about a
// quarter of the time of canonicalising it (BenchmarkAppendCanonical); any
// other text goes to a Decoder, which does not scan it again.
func Append(dst, src []byte) ([]byte, error) {
	scannedOK, whole := scanWhole(src)
	if whole {
		return append(dst, src...), nil
	}
	if cap(dst)-len(dst) < len(src) {
		dst = slices.Grow(dst, len(src))
	}
	d := newBytesDecoder(src)
	if !scannedOK && len(src) > 0 && !isSpace[src[0]] {
		d.scanSkip = 1 // the Scanner has just refused this value, from its first byte
	}
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

// appendFloatText appends the canonical form of raw, a JSON number with a
// fraction or an exponent.
func appendFloatText(dst, raw []byte) ([]byte, error) {
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		// The syntax is checked, so this is a range error; only overflow
		// reports one (underflow rounds to zero, as Python does).
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
	exp := 0
	for _, c := range e[i+2:] {
		exp = exp*10 + int(c-'0')
	}
	if e[i+1] == '-' {
		exp = -exp
	}
	if exp < -4 || exp >= 16 {
		return append(dst, e...)
	}
	// Fixed notation from the same shortest digits: no second conversion.
	if e[0] == '-' {
		dst = append(dst, '-')
		e = e[1:]
		i--
	}
	digits := e[:i]
	if len(digits) > 1 {
		// "d.ddd" without its point.
		var buf [24]byte
		digits = append(append(buf[:0], e[0]), e[2:i]...)
	}
	if exp < 0 {
		dst = append(dst, '0', '.')
		for range -exp - 1 {
			dst = append(dst, '0')
		}
		return append(dst, digits...)
	}
	if len(digits) <= exp+1 {
		dst = append(dst, digits...)
		for range exp + 1 - len(digits) {
			dst = append(dst, '0')
		}
		return append(dst, '.', '0')
	}
	dst = append(dst, digits[:exp+1]...)
	dst = append(dst, '.')
	return append(dst, digits[exp+1:]...)
}
