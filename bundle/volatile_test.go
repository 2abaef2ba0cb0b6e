package bundle_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/messages"
)

// The volatile-field rules a registration records are read, kept through a
// decode and an encode, and checked: a rule replay could not apply is
// bundle_corrupt, naming it.
func TestRegistrationVolatile(t *testing.T) {
	t.Parallel()
	base := string(readFile(t, "workflow.canonical.json"))
	const steps = `"registration":{"steps":[`
	if !strings.Contains(base, steps) {
		t.Fatalf("fixture has no %q", steps)
	}
	with := func(rules string) string {
		return strings.Replace(base, steps, `"registration":{"volatile":`+rules+`,"steps":[`, 1)
	}

	// Valid rules: read, decoded and encoded again to the same hash.
	in := with(`{"steps":{"quote":["meta.ts","request_id"]},"tools":{"lookup":["items[].trace"]},"prompt":["(?m)^Today is .*$"]}`)
	c := mustRead(t, []byte(in))
	b, err := c.Decode()
	if err != nil {
		t.Fatal(err)
	}
	v := b.Manifest.Registration.Volatile
	if v == nil || !slices.Equal(v.Steps["quote"], []string{"meta.ts", "request_id"}) ||
		!slices.Equal(v.Tools["lookup"], []string{"items[].trace"}) || !slices.Equal(v.Prompt, []string{"(?m)^Today is .*$"}) {
		t.Fatalf("decoded rules %+v", v)
	}
	again, err := bundle.Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	if again.Hash() != c.Hash() {
		t.Errorf("decode and encode changed the hash: %s → %s", c.Hash(), again.Hash())
	}
	if !bytes.Contains(c.Bytes(), []byte(`"volatile":{"prompt":["(?m)^Today is .*$"],"steps":{"quote":["meta.ts","request_id"]},"tools":{"lookup":["items[].trace"]}}`)) {
		t.Errorf("canonical bytes lost the rules: %s", c.Bytes())
	}

	// A bundle without rules encodes without the key.
	plain := mustRead(t, []byte(base))
	pb, err := plain.Decode()
	if err != nil {
		t.Fatal(err)
	}
	if pb.Manifest.Registration.Volatile != nil {
		t.Fatalf("rules out of nowhere: %+v", pb.Manifest.Registration.Volatile)
	}
	if enc, err := bundle.Encode(pb); err != nil || enc.Hash() != plain.Hash() || bytes.Contains(enc.Bytes(), []byte(`"volatile"`)) {
		t.Fatalf("a bundle without rules re-encodes to %v, %v", enc, err)
	}

	bad := []struct{ name, rules, want string }{
		{"bad path", `{"steps":{"quote":["meta..ts"]}}`, `manifest.registration.volatile.steps["quote"]: volatile path "meta..ts"`},
		{"dollar path", `{"tools":{"lookup":["$.a"]}}`, `manifest.registration.volatile.tools["lookup"]`},
		{"bad pattern", `{"prompt":["(unclosed"]}`, `manifest.registration.volatile.prompt: volatile prompt pattern "(unclosed"`},
		{"empty pattern", `{"prompt":[""]}`, "is empty"},
		{"paths not a list", `{"steps":{"quote":"request_id"}}`, "manifest.registration"},
		{"not an object", `["request_id"]`, "manifest.registration"},
	}
	for _, tc := range bad {
		_, err := bundle.Read(strings.NewReader(with(tc.rules)), bundle.Options{})
		wantCode(t, err, messages.BundleCorrupt)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want it to say %q", tc.name, err, tc.want)
		}
	}
}
