package envelope

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/messages"
)

// decodeEnvelope is encoding/json's decoding of an envelope, the result
// the scan must give.
func decodeEnvelope(raw string) (Header, bool) {
	var env messages.Envelope
	if err := json.Unmarshal([]byte(raw), &env); err != nil {
		return Header{}, false
	}
	return Header{MessageID: env.MessageID, Type: string(env.Type), ReplyTo: env.ReplyTo}, true
}

// checkPeek fails when peekEnvelope claims a result encoding/json does
// not give, or when Parse differs from encoding/json.
func checkPeek(t *testing.T, raw string) int {
	t.Helper()
	checkParse(t, raw)
	got, res := peekEnvelope(raw)
	want, ok := decodeEnvelope(raw)
	switch res {
	case peekOK:
		if !ok || got != want {
			t.Fatalf("peek %q = %+v OK; encoding/json: %+v, %v", raw, got, want, ok)
		}
	case peekInvalid:
		if ok {
			t.Fatalf("peek %q = invalid; encoding/json decodes %+v", raw, want)
		}
	case peekUnsure:
	default:
		t.Fatalf("peek %q = result %d", raw, res)
	}
	return res
}

// checkParse fails when Parse's result or error differs from
// json.Unmarshal's.
func checkParse(t *testing.T, raw string) {
	t.Helper()
	got, gotErr := Parse(raw)
	var want messages.Envelope
	wantErr := json.Unmarshal([]byte(raw), &want)
	if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
		t.Fatalf("Parse %q: error %v; encoding/json: %v", raw, gotErr, wantErr)
	}
	if got.MessageID != want.MessageID || got.Type != want.Type || got.ReplyTo != want.ReplyTo ||
		!bytes.Equal(got.Body, want.Body) || (got.Body == nil) != (want.Body == nil) {
		t.Fatalf("Parse %q = %+v (body %q); encoding/json: %+v (body %q)", raw, got, got.Body, want, want.Body)
	}
	// ParseMessage reads the same envelope, its body as text, and
	// HashMessage hashes it as HashBody does.
	m, _ := ParseMessage(raw)
	if m.Body != string(got.Body) {
		t.Fatalf("ParseMessage %q: body %q, Parse %q", raw, m.Body, got.Body)
	}
	h1, err1 := HashBody(got)
	h2, err2 := HashMessage(m)
	if h1 != h2 || (err1 == nil) != (err2 == nil) {
		t.Fatalf("%q: HashMessage %s (%v), HashBody %s (%v)", raw, h2, err2, h1, err1)
	}
}

var peekCases = []struct {
	raw  string
	want int
}{
	{`{"message_id":"m1","type":"delete_case_bundle","body":{"fixture_hash":"00"}}`, peekOK},
	{` {"body":[1,2.5e-3,-0,true,false,null,"x\"\\\/\b\f\n\r\t\u00e9",{}], "type":"save_case","message_id":"m2","reply_to":"r"} `, peekOK},
	{`{"type":"a","type":"b","message_id":"m","type":null}`, peekOK},
	{`{}`, peekOK},
	{`null`, peekOK},
	{`{"message_id":"é"}`, peekOK},
	{`{"bodé":1}`, peekUnsure},
	{`{"Type":"save_case"}`, peekUnsure},
	{`{"typ\u0065":"save_case"}`, peekUnsure},
	{`{"type":"save\u005fcase"}`, peekUnsure},
	{"{\"type\":\"\xff\"}", peekUnsure},
	{`{"type":5}`, peekInvalid},
	{`{"type":{"a":1},"message_id":"m"}`, peekInvalid},
	{`[1]`, peekInvalid},
	{`"x"`, peekInvalid},
	{`not json`, peekInvalid},
	{``, peekInvalid},
	{`{"type":"a",}`, peekInvalid},
	{`{"type":"a"} x`, peekInvalid},
	{`{"body":01}`, peekInvalid},
	{`{"body":1.}`, peekInvalid},
	{`{"body":"a` + "\n" + `"}`, peekInvalid},
	{`{"body":"\x"}`, peekInvalid},
	{`{"body":tru}`, peekInvalid},
	{`{"type":"a"`, peekInvalid},
	{strings.Repeat("[", 1000) + strings.Repeat("]", 1000), peekInvalid},
	{`{"body":` + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + `}`, peekOK},
	{`{"body":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}`, peekUnsure},
	{`{"body":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`, peekUnsure},
	{`{"body":null,"type":"a"}`, peekOK},
	{`{"body":{"a":1},"body":[2]}`, peekOK},
	{`{"body":{"a":1},"body":null}`, peekOK},
	{`{"body": "x" }`, peekOK},
	{`{"Body":{"a":1}}`, peekUnsure},
	{`{"BODY":{"a":1},"body":2}`, peekUnsure},
	{`{"bod\u0079":{"a":1}}`, peekUnsure},
	{`{"body":{"a":1},"type":5}`, peekInvalid},
}

func TestPeekEnvelope(t *testing.T) {
	for _, c := range peekCases {
		if res := checkPeek(t, c.raw); res != c.want {
			t.Errorf("peek %.60q = %d, want %d", c.raw, res, c.want)
		}
	}
}

// FuzzPeekEnvelope: whatever the input, the scan never claims a result
// that encoding/json does not give, and Parse gives what encoding/json
// gives.
func FuzzPeekEnvelope(f *testing.F) {
	for _, c := range peekCases {
		if len(c.raw) < 1000 {
			f.Add(c.raw)
		}
	}
	f.Fuzz(func(t *testing.T, raw string) { checkPeek(t, raw) })
}
