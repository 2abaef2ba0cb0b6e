package bundle

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// decodeBoth decodes in with the fast path and with encoding/json and fails
// t unless both agree; it reports whether the fast path took the input.
func decodeBoth(t *testing.T, in []byte) bool {
	t.Helper()
	var fast, ref Bundle
	fastErr := decodeCanonical(in, &fast)
	refErr := json.Unmarshal(in, &ref)
	if fastErr == nil && refErr != nil {
		t.Fatalf("fast path accepted what encoding/json refuses (%v): %q", refErr, in)
	}
	if fastErr == nil && !reflect.DeepEqual(fast, ref) {
		t.Fatalf("fast path differs from encoding/json for %q:\n%#v\n%#v", in, fast, ref)
	}
	return fastErr == nil
}

// TestDecodeCanonicalMatchesEncodingJSON holds the fast decoder to
// encoding/json's answer on the golden bundles, the repository's sample
// cases and hand-picked edge cases, and checks the fast path is taken for
// canonical bundles (else the speed-up would silently vanish).
func TestDecodeCanonicalMatchesEncodingJSON(t *testing.T) {
	for _, name := range []string{"workflow", "inputs_only", "agent"} {
		in, err := os.ReadFile(filepath.Join("testdata", name+".canonical.json"))
		if err != nil {
			t.Fatal(err)
		}
		if !decodeBoth(t, in) {
			t.Errorf("%s: fast path refused a canonical bundle", name)
		}
		var trusted, ref Bundle
		if err := decodeTrusted(in, &trusted, 0, 0); err != nil {
			t.Errorf("%s: decodeTrusted refused a canonical bundle: %v", name, err)
		} else if json.Unmarshal(in, &ref) != nil || !reflect.DeepEqual(trusted, ref) {
			t.Errorf("%s: decodeTrusted differs from encoding/json", name)
		}
	}
	for _, in := range []string{
		`{"history":[],"manifest":{},"results":[]}`,
		`{"history":null,"manifest":null,"results":null}`,
		`{"history":[{"a":"\u00e9\n"},1,"x",null,[]],"manifest":{"format":1,"inputs":{"q":"\ud83d\ude00"}},"results":[{"error":{"type":"x"},"fingerprint":"f","key":"k\"1","kind":"step","result":null},null,{"key":null}]}`,
		`{"results":[{"key":"a","kind":"step","fingerprint":"f","result":{"z":1}}],"history":[1]}`,
		`{"history":[],"manifest":{},"results":[],"extra":1}`,
		`{"history":[],"manifest":{},"results":[{"KEY":"a"}]}`,
		`{"history":[],"manifest":{},"results":[{"key":1}]}`,
		`{"history":[] , "manifest":{},"results":[]} x`,
		`{"history":{},"manifest":{},"results":[]}`,
		`[]`,
		``,
	} {
		decodeBoth(t, []byte(in))
	}
}

// FuzzDecodeCanonical: on any input the fast decoder either steps aside or
// gives exactly what encoding/json gives.
//
//	go test -run '^$' -fuzz FuzzDecodeCanonical -fuzztime 60s ./bundle/
func FuzzDecodeCanonical(f *testing.F) {
	for _, name := range []string{"workflow", "inputs_only", "agent"} {
		in, err := os.ReadFile(filepath.Join("testdata", name+".canonical.json"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(in)
	}
	f.Add([]byte(`{"history":[1],"manifest":{"format":1},"results":[{"key":"a","kind":"step","result":"\u0000"}]}`))
	f.Fuzz(func(t *testing.T, in []byte) { decodeBoth(t, in) })
}
