package intake

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/canonjson"
	"github.com/pyrula/caseworker/messages"
)

// FuzzMayHoldBadNumber: the quick scan that lets checkNumbers skip decoding
// never passes a body that the full check refuses.
func FuzzMayHoldBadNumber(f *testing.F) {
	big := strings.Repeat("9", canonjson.MaxIntDigits+1)
	for _, b := range fuzzBodies {
		f.Add(b.body)
	}
	for _, s := range []string{`{"a":` + big + `}`, `{"a":-` + big + `}`, `{"a":[1,-` + strings.Repeat("9", canonjson.MaxIntDigits) + `]}`,
		`{"a":"` + big + `","b":1e400}`, `{"a\"":"x\\","b":-1E-400}`, `{"a":"\"1e400"}`, `[1e400]`, `1e400`, `-` + big} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		if err := refuseBadNumbers([]byte(body)); err != nil && !mayHoldBadNumber([]byte(body)) {
			t.Fatalf("%s: refused (%v), but the quick scan found no number to check", body, err)
		}
	})
}

// TestMayHoldBadNumber: the scan skips bodies of small integers only, and
// sees a number in a body whatever its strings hold.
func TestMayHoldBadNumber(t *testing.T) {
	for body, want := range map[string]bool{
		`{"fixture_hash":"` + fuzzHash + `"}`:                         false,
		`{"a":[1,-2,{"b":30}],"c":"1e400","d":true}`:                  false,
		`{"a":"` + strings.Repeat("9", 40) + `"}`:                     false,
		`{"a":"\"","b":1.5}`:                                          true,
		`{"a":` + strings.Repeat("9", canonjson.MaxIntDigits+1) + `}`: true,
		`{"a":2e3}`: true,
	} {
		if got := mayHoldBadNumber([]byte(body)); got != want {
			t.Errorf("%s: %v, want %v", body, got, want)
		}
	}
}

// FuzzPeekDeleteBody: a delete_case_bundle body read without a decoder is
// valid JSON and reads as encoding/json reads it.
func FuzzPeekDeleteBody(f *testing.F) {
	for _, s := range []string{`{"fixture_hash":"` + fuzzHash + `"}`, `{"fixture_hash":"a","fixture_store":"memory:"}`,
		`{"fixture_hash":"a",}`, `{"fixture_hash":"a","fixture_hash":"b"}`, `{"FIXTURE_HASH":"a"}`, `{}`, `{"fixture_hash":"a\"b"}`,
		`{"fixture_hash":"a"}x`, `{"fixture_hash":1}`, `{"fixture_hash":"é\"}`, "{\"fixture_hash\":\"\xff\"}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		got, ok := peekDeleteBody(body)
		if !ok {
			return
		}
		var want messages.DeleteCaseBundleBody
		if err := json.Unmarshal([]byte(body), &want); err != nil || got != want {
			t.Fatalf("%s: read %+v; encoding/json reads %+v (%v)", body, got, want, err)
		}
	})
}
