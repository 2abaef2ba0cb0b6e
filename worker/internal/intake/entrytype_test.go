package intake

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/messages"
)

// entryType gives the type decide's reply is counted under, and allocates
// nothing for a typical entry (the envelope's PeekHeader scan), so that
// counting a received message costs the read loop almost nothing.
func TestEntryType(t *testing.T) {
	in := &Intake{cfg: Config{MaxMessageBytes: 200, CaseStream: "pyrula:case-messages"}}
	entry := func(raw string) valkey.XRangeEntry {
		return valkey.XRangeEntry{ID: "1-0", FieldValues: map[string]string{messages.MessageField: raw}}
	}
	typical := entry(`{"body":{"fixture_hash":"00"},"message_id":"m-1","reply_to":"platform:replies","type":"delete_case_bundle"}`)
	for _, c := range []struct {
		e    valkey.XRangeEntry
		want string
	}{
		{typical, "delete_case_bundle"},
		{entry(`{"message_id":"m\u002d1","type":"save_case"}`), "save_case"}, // escaped: encoding/json decides
		{entry(`{"message_id":"m-1","type":"nope"}`), "nope"},
		{entry(`{"message_id":"m 1","type":"save_case"}`), ""},
		{entry(`{"message_id":"m-1","type":"save_case","reply_to":"pyrula:case-messages"}`), ""},
		{entry(`{"message_id":"m-1","type":"save_case"`), ""},
		{entry(`{"message_id":"m-1","type":"save_case","body":"` + strings.Repeat("x", 200) + `"}`), ""},
		{valkey.XRangeEntry{ID: "1-0"}, ""},
	} {
		if got := in.entryType(c.e); got != c.want {
			t.Errorf("entryType(%q) = %q, want %q", c.e.FieldValues[messages.MessageField], got, c.want)
		}
	}
	if n := testing.AllocsPerRun(50, func() { in.entryType(typical) }); n != 0 {
		t.Errorf("entryType: %v allocations for a typical entry, want none", n)
	}
}

// benchEntry is a typical delete_case_bundle entry.
var benchEntry = valkey.XRangeEntry{ID: "1-0", FieldValues: map[string]string{messages.MessageField: `{"message_id":"bench-000123","type":"delete_case_bundle","body":{"fixture_hash":"` + strings.Repeat("0", 64) + `"}}`}}

// BenchmarkEntryType is the cost that counting a received message adds
// to its handling: the scan of a typical message for its type.
func BenchmarkEntryType(b *testing.B) {
	in := &Intake{cfg: Config{MaxMessageBytes: 1 << 20, CaseStream: "pyrula:case-messages"}}
	b.ReportAllocs()
	for b.Loop() {
		if in.entryType(benchEntry) == "" {
			b.Fatal("no type")
		}
	}
}

// BenchmarkEntryTypeJSON is BenchmarkEntryType's anchor: the same answer
// with the envelope decoded by encoding/json instead of the scan.
func BenchmarkEntryTypeJSON(b *testing.B) {
	caseStream := "pyrula:case-messages"
	raw := benchEntry.FieldValues[messages.MessageField]
	b.ReportAllocs()
	for b.Loop() {
		var env struct {
			MessageID string `json:"message_id"`
			Type      string `json:"type"`
			ReplyTo   string `json:"reply_to"`
		}
		typ := ""
		if json.Unmarshal([]byte(raw), &env) == nil && env.ReplyTo != caseStream && checkMessageID(env.MessageID) == nil {
			typ = env.Type
		}
		if typ == "" {
			b.Fatal("no type")
		}
	}
}
