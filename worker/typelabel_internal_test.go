package worker

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/messages"
)

// entryTypeLabel gives the label decide's reply is counted under, and
// allocates nothing for a typical entry (the envelope's PeekHeader scan),
// so that counting a received message costs the read loop almost nothing.
func TestEntryTypeLabel(t *testing.T) {
	w := &Worker{cfg: Config{MaxMessageBytes: 200, CaseStream: "pyrula:case-messages"}}
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
		{entry(`{"message_id":"m-1","type":"nope"}`), "unknown"},
		{entry(`{"message_id":"m 1","type":"save_case"}`), "unknown"},
		{entry(`{"message_id":"m-1","type":"save_case","reply_to":"pyrula:case-messages"}`), "unknown"},
		{entry(`{"message_id":"m-1","type":"save_case"`), "unknown"},
		{entry(`{"message_id":"m-1","type":"save_case","body":"` + strings.Repeat("x", 200) + `"}`), "unknown"},
		{valkey.XRangeEntry{ID: "1-0"}, "unknown"},
	} {
		if got := w.entryTypeLabel(c.e); got != c.want {
			t.Errorf("entryTypeLabel(%q) = %q, want %q", c.e.FieldValues[messages.MessageField], got, c.want)
		}
	}
	if n := testing.AllocsPerRun(50, func() { w.entryTypeLabel(typical) }); n != 0 {
		t.Errorf("entryTypeLabel: %v allocations for a typical entry, want none", n)
	}
}

// BenchmarkTook is the cost that counting a received message adds to its
// handling: the scan of a typical message and the counter.
func BenchmarkTook(b *testing.B) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	w := &Worker{metrics: m, cfg: Config{MaxMessageBytes: 1 << 20, CaseStream: "pyrula:case-messages"}}
	e := valkey.XRangeEntry{ID: "1-0", FieldValues: map[string]string{messages.MessageField: `{"message_id":"bench-000123","type":"delete_case_bundle","body":{"fixture_hash":"` + strings.Repeat("0", 64) + `"}}`}}
	b.ReportAllocs()
	for b.Loop() {
		w.took(e, 1)
	}
}

// BenchmarkTookJSON is BenchmarkTook's anchor: the same count with the
// envelope decoded by encoding/json instead of the scan.
func BenchmarkTookJSON(b *testing.B) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	caseStream := "pyrula:case-messages"
	raw := `{"message_id":"bench-000123","type":"delete_case_bundle","body":{"fixture_hash":"` + strings.Repeat("0", 64) + `"}}`
	b.ReportAllocs()
	for b.Loop() {
		var env struct {
			MessageID string `json:"message_id"`
			Type      string `json:"type"`
			ReplyTo   string `json:"reply_to"`
		}
		label := "unknown"
		if json.Unmarshal([]byte(raw), &env) == nil && env.ReplyTo != caseStream && checkMessageID(env.MessageID) == nil {
			label = typeLabel(env.Type)
		}
		m.received.WithLabelValues(label).Inc()
	}
}
