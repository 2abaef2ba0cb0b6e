package intake

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/messages"
)

// typeOf gives the type decide's reply is counted under, and allocates
// nothing: the envelope handle reads once (read) serves both, so that
// counting a received message costs almost nothing.
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
		m := in.read(c.e)
		if got := in.typeOf(&m); got != c.want {
			t.Errorf("typeOf(%q) = %q, want %q", c.e.FieldValues[messages.MessageField], got, c.want)
		}
	}
	m := in.read(typical)
	if n := testing.AllocsPerRun(50, func() { in.typeOf(&m) }); n != 0 {
		t.Errorf("typeOf: %v allocations for a typical entry, want none", n)
	}
}

// benchEntry is a typical delete_case_bundle entry.
var benchEntry = valkey.XRangeEntry{ID: "1-0", FieldValues: map[string]string{messages.MessageField: `{"message_id":"bench-000123","type":"delete_case_bundle","body":{"fixture_hash":"` + strings.Repeat("0", 64) + `"}}`}}

// BenchmarkEntryType is the cost of reading a typical message's envelope
// (read), which its handling and the count of received messages share,
// and of its type for that count.
func BenchmarkEntryType(b *testing.B) {
	in := &Intake{cfg: Config{MaxMessageBytes: 1 << 20, CaseStream: "pyrula:case-messages"}}
	b.ReportAllocs()
	for b.Loop() {
		m := in.read(benchEntry)
		if in.typeOf(&m) == "" {
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
