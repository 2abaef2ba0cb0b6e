package canonjson_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/pyrula/caseworker/canonjson"
)

// FuzzCanonicalize checks, for any input:
//   - Canonicalize never panics;
//   - a refusal wraps ErrInvalid;
//   - an output is valid UTF-8, valid JSON and a fixed point;
//   - Append(prefix, in) is prefix + Canonicalize(in);
//   - a Decoder reading in from a stream, a byte or a few bytes at a
//     time, gives the same verdict and bytes (checkStreamed);
//   - differential: the result (accept or refuse, and the bytes) equals
//     refCanonical, an independent slow reference built on encoding/json
//     and strconv that TestReference* below checks against Python's vectors;
//   - SetMaxOutput is exact (checkMaxOutput).
func FuzzCanonicalize(f *testing.F) {
	for _, v := range loadVectors(f) {
		f.Add([]byte(v.Input))
	}
	for _, c := range rejectCases {
		f.Add([]byte(c.in))
	}
	for _, c := range acceptCases {
		f.Add([]byte(c.in))
	}
	f.Add([]byte("\xef\xbb\xbf{\"a\":1}"))
	f.Fuzz(func(t *testing.T, in []byte) {
		inCopy := bytes.Clone(in)
		out, err := canonjson.Canonicalize(in)
		if !bytes.Equal(in, inCopy) {
			t.Fatalf("Canonicalize modified its input")
		}
		checkStreamed(t, in)
		want, wantOK := refCanonical(in)
		// A leading byte-order mark: docs/bundle-format.md says it is skipped on an
		// imported file, which may or may not happen at this level. Accept
		// either a refusal or the canonical form of the rest.
		bom := bytes.HasPrefix(in, []byte("\xef\xbb\xbf"))
		if bom && err == nil {
			want, wantOK = refCanonical(in[3:])
		}
		if err != nil {
			if !errors.Is(err, canonjson.ErrInvalid) {
				t.Fatalf("input %q: error %v does not wrap ErrInvalid", clip(string(in)), err)
			}
			if wantOK && !bom {
				t.Fatalf("refused input the reference accepts: %q\nerror: %v\nreference output: %q", clip(string(in)), err, clip(string(want)))
			}
			return
		}
		if !utf8.Valid(out) {
			t.Fatalf("output is not valid UTF-8: %q", clip(string(out)))
		}
		if !json.Valid(out) {
			t.Fatalf("output is not valid JSON: %q", clip(string(out)))
		}
		again, err := canonjson.Canonicalize(out)
		if err != nil {
			t.Fatalf("canonical output refused: %v\ninput:  %q\noutput: %q", err, clip(string(in)), clip(string(out)))
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("not a fixed point\ninput: %q\nonce:  %q\ntwice: %q", clip(string(in)), clip(string(out)), clip(string(again)))
		}
		checkMaxOutput(t, in, out)
		app, err := canonjson.Append([]byte("pre"), in)
		if err != nil || string(app) != "pre"+string(out) {
			t.Fatalf("Append(prefix) = %q, %v; want %q", clip(string(app)), err, clip("pre"+string(out)))
		}
		if !wantOK {
			t.Fatalf("accepted input the reference refuses: %q\noutput: %q", clip(string(in)), clip(string(out)))
		}
		if !bytes.Equal(out, want) {
			off := firstDiff(out, want)
			t.Fatalf("output differs from the reference at offset %d\ninput: %q\ngot:   %q\nwant:  %q\nnear:  got %q want %q",
				off, clip(string(in)), clip(string(out)), clip(string(want)), around(string(out), off), around(string(want), off))
		}
	})
}

// checkMaxOutput fails unless a Decoder reading in, whose canonical form
// is out, gives out under a limit of len(out) and ErrTooLarge under a
// limit of one byte less, never growing its buffer past the limit.
func checkMaxOutput(t *testing.T, in, out []byte) {
	t.Helper()
	for _, limit := range []int{len(out), len(out) - 1} {
		if limit <= 0 {
			continue // no limit
		}
		d := canonjson.NewDecoder(bytes.NewReader(in))
		d.SetMaxOutput(int64(limit))
		got, err := d.AppendValue(nil)
		switch {
		case limit == len(out) && (err != nil || !bytes.Equal(got, out)):
			t.Fatalf("input %q under a limit of its canonical size %d: %v", clip(string(in)), limit, err)
		case limit < len(out) && !errors.Is(err, canonjson.ErrTooLarge):
			t.Fatalf("input %q under a limit one byte short of its canonical size %d: %v", clip(string(in)), len(out), err)
		case cap(got) > limit:
			t.Fatalf("input %q: the buffer grew to %d under a limit of %d", clip(string(in)), cap(got), limit)
		}
	}
}

// The reference must agree with Python on every golden vector, or the
// differential part of the fuzz test would be meaningless.
func TestReferenceMatchesGolden(t *testing.T) {
	for _, v := range loadVectors(t) {
		got, ok := refCanonical([]byte(v.Input))
		if !ok {
			t.Errorf("%s: reference refuses a golden input", v.Name)
			continue
		}
		if string(got) != v.Canonical {
			off := firstDiff(got, []byte(v.Canonical))
			t.Errorf("%s: reference differs from Python at %d: got %q want %q", v.Name, off, around(string(got), off), around(v.Canonical, off))
		}
	}
}

func TestReferenceTables(t *testing.T) {
	for _, c := range rejectCases {
		if out, ok := refCanonical([]byte(c.in)); ok {
			t.Errorf("%s: reference accepts %q -> %q", c.name, clip(c.in), clip(string(out)))
		}
	}
	for _, c := range acceptCases {
		out, ok := refCanonical([]byte(c.in))
		if !ok || string(out) != c.want {
			t.Errorf("%s: reference gives %q, %v; want %q", c.name, clip(string(out)), ok, clip(c.want))
		}
	}
}

