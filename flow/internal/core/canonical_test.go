package core

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/pyrula/caseworker/canonjson"
)

var canonicalCases = []struct {
	raw  string
	fast bool
}{
	{`{"id":1,"query":"select * from orders where id = $1"}`, true},
	{`{}`, true},
	{`[]`, true},
	{`null`, true},
	{`"plain"`, true},
	{`-12345678901234567890123`, true},
	{`{"a":[1,{"b":true,"c":null}],"b":{"a":false}}`, true},
	{`{"é":1,"z":2}`, false}, // é sorts after z
	{`{"z":2,"é":1}`, true},
	{`{"b":1,"a":2}`, false},
	{`{"a":1,"a":2}`, false},
	{`{"a":{"z":1},"b":{"a":1}}`, true},
	{`{"a":1.5}`, false},
	{`{"a":1e5}`, false},
	{`-0`, false},
	{`"\u003c"`, false},
	{`"a\"b"`, false},
	{`"\u2028"`, false},
	{"\"\xff\"", false},
	{`{"a": 1}`, false},
	{`{"ab":1,"a":2}`, false},
	{`{"a":2,"ab":1}`, true},
}

// TestIsCanonical: the fast path takes the values it should, and whatever
// it takes the canonicaliser leaves unchanged.
func TestIsCanonical(t *testing.T) {
	for _, c := range canonicalCases {
		if got := isCanonical([]byte(c.raw)); got != c.fast {
			t.Errorf("isCanonical(%s) = %v, want %v", c.raw, got, c.fast)
		}
		checkCanonical(t, []byte(c.raw))
	}
	deep := bytes.Repeat([]byte("["), 200)
	deep = append(deep, bytes.Repeat([]byte("]"), 200)...)
	if isCanonical(deep) {
		t.Error("deep nesting took the fast path")
	}
}

func checkCanonical(t *testing.T, raw []byte) {
	t.Helper()
	if !isCanonical(raw) {
		return
	}
	canon, err := canonjson.Canonicalize(raw)
	if err != nil || !bytes.Equal(canon, raw) {
		t.Fatalf("isCanonical(%q) but Canonicalize gives %q, %v", raw, canon, err)
	}
}

// FuzzIsCanonical: every compact valid JSON value the fast path takes is a
// fixed point of the canonicaliser.
func FuzzIsCanonical(f *testing.F) {
	for _, c := range canonicalCases {
		f.Add([]byte(c.raw))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		var buf bytes.Buffer
		if json.Compact(&buf, data) != nil {
			return
		}
		checkCanonical(t, buf.Bytes())
	})
}
