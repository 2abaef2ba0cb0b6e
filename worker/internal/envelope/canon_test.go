package envelope

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/messages"
)

// checkCanon fails when canonicalJSON accepts input that canonicalize
// (HashBody's slow path) would change.
func checkCanon(t *testing.T, raw string) bool {
	t.Helper()
	ok := canonicalJSON([]byte(raw))
	if !ok {
		return false
	}
	canon, err := canonicalize([]byte(raw))
	if err != nil || !bytes.Equal(canon, []byte(raw)) {
		t.Fatalf("canonicalJSON(%q) = true; canonicalize gives %q, %v", raw, canon, err)
	}
	return true
}

var canonCases = []struct {
	raw  string
	want bool
}{
	{`{"fixture_hash":"` + strings.Repeat("0", 64) + `"}`, true},
	{`{"a":1,"b":[true,false,null,-0.5e+3,"x"],"c":{}}`, true},
	{`{"fixture_store":"s","fixture_hash":"h"}`, false}, // keys out of order
	{`{"a":1,"a":2}`, false},
	{`{"a": 1}`, false},
	{` {"a":1}`, false},
	{`{"a":"x<y"}`, false},
	{`{"a":"\u0041"}`, false},
	{`{"a":"é"}`, false},
	{`{"a":1.0}`, true},
	{`{"a":1E5}`, true},
	{`{"a":01}`, false},
	{`{"a":1.}`, false},
	{`[]`, true},
	{`null`, true},
	{``, false},
	{`"s"`, true},
	{`{"a":1}x`, false},
	{`{"":1,"a":2}`, true},
	{`{"ab":1,"b":2}`, true},
	{`{"b":1,"ab":2}`, false},
	{strings.Repeat("[", 64) + strings.Repeat("]", 64), true},
	{strings.Repeat("[", 66) + strings.Repeat("]", 66), false},
}

func TestCanonicalJSON(t *testing.T) {
	for _, c := range canonCases {
		if got := checkCanon(t, c.raw); got != c.want {
			t.Errorf("canonicalJSON(%q) = %v, want %v", c.raw, got, c.want)
		}
	}
}

// FuzzCanonicalJSON: whatever the input, canonicalJSON never accepts what
// HashBody's slow path would encode differently.
func FuzzCanonicalJSON(f *testing.F) {
	for _, c := range canonCases {
		f.Add(c.raw)
	}
	f.Fuzz(func(t *testing.T, raw string) { checkCanon(t, raw) })
}

// BenchmarkHashBody is HashBody of a typical delete_case_bundle body.
func BenchmarkHashBody(b *testing.B) {
	env := messagesEnvelope(`{"fixture_hash":"` + strings.Repeat("0", 64) + `"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := HashBody(env); err != nil {
			b.Fatal(err)
		}
	}
}

func messagesEnvelope(body string) messages.Envelope {
	return messages.Envelope{MessageID: "m", Type: messages.DeleteCaseBundle, Body: json.RawMessage(body)}
}
