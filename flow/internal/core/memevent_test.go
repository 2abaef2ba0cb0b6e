package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/runevent"
)

// memEventCases are events of every kind, with the edge cases of the JSON
// round trip: null and missing values, times with nanoseconds and zones,
// Extra fields that clash with fields of the kind, invalid UTF-8, raw
// values that are not canonical or not JSON, members a decoded event
// lacks.
func memEventCases(t *testing.T) []Event {
	at := time.Date(2026, 3, 14, 9, 26, 53, 37_654_321, time.FixedZone("X", 3600))
	ref := &CallRef{Kind: KindStep, Key: "fetch:0", Fingerprint: "ab", Effect: Read}
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	decoded := func(s string) Event {
		ev, err := runevent.Decode([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		ev.RunSeq = 0
		return ev
	}
	return []Event{
		{Kind: runevent.RunSubmitted, At: at},
		{Kind: runevent.RunSubmitted, At: time.Now()}, // monotonic reading
		{Kind: runevent.RunStart, At: at, Inputs: raw(`{"n":1}`), CodeVersion: "v1"},
		{Kind: runevent.RunStart, At: at},
		{Kind: runevent.RunStart, At: at, Inputs: raw(`null`), CodeVersion: "<&>\u2028"},
		{Kind: runevent.RunStart, At: at, Inputs: raw(` {"n":1}`)},
		{Kind: runevent.RunStart, At: at, Inputs: raw(`{"n": 1 }`)},
		{Kind: runevent.RunStart, At: at, Inputs: raw(`{"n":`)},
		{Kind: runevent.RunStart, At: at, CodeVersion: "bad \xff utf8"},
		{Kind: runevent.CallStart, At: at, Call: ref, Input: raw(`{"id":1}`)},
		{Kind: runevent.CallStart, At: at, Call: ref, Input: raw(`{"id":1}`), WakeAt: at.Add(time.Hour), Tool: "t"},
		{Kind: runevent.CallStart, At: at},
		{Kind: runevent.CallStart, At: at, Call: ref, Provenance: "dropped", Result: raw(`1`)},
		decoded(`{"at":"2026-03-14T09:26:53.037654Z","input":{"a":1},"kind":"call:start","run_seq":4}`),
		decoded(`{"at":"2026-03-14T09:26:53.037654Z","call":null,"kind":"call:start","run_seq":4}`),
		decoded(`{"at":"2026-03-14T09:26:53.037654Z","kind":"call:done","run_seq":4}`),
		decoded(`{"at":"2026-03-14T09:26:53.037654Z","kind":"run:complete","run_seq":4}`),
		{Kind: runevent.CallDone, At: at, Call: ref, Provenance: "reused"},
		{Kind: runevent.CallDone, At: at, Call: ref, Provenance: "recorded"},                  // a provenance without a code
		{Kind: "custom:kind", At: at, Extra: map[string]json.RawMessage{"n": raw(`1`)}},       // a kind without a code
		{Kind: runevent.CallDone, At: time.Date(1, 1, 1, 0, 0, 0, 1000, time.UTC), Call: ref}, // year 1's first microsecond
		{Kind: runevent.CallDone, At: time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC), Call: ref},
		{Kind: runevent.CallDone, At: at, Call: ref, Extra: map[string]json.RawMessage{"provenance": raw(`"moved"`)}},
		{Kind: runevent.CallDone, At: at, Call: &CallRef{Kind: "k\xfe"}},
		{Kind: runevent.CaseCall, At: at, Extra: map[string]json.RawMessage{"seq": raw(`3`), "call": raw(`{"kind":"step"}`), "provenance": raw(`"reused"`)}},
		{Kind: runevent.CaseCall, At: at, Call: ref, Provenance: "reused", CallSeq: 3},
		{Kind: runevent.CaseCall, At: at, Call: ref, Provenance: "live"},
		{Kind: runevent.CaseCall, At: at, Call: ref, CallSeq: 2, Extra: map[string]json.RawMessage{"result": raw(`{"b":1,"a":2}`)}},
		decoded(`{"at":"2026-03-14T09:26:53.037654Z","call":{"effect":"read","fingerprint":"ab","key":"fetch:0","kind":"step"},"kind":"case:call","provenance":"reused","run_seq":4}`),
		{Kind: runevent.CallDone, At: at, Call: ref, Provenance: "reused", CallSeq: 5},
		{Kind: runevent.CaseCall, At: at, Extra: map[string]json.RawMessage{"kind": raw(`"reserved"`), "x": nil}},
		{Kind: runevent.CaseCall, At: at, Extra: map[string]json.RawMessage{"x": nil, "y": raw(`"\u003c"`)}},
		{Kind: runevent.CaseOutcome, At: at, Extra: map[string]json.RawMessage{"code": raw(`"c"`), "null": raw(`null`)}},
		{Kind: runevent.CaseOutcome, At: at, Extra: map[string]json.RawMessage{"bad\xff": raw(`1`)}},
		{Kind: runevent.CaseOutcome, At: at, Extra: map[string]json.RawMessage{}},
		{Kind: "", At: at},
		{Kind: runevent.RunComplete, At: at, Result: raw(`{"a":[1,2.5,"x"]}`)},
		{Kind: runevent.RunComplete, At: at},
		{Kind: runevent.RunComplete, At: at, Result: raw(`null`)},
		{Kind: runevent.RunError, At: at, Code: "replay_diverged", Message: "m <b>", StopKey: "step:a:0", StopToken: "step:a",
			Extra: map[string]json.RawMessage{"reason": raw(`"unexpected_call"`)}},
		{Kind: runevent.RunError, At: at},
		{Kind: runevent.RunCancelled, At: at, Message: "dropped"},
		{Kind: runevent.RunCancelled},
		{Kind: runevent.RunCancelled, At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Kind: runevent.CallDone, At: time.Date(586_524, 1, 1, 0, 0, 0, 0, time.UTC), Call: ref}, // its microseconds wrap around to 1970
	}
}

// TestMemLogAsJournal: Load gives what decoding each event's JSON gives,
// EventsJSON gives that JSON, and Load's events share nothing with the
// log; a run holding an event a journal would refuse fails to load.
func TestMemLogAsJournal(t *testing.T) {
	ctx := context.Background()
	log := NewMemLog()
	var want []Event
	var wantRaw []string
	refused, compacted := 0, 0
	for i, ev := range memEventCases(t) {
		runID, seq := "r", int64(len(want)+1)
		if ev.Kind.Terminal() {
			runID, seq = fmt.Sprint("terminal", i), 1
		}
		ev.RunSeq = seq
		raw, encErr := ev.AppendJSON(nil)
		if encErr != nil {
			runID = fmt.Sprint("refused", i)
		}
		var err error
		if ev.Kind.Terminal() {
			_, err = log.Finish(ctx, runID, ev)
		} else {
			_, err = log.Append(ctx, runID, Batch{Events: []Event{ev}})
		}
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if compact(&ev).full == nil {
			compacted++
		}
		if encErr != nil {
			refused++
			if _, err := log.Load(ctx, runID); !errors.Is(err, runevent.ErrInvalid) {
				t.Errorf("case %d: Load of an event a journal refuses (%v): %v", i, encErr, err)
			}
			continue
		}
		back, err := runevent.Decode(raw)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if ev.Kind.Terminal() {
			got := log.Events(runID)
			if len(got) != 1 || !reflect.DeepEqual(got[0], back) || string(log.EventsJSON(runID)[0]) != string(raw) {
				t.Errorf("case %d: Load gives %#v, want %#v", i, got, back)
			}
			continue
		}
		want = append(want, back)
		wantRaw = append(wantRaw, string(raw))
	}
	if refused != 6 || compacted < 15 {
		t.Errorf("%d events refused (want 6), %d compacted", refused, compacted)
	}
	got := log.Events("r")
	if !reflect.DeepEqual(got, want) {
		for i := range min(len(got), len(want)) {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Errorf("event %d: Load gives\n%#v\nwant\n%#v", i+1, got[i], want[i])
			}
		}
		t.Fatalf("Load gives %d events, want %d", len(got), len(want))
	}
	for i, raw := range log.EventsJSON("r") {
		if string(raw) != wantRaw[i] {
			t.Errorf("event %d: JSON %s, want %s", i+1, raw, wantRaw[i])
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
	if again := log.Events("r"); !reflect.DeepEqual(again, want) {
		t.Fatal("mutating Load's events changed the log")
	}
}

// TestMemLogResults: a result recorded once is refused again, with the
// whole batch, and a batch of several results too.
func TestMemLogResults(t *testing.T) {
	ctx := context.Background()
	log := NewMemLog()
	res := func(key string) bundle.Result {
		return bundle.Result{Kind: "step", Key: key, Fingerprint: "f", Result: json.RawMessage(`1`)}
	}
	done := []Event{{Kind: runevent.CallDone}}
	if seq, err := log.Append(ctx, "r", Batch{Events: done, Results: []bundle.Result{res("a:0")}}); err != nil || seq != 1 {
		t.Fatalf("Append: %d, %v", seq, err)
	}
	for _, rs := range [][]bundle.Result{{res("a:0")}, {res("b:0"), res("a:0")}, {res("c:0"), res("c:0")}} {
		if _, err := log.Append(ctx, "r", Batch{Events: done, Results: rs}); !errors.Is(err, ErrResultExists) {
			t.Fatalf("results %v recorded again: %v", rs, err)
		}
	}
	if seq, err := log.Append(ctx, "r", Batch{Events: done, Results: []bundle.Result{res("b:0"), res("c:0")}}); err != nil || seq != 2 {
		t.Fatalf("Append: %d, %v", seq, err)
	}
	if n := len(log.Events("r")); n != 2 || len(log.Results("r")) != 3 {
		t.Fatalf("%d events, %d results", n, len(log.Results("r")))
	}
}
