package worker

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/pyrula/caseworker/messages"
)

func checkEncodeReply(t *testing.T, r messages.Reply) {
	t.Helper()
	got, err := encodeReply(r)
	want, wantErr := json.Marshal(r)
	if (err == nil) != (wantErr == nil) || !bytes.Equal(got, want) {
		t.Fatalf("encodeReply(%+v) = %s, %v; json.Marshal: %s, %v", r, got, err, want, wantErr)
	}
}

var replyCases = []messages.Reply{
	{MessageID: "m1", Type: messages.DeleteCaseBundle, Status: messages.StatusOK, Result: json.RawMessage(`{"deleted":false}`)},
	{MessageID: "m1", Type: messages.SaveCase, Status: messages.StatusRefused, Code: messages.InvalidOverrides, Message: "the body is missing"},
	{EntryID: "1-0", Status: messages.StatusRefused, Code: messages.InvalidOverrides, Message: `entry 1-0 is not a JSON envelope: invalid character 'x' looking for beginning of value`},
	{MessageID: "m<1>", Type: "a&b", Status: messages.StatusOK},
	{MessageID: "é", Status: messages.StatusError, Message: "line\nbreak \"quoted\" \\"},
	{MessageID: "m", Status: messages.StatusOK, Result: json.RawMessage(`{ "a" : 1 }`)},
	{MessageID: "m", Status: messages.StatusOK, Result: json.RawMessage(`{"b":1,"a":"<x>"}`)},
	{MessageID: "m", Status: messages.StatusOK, Result: json.RawMessage(`{"b":1,"a":2}`)},
	{MessageID: "m", Status: messages.StatusOK, Result: json.RawMessage(`null`)},
	{MessageID: "m", Status: messages.StatusOK, Result: json.RawMessage(`{"a":`)},
	{},
}

func TestEncodeReply(t *testing.T) {
	for _, r := range replyCases {
		checkEncodeReply(t, r)
	}
}

// FuzzEncodeReply: encodeReply gives json.Marshal's bytes and error.
func FuzzEncodeReply(f *testing.F) {
	for _, r := range replyCases {
		f.Add(r.MessageID, string(r.Type), string(r.Code), r.Message, r.EntryID, string(r.Result))
	}
	f.Fuzz(func(t *testing.T, id, typ, code, msg, entry, result string) {
		r := messages.Reply{MessageID: id, Type: messages.MessageType(typ), Status: messages.StatusOK, Code: messages.Code(code),
			Message: msg, EntryID: entry}
		if result != "" {
			r.Result = json.RawMessage(result)
		}
		checkEncodeReply(t, r)
	})
}

func TestEncodeResult(t *testing.T) {
	for _, r := range []any{messages.DeleteCaseBundleResult{Deleted: true}, messages.DeleteCaseBundleResult{}, map[string]int{"a": 1}} {
		got, err := encodeResult(r)
		want, _ := json.Marshal(r)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("encodeResult(%+v) = %s, %v; want %s", r, got, err, want)
		}
	}
}
