package worker

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/messages"
)

// A body with invalid UTF-8 or a lone surrogate escape is refused before
// hashing; encoding/json would decode either to U+FFFD, so that bodies
// differing only there would share a hash (and the idempotency record).
func TestHashBodyRefusesWhatIsNotUnicode(t *testing.T) {
	t.Parallel()
	env := func(body string) messages.Envelope {
		return messages.Envelope{MessageID: "m", Type: messages.DeleteCaseBundle, Body: json.RawMessage(body)}
	}
	for _, body := range []string{
		`{"fixture_store":"a` + "\xff" + `"}`,
		`{"fixture_store":"a` + "\xfe" + `"}`,
		`{"a` + "\xc3" + `":1}`,                      // a truncated sequence, in a key
		`{"fixture_store":"` + "\xed\xa0\x80" + `"}`, // a surrogate, UTF-8 encoded
		`{"fixture_store":"a\ud800"}`,
		`{"fixture_store":"a\uDBFF b"}`,
		`{"fixture_store":"a\udc00"}`,
		`{"fixture_store":"a\ud800\u0041"}`,  // high surrogate, then not a low one
		`{"fixture_store":"a\ud800\\udc00"}`, // an escaped backslash, not an escape
		`["\ud800"]`,
	} {
		if h, err := hashBody(env(body)); err == nil {
			t.Errorf("hashBody(%q) = %s, want a refusal", body, h)
		} else if !strings.Contains(err.Error(), "UTF-8") && !strings.Contains(err.Error(), "surrogate") {
			t.Errorf("hashBody(%q): error %q names neither UTF-8 nor a surrogate", body, err)
		}
	}

	// Text that is Unicode hashes, and different text never hashes alike:
	// U+FFFD itself, a surrogate pair, text that merely looks like an
	// escape.
	hashes := map[string]string{}
	for _, body := range []string{
		`{"fixture_store":"a` + "\uFFFD" + `"}`,
		`{"fixture_store":"a` + "\U0001F600" + `"}`,
		`{"fixture_store":"a\\ud800"}`, // a backslash, then "ud800"
		`{"fixture_store":"a"}`,
		`{"fixture_store":"b"}`,
	} {
		h, err := hashBody(env(body))
		if err != nil {
			t.Fatalf("hashBody(%q): %v", body, err)
		}
		if prev, ok := hashes[h]; ok {
			t.Errorf("bodies %q and %q share hash %s", prev, body, h)
		}
		hashes[h] = body
	}

	// One text in different spellings is one body: escapes, a surrogate
	// pair escaped, key order, spaces.
	same := []string{
		`{"fixture_store":"a` + "\U0001F600\uFFFD" + `","fixture_hash":"x"}`,
		`{ "fixture_hash" : "x", "fixture_store" : "\u0061\ud83d\ude00\ufffd" }`,
		`{"fixture_hash":"x","fixture_store":"a\uD83D\uDE00` + "\uFFFD" + `"}`,
	}
	want, err := hashBody(env(same[0]))
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range same[1:] {
		if h, err := hashBody(env(body)); err != nil || h != want {
			t.Errorf("hashBody(%q) = %s, %v; want %s, as %q", body, h, err, want, same[0])
		}
	}
}
