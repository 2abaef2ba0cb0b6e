package runevent_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pyrula/caseworker/canonjson"
	"github.com/pyrula/caseworker/runevent"
)

// roundTripCases are events of every kind with the edge cases of the JSON
// round trip: null and missing values, times with nanoseconds, zones and
// monotonic readings, Extra members that clash with members of the kind,
// invalid UTF-8, raw values that are not canonical, fields not of the kind.
func roundTripCases() []runevent.Event {
	at := time.Date(2026, 3, 14, 9, 26, 53, 37_654_321, time.FixedZone("X", 3600))
	ref := &runevent.Call{Kind: "step", Key: "fetch:0", Fingerprint: "ab", Effect: runevent.EffectRead}
	lacking, err := runevent.Decode([]byte(`{"at":"2026-03-14T09:26:53.037654Z","kind":"call:start","run_seq":3}`))
	if err != nil {
		panic(err)
	}
	lackingSet := lacking
	lackingSet.Input = raw(`{"set":true}`)
	return []runevent.Event{
		{Kind: runevent.RunSubmitted, At: at},
		{Kind: runevent.RunSubmitted, At: time.Now()}, // monotonic reading
		{Kind: runevent.RunStart, At: at, Inputs: raw(`{"n":1}`), CodeVersion: "v1"},
		{Kind: runevent.RunStart, At: at},
		{Kind: runevent.RunStart, At: at, Inputs: raw(`null`), CodeVersion: "<&>\u2028"},
		{Kind: runevent.RunStart, At: at, Inputs: raw(` {"n":1}`)},
		{Kind: runevent.RunStart, At: at, Inputs: raw(`{"n": 1.0 }`)},
		{Kind: runevent.RunStart, At: at, Inputs: raw(`{"n":`)},
		{Kind: runevent.RunStart, At: at, Inputs: json.RawMessage{}},
		{Kind: runevent.RunStart, At: at, CodeVersion: "bad \xff utf8"},
		{Kind: runevent.CallStart, At: at, Call: ref, Input: raw(`{"id":1}`)},
		{Kind: runevent.CallStart, At: at, Call: ref, Input: raw(`{"id":1}`), WakeAt: at.Add(time.Hour), Tool: "t"},
		{Kind: runevent.CallStart, At: at},
		{Kind: runevent.CallStart, At: at, Call: ref, Provenance: "dropped", Result: raw(`1`)},
		{Kind: runevent.CallStart, At: at, Call: ref, Input: raw(`"\u003c"`), Tool: "t\xff"},
		{Kind: runevent.CallStart, At: at, WakeAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		lacking,
		lackingSet,
		{Kind: runevent.CallDone, At: at, Call: ref, Provenance: "reused"},
		{Kind: runevent.CallDone, At: at, Call: ref, Extra: map[string]json.RawMessage{"provenance": raw(`"moved"`)}},
		{Kind: runevent.CallDone, At: at, Call: ref, Extra: map[string]json.RawMessage{"provenance": raw(`7`)}},
		{Kind: runevent.CallDone, At: at, Call: ref, Provenance: "set", Extra: map[string]json.RawMessage{"provenance": raw(`"dropped"`)}},
		{Kind: runevent.CallDone, At: at, Call: &runevent.Call{Kind: "k\xfe"}},
		{Kind: runevent.CaseCall, At: at, Extra: map[string]json.RawMessage{"seq": raw(`3`), "call": raw(`{"effect":"read","fingerprint":"ab","key":"a:0","kind":"step"}`), "provenance": raw(`"reused"`)}},
		{Kind: runevent.CaseCall, At: at, Extra: map[string]json.RawMessage{"kind": raw(`"reserved"`)}},
		{Kind: runevent.CaseCall, At: at, Extra: map[string]json.RawMessage{"x": nil, "y": raw(`"\u003c"`)}},
		{Kind: runevent.CaseOutcome, At: at, Extra: map[string]json.RawMessage{"code": raw(`"c"`), "null": raw(`null`)}},
		{Kind: runevent.CaseOutcome, At: at, Extra: map[string]json.RawMessage{"bad\xff": raw(`1`)}},
		{Kind: runevent.CaseOutcome, At: at, Extra: map[string]json.RawMessage{}},
		{Kind: runevent.RunComplete, At: at, Result: raw(`{"a":[1,2.5,"x"]}`)},
		{Kind: runevent.RunComplete, At: at},
		{Kind: runevent.RunComplete, At: at, Result: raw(`null`)},
		{Kind: runevent.RunComplete, At: at, Result: raw(`1E400`)},
		{Kind: runevent.RunError, At: at, Code: "replay_diverged", Message: "m <b>", StopKey: "step:a:0", StopToken: "step:a",
			Extra: map[string]json.RawMessage{"reason": raw(`"unexpected_call"`)}},
		{Kind: runevent.RunError, At: at},
		{Kind: runevent.RunCancelled, At: at, Message: "dropped"},
		{Kind: runevent.RunCancelled},
		{Kind: runevent.RunCancelled, At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Kind: "", At: at},
		{Kind: "k\xff", At: at},
	}
}

// TestRoundTrip: RoundTrip is Decode of AppendJSON, with or without the
// encoding, and fails exactly where AppendJSON does.
func TestRoundTrip(t *testing.T) {
	fast := 0
	for i, ev := range roundTripCases() {
		ev.RunSeq = int64(i + 1)
		got, err := ev.RoundTrip()
		raw, encErr := ev.JSON()
		if encErr != nil {
			if !errors.Is(err, runevent.ErrInvalid) {
				t.Errorf("case %d: RoundTrip error %v where JSON fails with %v", i, err, encErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("case %d: RoundTrip: %v", i, err)
			continue
		}
		want, err := runevent.Decode(raw)
		if err != nil {
			t.Fatalf("case %d: Decode(%s): %v", i, raw, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("case %d:\n got %#v\nwant %#v", i, got, want)
		}
		if again, err := got.JSON(); err != nil || !bytes.Equal(again, raw) {
			t.Errorf("case %d: JSON %s (%v), want %s", i, again, err, raw)
		}
		if ev.Call != nil && got.Call == ev.Call || ev.Extra != nil && got.Extra != nil &&
			reflect.ValueOf(got.Extra).UnsafePointer() == reflect.ValueOf(ev.Extra).UnsafePointer() {
			fast++ // shares the event's values: it did not encode
		}
	}
	if fast < 6 {
		t.Errorf("only %d events took the fast path", fast)
	}
}

// FuzzRoundTrip: for any event built from a kind, one member of its own
// (a field or Extra) and run_seq, AppendJSON is canonical, Decode of it
// gives RoundTrip's event, and that event encodes to the same bytes.
func FuzzRoundTrip(f *testing.F) {
	f.Add("call:start", "input", []byte(`{"b":[1,2.50,"\u2028"],"a":null}`), int64(3), "")
	f.Add("run:error", "stop_token", []byte(`null`), int64(1), "m")
	f.Add("k", "émoji", []byte(`"✓<>&"`), int64(1<<62), "")
	f.Add("run:complete", "result", []byte(` 1.0 `), int64(0), "")
	f.Add("call:done", "provenance", []byte(`"x"`), int64(2), "reused")
	f.Add("call:start", "wake_at", []byte(`"2025-01-02T03:04:05.1Z"`), int64(2), "bad\xff")
	f.Fuzz(func(t *testing.T, kind, name string, value []byte, seq int64, s string) {
		at := time.Date(2025, 1, 2, 3, 4, 5, 6789, time.UTC)
		evs := []runevent.Event{
			{RunSeq: seq, Kind: runevent.Kind(kind), At: at, Extra: map[string]json.RawMessage{name: value}},
			{RunSeq: seq, Kind: runevent.Kind(kind), At: at, Inputs: value, Input: value, Result: value,
				CodeVersion: s, Tool: s, Provenance: s, Message: s, StopKey: s, Code: "c",
				Call: &runevent.Call{Kind: runevent.CallKind(s), Key: name}},
		}
		if e, err := runevent.FromMembers(runevent.Kind(kind), map[string]json.RawMessage{name: value}); err == nil {
			e.RunSeq, e.At = seq, at
			evs = append(evs, e)
		}
		for _, ev := range evs {
			raw, err := ev.JSON()
			got, rtErr := ev.RoundTrip()
			if err != nil {
				if rtErr == nil {
					t.Fatalf("RoundTrip of %+v succeeded, JSON failed: %v", ev, err)
				}
				continue
			}
			if c, err := canonjson.Canonicalize(raw); err != nil || !bytes.Equal(c, raw) {
				t.Fatalf("%s is not canonical (%v)", raw, err)
			}
			back, err := runevent.Decode(raw)
			if err != nil {
				t.Fatalf("Decode(%s): %v", raw, err)
			}
			if rtErr != nil || !reflect.DeepEqual(got, back) {
				t.Fatalf("RoundTrip of %+v\n= %#v, %v\nDecode(%s)\n= %#v", ev, got, rtErr, raw, back)
			}
			if again, err := back.JSON(); err != nil || !bytes.Equal(again, raw) {
				t.Fatalf("re-encoded %s (%v), want %s", again, err, raw)
			}
		}
	})
}

// FuzzDecode: decoding never panics, and the JSON of what decodes is the
// canonical form of the text (with at in TimeLayout).
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"at":"2025-01-02T03:04:05.000006Z","call":{"effect":"read","fingerprint":"f","key":"a:0","kind":"step"},"input":{"n":1},"kind":"call:start","run_seq":3}`))
	f.Add([]byte(`{"at":"2025-01-02T03:04:05.000006Z","kind":"run:complete","output":{"ok":true},"run_seq":4}`))
	f.Add([]byte(`{"run_seq":9,"kind":"run:error","at":"2025-01-02T03:04:05Z","code":"c","stop_key":"","stop_token":null, "x" : [1.0]}`))
	f.Add([]byte(`{"at":"2025-01-02T03:04:05.000006Z","call":null,"kind":"call:start","tool":"","wake_at":"2025-01-02T03:04:05.5+00:00"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := runevent.Decode(data)
		if err != nil {
			return
		}
		out, err := e.JSON()
		if !utf8.Valid(data) {
			return
		}
		want, cerr := canonjson.Canonicalize(data)
		if cerr != nil {
			return // canonical JSON refuses it (a number out of range, …)
		}
		if err != nil {
			t.Fatalf("JSON of Decode(%s): %v", data, err)
		}
		// Put at in TimeLayout to compare.
		var m map[string]json.RawMessage
		if err := json.Unmarshal(want, &m); err != nil {
			t.Fatal(err)
		}
		m["at"], _ = json.Marshal(runevent.FormatTime(e.At))
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(m); err != nil {
			t.Fatal(err)
		}
		if want, err = canonjson.Canonicalize(buf.Bytes()); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, want) {
			t.Fatalf("JSON of Decode(%s)\n= %s\nwant %s", data, out, want)
		}
		if rt, err := e.RoundTrip(); err != nil || !reflect.DeepEqual(rt, mustDecode(t, out)) {
			t.Fatalf("RoundTrip of Decode(%s) = %+v, %v", data, rt, err)
		}
	})
}

func mustDecode(t *testing.T, raw []byte) runevent.Event {
	t.Helper()
	e, err := runevent.Decode(raw)
	if err != nil {
		t.Fatalf("Decode(%s): %v", raw, err)
	}
	return e
}
