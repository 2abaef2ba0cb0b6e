package envelope

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
		if h, err := HashBody(env(body)); err == nil {
			t.Errorf("HashBody(%q) = %s, want a refusal", body, h)
		} else if !strings.Contains(err.Error(), "UTF-8") && !strings.Contains(err.Error(), "surrogate") {
			t.Errorf("HashBody(%q): error %q names neither UTF-8 nor a surrogate", body, err)
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
		h, err := HashBody(env(body))
		if err != nil {
			t.Fatalf("HashBody(%q): %v", body, err)
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
	want, err := HashBody(env(same[0]))
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range same[1:] {
		if h, err := HashBody(env(body)); err != nil || h != want {
			t.Errorf("HashBody(%q) = %s, %v; want %s, as %q", body, h, err, want, same[0])
		}
	}
}

// The body hash is what idempotency records already hold: the SHA-256 of
// the type, a zero byte and the canonical body, computed here outside Go
// (printf 'TYPE\0BODY' | sha256sum) so that a change to either path
// shows.
func TestHashBodyGolden(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		typ  messages.MessageType
		body string
		want string
	}{
		// canonical: the fast path
		{messages.DeleteCaseBundle, `{"fixture_hash":"h","fixture_store":"s"}`, "e758196f577827591163151f98d5082ede77db9b65ba19e2833295adbf85c2f4"},
		// the same body spaced and reordered: the slow path
		{messages.DeleteCaseBundle, ` { "fixture_store" : "s", "fixture_hash": "h" }`, "e758196f577827591163151f98d5082ede77db9b65ba19e2833295adbf85c2f4"},
		// numbers as written, < escaped as json.Marshal escapes it
		{messages.RunCase, `{"b":null,"a":[1,2.50,"<"]}`, "3fe1b046e936c8628372027c3c0419bcd9c544936e3ad46a3b12cd5497a4040a"},
		// no body: null
		{messages.SaveCase, ``, "f93e56f7e9c4983264da87d7e7b35dd49cb32d5e8202270cec981cf3272cbde7"},
	} {
		got, err := HashBody(messages.Envelope{MessageID: "m", Type: c.typ, Body: json.RawMessage(c.body)})
		if err != nil || got != c.want {
			t.Errorf("HashBody(%s, %q) = %s, %v; want %s", c.typ, c.body, got, err, c.want)
		}
	}
}