// refCanonical is a slow reference implementation of docs/bundle-format.md built
// from encoding/json (syntax, string unescaping), unicode/utf8 and strconv
// (correctly rounded parsing, shortest formatting). ok is false when the
// input must be refused.
func refCanonical(src []byte) (out []byte, ok bool) {
	if !utf8.Valid(src) || !json.Valid(src) || hasLoneSurrogateEscape(src) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.UseNumber()
	r := &refEncoder{dec: dec}
	if !r.value(0) {
		return nil, false
	}
	return r.out, true
}

type refEncoder struct {
	dec *json.Decoder
	out []byte
}

func (r *refEncoder) value(depth int) bool {
	tok, err := r.dec.Token()
	if err != nil {
		return false
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth+1 > canonjson.MaxDepth {
			return false
		}
		switch t {
		case '[':
			r.out = append(r.out, '[')
			for i := 0; r.dec.More(); i++ {
				if i > 0 {
					r.out = append(r.out, ',')
				}
				if !r.value(depth + 1) {
					return false
				}
			}
			if _, err := r.dec.Token(); err != nil {
				return false
			}
			r.out = append(r.out, ']')
			return true
		case '{':
			type member struct {
				key string
				val []byte
			}
			var members []member
			seen := map[string]bool{}
			for r.dec.More() {
				kt, err := r.dec.Token()
				if err != nil {
					return false
				}
				k, isStr := kt.(string)
				if !isStr || seen[k] {
					return false
				}
				seen[k] = true
				saved := r.out
				r.out = nil
				if !r.value(depth + 1) {
					return false
				}
				members = append(members, member{k, r.out})
				r.out = saved
			}
			if _, err := r.dec.Token(); err != nil {
				return false
			}
			// Go compares strings bytewise, which for valid UTF-8 is
			// code-point order, as Python's sort_keys.
			slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.key, b.key) })
			r.out = append(r.out, '{')
			for i, m := range members {
				if i > 0 {
					r.out = append(r.out, ',')
				}
				r.out = appendPyString(r.out, m.key)
				r.out = append(r.out, ':')
				r.out = append(r.out, m.val...)
			}
			r.out = append(r.out, '}')
			return true
		}
		return false
	case string:
		r.out = appendPyString(r.out, t)
		return true
	case json.Number:
		s := string(t)
		if !strings.ContainsAny(s, ".eE") {
			digits := strings.TrimPrefix(s, "-")
			if len(digits) > canonjson.MaxIntDigits {
				return false
			}
			if digits == "0" {
				s = "0"
			}
			r.out = append(r.out, s...)
			return true
		}
		f, _ := strconv.ParseFloat(s, 64) // ±Inf on overflow, ±0 on underflow
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return false
		}
		r.out = append(r.out, pyFloatRepr(f)...)
		return true
	case bool:
		if t {
			r.out = append(r.out, "true"...)
		} else {
			r.out = append(r.out, "false"...)
		}
		return true
	case nil:
		r.out = append(r.out, "null"...)
		return true
	}
	return false
}

// appendPyString writes s as json.dumps(ensure_ascii=False) does.
func appendPyString(dst []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
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
			if c < 0x20 {
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			} else {
				dst = append(dst, c)
			}
		}
	}
	return append(dst, '"')
}

// pyFloatRepr is Python's repr of a finite double: the shortest digits that
// read back as f, in fixed notation when the decimal exponent is in
// [-4, 16), else d.ddde±XX; fixed notation always has a fraction part.
func pyFloatRepr(f float64) string {
	if f == 0 {
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	sign := ""
	if f < 0 {
		sign = "-"
		f = -f
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d[.ddd]e±XX
	mant, expStr, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	exp, err := strconv.Atoi(expStr)
	if err != nil {
		panic(err)
	}
	if exp < -4 || exp >= 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		es := "+"
		if exp < 0 {
			es = "-"
			exp = -exp
		}
		return fmt.Sprintf("%s%se%s%02d", sign, m, es, exp)
	}
	if exp < 0 {
		return sign + "0." + strings.Repeat("0", -exp-1) + digits
	}
	if len(digits) <= exp+1 {
		return sign + digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	}
	return sign + digits[:exp+1] + "." + digits[exp+1:]
}

// hasLoneSurrogateEscape reports whether a syntactically valid JSON text has
// a \uD800–\uDFFF escape that is not part of a high+low escaped pair
// (encoding/json would silently turn it into U+FFFD).
func hasLoneSurrogateEscape(src []byte) bool {
	inStr := false
	for i := 0; i < len(src); i++ {
		c := src[i]
		if !inStr {
			if c == '"' {
				inStr = true
			}
			continue
		}
		switch c {
		case '"':
			inStr = false
		case '\\':
			if i+1 < len(src) && src[i+1] != 'u' {
				i++ // skip the escaped character
				continue
			}
			u, ok := hex4(src, i+2)
			if !ok {
				return false // not valid JSON; the caller checked that already
			}
			switch {
			case u >= 0xD800 && u < 0xDC00:
				if i+11 < len(src) && src[i+6] == '\\' && src[i+7] == 'u' {
					if lo, ok := hex4(src, i+8); ok && lo >= 0xDC00 && lo < 0xE000 {
						i += 11
						continue
					}
				}
				return true
			case u >= 0xDC00 && u < 0xE000:
				return true
			}
			i += 5
		}
	}
	return false
}

func hex4(src []byte, at int) (rune, bool) {
	if at+4 > len(src) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(src[at:at+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	return rune(v), true
}
