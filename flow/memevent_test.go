package flow

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// decoded is what a journal that stores events as JSON gives back for ev.
func decoded(t *testing.T, ev Event) (Event, []byte) {
	t.Helper()
	raw, err := ev.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var back Event
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return back, raw
}

// memEventCases are events of every kind, with the edge cases of the JSON
// round trip: null and missing values, times with nanoseconds and zones,
// Extra fields that clash with fields of the kind, invalid UTF-8, raw
// values with white space.
func memEventCases() []Event {
	at := time.Date(2026, 3, 14, 9, 26, 53, 37_654_321, time.FixedZone("X", 3600))
	ref := &CallRef{Kind: KindStep, Key: "fetch:0", Fingerprint: "ab", Effect: Read}
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	return []Event{
		{Kind: EventRunSubmitted, At: at},
		{Kind: EventRunSubmitted, At: time.Now()}, // monotonic reading
		{Kind: EventRunStart, At: at, Inputs: raw(`{"n":1}`), CodeVersion: "v1"},
		{Kind: EventRunStart, At: at},
		{Kind: EventRunStart, At: at, Inputs: raw(`null`), CodeVersion: "<&>\u2028"},
		{Kind: EventRunStart, At: at, Inputs: raw(` {"n":1}`)},
		{Kind: EventRunStart, At: at, Inputs: raw(`{"n": 1 }`)},
		{Kind: EventRunStart, At: at, Inputs: raw(`{"n":`)},
		{Kind: EventRunStart, At: at, CodeVersion: "bad \xff utf8"},
		{Kind: EventCallStart, At: at, Call: ref, Input: raw(`{"id":1}`)},
		{Kind: EventCallStart, At: at, Call: ref, Input: raw(`{"id":1}`), WakeAt: at.Add(time.Hour), Tool: "t"},
		{Kind: EventCallStart, At: at},
		{Kind: EventCallStart, At: at, Call: ref, Provenance: "dropped", Result: raw(`1`)},
		{Kind: EventCallDone, At: at, Call: ref, Provenance: "reused"},
		{Kind: EventCallDone, At: at, Call: ref, Extra: map[string]json.RawMessage{"provenance": raw(`"moved"`)}},
		{Kind: EventCallDone, At: at, Call: &CallRef{Kind: "k\xfe"}},
		{Kind: EventCaseCall, At: at, Extra: map[string]json.RawMessage{"seq": raw(`3`), "call": raw(`{"kind":"step"}`), "provenance": raw(`"reused"`)}},
		{Kind: EventCaseCall, At: at, Extra: map[string]json.RawMessage{"kind": raw(`"dropped"`), "x": nil}},
		{Kind: EventCaseOutcome, At: at, Extra: map[string]json.RawMessage{"code": raw(`"c"`), "null": raw(`null`)}},
		{Kind: EventCaseOutcome, At: at, Extra: map[string]json.RawMessage{"bad\xff": raw(`1`)}},
		{Kind: EventCaseOutcome, At: at, Extra: map[string]json.RawMessage{}},
		{Kind: EventRunComplete, At: at, Result: raw(`{"a":[1,2.5,"x"]}`)},
		{Kind: EventRunComplete, At: at},
		{Kind: EventRunComplete, At: at, Result: raw(`null`)},
		{Kind: EventRunError, At: at, Code: "replay_diverged", Message: "m <b>", StopKey: "step:a:0", StopToken: "step:a",
			Extra: map[string]json.RawMessage{"reason": raw(`"unexpected_call"`)}},
		{Kind: EventRunError, At: at},
		{Kind: EventRunCancelled, At: at, Message: "dropped"},
		{Kind: EventRunCancelled},
		{Kind: EventRunCancelled, At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
}

// TestRoundTripped: the events MemLog keeps as Go values are exactly what
// the JSON round trip gives, and their JSON is the same bytes; validJSON
// refuses exactly those whose JSON does not decode.
func TestRoundTripped(t *testing.T) {
	fast := 0
	for i, ev := range memEventCases() {
		ev.RunSeq = int64(i + 1)
		norm, ok := roundTripped(ev)
		if !ok {
			continue
		}
		fast++
		if !validJSON(&norm) {
			raw, _ := ev.MarshalJSON()
			if json.Unmarshal(raw, new(Event)) == nil {
				t.Errorf("case %d: validJSON refused %s, which decodes", i, raw)
			}
			continue
		}
		want, wantRaw := decoded(t, ev)
		if !reflect.DeepEqual(norm, want) {
			t.Errorf("case %d:\n got %#v\nwant %#v", i, norm, want)
		}
		raw, err := norm.MarshalJSON()
		if err != nil || string(raw) != string(wantRaw) {
			t.Errorf("case %d: JSON %s (%v), want %s", i, raw, err, wantRaw)
		}
	}
	if fast < 15 {
		t.Errorf("only %d events took the fast path", fast)
	}
}

// TestMemLogAsJournal: whichever way an event is kept, Load and EventsJSON
// give what storing its JSON would, and Load's events share nothing with
// the log.
func TestMemLogAsJournal(t *testing.T) {
	ctx := context.Background()
	log := NewMemLog()
	var want []Event
	var wantRaw []string
	var bad []int
	for i, ev := range memEventCases() {
		if ev.Kind.Terminal() {
			continue
		}
		if _, err := log.Append(ctx, "r", Batch{Events: []Event{ev}}); err != nil {
			t.Fatal(err)
		}
		ev.RunSeq = int64(len(want) + 1)
		raw, _ := ev.MarshalJSON()
		var back Event
		if json.Unmarshal(raw, &back) != nil {
			bad = append(bad, i)
		}
		want = append(want, back)
		// EventsJSON gives the canonical form (as a journal stores it);
		// bytes that are not canonical JSON are kept as given.
		if canon, err := canonical(raw); err == nil {
			raw = canon
		}
		wantRaw = append(wantRaw, string(raw))
	}
	if len(bad) != 1 {
		t.Fatalf("want exactly one undecodable case, got %v", bad)
	}
	if _, err := log.Load(ctx, "r"); err == nil {
		t.Fatal("Load of a journal holding invalid JSON succeeded")
	}
	for i, raw := range log.EventsJSON("r") {
		if string(raw) != wantRaw[i] {
			t.Errorf("event %d: JSON %s, want %s", i, raw, wantRaw[i])
		}
	}

	good := NewMemLog()
	for _, ev := range memEventCases() {
		if ev.Kind.Terminal() || (ev.Kind == EventRunStart && string(ev.Inputs) == `{"n":`) {
			continue
		}
		if _, err := good.Append(ctx, "r", Batch{Events: []Event{ev}}); err != nil {
			t.Fatal(err)
		}
	}
	got := good.Events("r")
	want = good.Events("r")
	// Load gives the events whose JSON, canonicalised, EventsJSON gives.
	for i, raw := range good.EventsJSON("r") {
		enc, err := got[i].MarshalJSON()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if canon, err := canonical(enc); err == nil {
			enc = canon
		}
		if string(enc) != string(raw) {
			t.Errorf("event %d: Load gives %s, EventsJSON %s", i, enc, raw)
		}
	}
	for _, ev := range got {
		if ev.Call != nil {
			ev.Call.Key = "mutated"
		}
		for name := range ev.Extra {
			ev.Extra[name] = json.RawMessage(`"mutated"`)
		}
		if len(ev.Inputs) > 0 {
			ev.Inputs[0] = 'X'
		}
	}
	if again := good.Events("r"); !reflect.DeepEqual(again, want) {
		t.Fatal("mutating Load's events changed the log")
	}
}
