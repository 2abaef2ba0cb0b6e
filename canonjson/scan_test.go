package canonjson_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/canonjson"
)

// scanWhole reports whether a Scanner accepts in as one canonical value
// with nothing after it.
func scanWhole(in []byte) bool {
	s := canonjson.NewScanner(in)
	v, err := s.Value()
	return err == nil && s.Pos() == len(in) && len(v) == len(in)
}

// Every golden vector's canonical text is accepted (the Scanner is the fast
// path for it), except where an object name has an escape, which the
// Scanner leaves to the Decoder.
func TestScannerAcceptsGolden(t *testing.T) {
	for _, v := range loadVectors(t) {
		c := []byte(v.Canonical)
		if !scanWhole(c) && !escapedName(c) && !strings.HasPrefix(v.Name, "deep/") {
			t.Errorf("%s: Scanner refused canonical text %s", v.Name, clip(v.Canonical))
		}
		if in := []byte(v.Input); scanWhole(in) && !bytes.Equal(in, c) {
			t.Errorf("%s: Scanner accepted %s, whose canonical form is %s", v.Name, clip(v.Input), clip(v.Canonical))
		}
	}
}

// escapedName reports whether canonical text may have an object name with
// an escape (a backslash anywhere is enough for this test).
func escapedName(c []byte) bool { return bytes.IndexByte(c, '\\') >= 0 }

func TestScannerRefuses(t *testing.T) {
	for _, in := range []string{
		``, ` 1`, `1 `, `{"a":1 }`, `{"b":1,"a":2}`, `{"a":1,"a":1}`, `[1,]`, `{"a":1,}`,
		`-0`, `01`, `1.`, `1e`, `1.0e5`, `100000.0e0`, `1E+16`, `1e16`, `0.00001`, `1.50`, `1e400`,
		`"\/"`, `"\u000a"`, `"\u001F"`, `"\u0041"`, `"\ud83d\ude00"`, "\"\x01\"", "\"\xff\"", "\"\xed\xa0\x80\"",
		`tru`, `nul`, `{"a\u0000":1}`, `"abc`, `[`, `{`, `{"a"}`, `{"a":}`,
		strings.Repeat("[", canonjson.MaxDepth) + strings.Repeat("]", canonjson.MaxDepth),
		"1" + strings.Repeat("0", canonjson.MaxIntDigits),
	} {
		if scanWhole([]byte(in)) || canonjson.IsCanonical([]byte(in)) {
			t.Errorf("Scanner accepted %q", clip(in))
		}
	}
	for _, in := range []string{
		`{}`, `[]`, `{"a":[1,{"b":null}],"b":true}`, `-0.0`, `1e-05`, `1e+16`, `100.0`, `0`, `-12`,
		`"\n\t\"\\\u0000\u001f"`, "\"é中😀\u2028\x7f\"", `{"":1,"a":2}`,
		"1" + strings.Repeat("0", canonjson.MaxIntDigits-1),
	} {
		if !scanWhole([]byte(in)) || !canonjson.IsCanonical([]byte(in)) {
			t.Errorf("Scanner refused canonical %q", clip(in))
		}
	}
}

func TestScannerObjectVisit(t *testing.T) {
	s := canonjson.NewScanner([]byte(`{"a":{"x":1},"b":"c"}`))
	var got []string
	obj, err := s.Object(func(name, value []byte) error {
		got = append(got, string(name)+"="+string(value))
		return nil
	})
	if err != nil || string(obj) != `{"a":{"x":1},"b":"c"}` || strings.Join(got, " ") != `a={"x":1} b="c"` {
		t.Fatalf("Object: %q %v, visited %v", obj, err, got)
	}
	stop := errors.New("stop")
	s = canonjson.NewScanner([]byte(`{"a":1}`))
	if _, err := s.Object(func(name, value []byte) error { return stop }); err != stop {
		t.Fatalf("visit's error: got %v", err)
	}
}

// decoded is the canonical form of in as a Decoder alone gives it
// (Canonicalize and Append take the Scanner's verdict first).
func decoded(in []byte) ([]byte, error) {
	d := canonjson.NewDecoder(bytes.NewReader(in))
	out, err := d.AppendValue(nil)
	if err == nil {
		err = d.CheckEOF()
	}
	return out, err
}

// FuzzScanner: whatever a Scanner accepts is a fixed point of the Decoder
// (so the fast path never accepts text the Decoder would change or
// refuse), IsCanonical says what a Scanner says of the whole text, and the
// canonical form of anything is accepted unless an object name has an
// escape.
func FuzzScanner(f *testing.F) {
	for _, v := range loadVectors(f) {
		f.Add([]byte(v.Input))
		f.Add([]byte(v.Canonical))
	}
	for _, c := range rejectCases {
		f.Add([]byte(c.in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		whole := scanWhole(in)
		if canonjson.IsCanonical(in) != whole {
			t.Fatalf("IsCanonical(%q) = %v, a Scanner says %v", clip(string(in)), !whole, whole)
		}
		if whole {
			out, err := decoded(in)
			if err != nil || !bytes.Equal(out, in) {
				t.Fatalf("Scanner accepted %q; a Decoder gives %q, %v", clip(string(in)), clip(string(out)), err)
			}
		}
		out, err := canonjson.Canonicalize(in)
		if err == nil && !escapedName(out) && !scanWhole(out) && bytes.Count(out, []byte("[")) < 900 && bytes.Count(out, []byte("{")) < 900 {
			t.Fatalf("Scanner refused canonical %q", clip(string(out)))
		}
	})
}
