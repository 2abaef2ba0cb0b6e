package core

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/pyrula/caseworker/canonjson"
)

// canonical gives the canonicaliser's bytes, and raw itself (no copy) when
// raw is canonical already.
func TestCanonicalKeepsCanonicalText(t *testing.T) {
	for _, c := range []struct {
		raw  string
		same bool
	}{
		{`{"id":1,"query":"select * from orders where id = $1"}`, true},
		{`{"a":[1,{"b":true,"c":null}],"b":{"a":false}}`, true},
		{`{"a":1.5,"b":"a\"b"}`, true},
		{`{"z":2,"é":1}`, true},
		{`{"é":1,"z":2}`, false}, // é sorts after z
		{`{"b":1,"a":2}`, false},
		{`{"a":1e5}`, false},
		{`"\u003c"`, false},
		{`{"a": 1}`, false},
	} {
		raw := []byte(c.raw)
		got, err := canonical(raw)
		want, werr := canonjson.Canonicalize(raw)
		if err != nil || werr != nil || !bytes.Equal(got, want) {
			t.Fatalf("canonical(%s) = %s, %v; the canonicaliser gives %s, %v", raw, got, err, want, werr)
		}
		if same := unsafe.SliceData(got) == unsafe.SliceData(raw); same != c.same {
			t.Errorf("canonical(%s) returned its input itself: %v, want %v", raw, same, c.same)
		}
	}
	if _, err := canonical([]byte(`{"a":1,"a":2}`)); err == nil {
		t.Error("canonical took a duplicate key")
	}
}
