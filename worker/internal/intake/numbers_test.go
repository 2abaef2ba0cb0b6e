package intake

import (
	"strings"
	"testing"

	"github.com/pyrula/caseworker/canonjson"
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
