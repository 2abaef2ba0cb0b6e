package journallog_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/flow/journallog"
	"github.com/pyrula/caseworker/journal/capture"
	"github.com/pyrula/caseworker/journal/memjournal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
)

// pinnedEvents are runtime events with every value that two encoders
// could write differently: <, >, & and U+2028 in strings and raw values,
// raw values that are not canonical (white space, key order, 1.0, 1e3,
// -0, escapes), invalid UTF-8 in strings, times with nanoseconds in
// another zone, empty and null values, Extra fields of every kind.
func pinnedEvents() []host.Event {
	at := time.Date(2026, 3, 14, 10, 26, 53, 37_654_321, time.FixedZone("CET", 3600))
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	ref := &host.CallRef{Kind: host.KindStep, Key: "fetch<&>\u2028:0", Fingerprint: fp, Effect: flow.Read}
	tool := &host.CallRef{Kind: host.KindTool, Key: "toolu_01", Fingerprint: fp, Effect: flow.Write}
	return []host.Event{
		{Kind: runevent.RunStart, At: at, Inputs: raw(`{ "b" : [1.0, 1e3, -0, 2.50], "a":"<&>\u2028\u00e9" }`), CodeVersion: "v<1>&\u2028"},
		{Kind: runevent.RunStart, At: at, CodeVersion: "bad \xff\xfe utf8"},
		{Kind: runevent.CallStart, At: at, Call: ref, Input: raw(`{"z":1,"a":"\u003c"}`)},
		{Kind: runevent.CallDone, At: at, Call: ref, Provenance: "reused<"},
		{Kind: runevent.CallStart, At: at, Call: tool, Input: raw(`{"q":"x"}`), Tool: "refund&", WakeAt: at.Add(90*time.Second + 5)},
		{Kind: runevent.CallDone, At: at, Call: tool},
		{Kind: runevent.CaseCall, At: at, Extra: map[string]json.RawMessage{
			"seq": raw(`3`), "provenance": raw(`"reused"`), "call": raw(`{"kind":"step","key":"a\u003cb","fingerprint":"ab","effect":"read"}`),
			"note": raw(` [ "\u2028", 1.50 ] `)}},
		{Kind: runevent.CaseOutcome, At: at, Extra: map[string]json.RawMessage{"status": raw(`"error"`), "prices": raw(`{"b":2,"a":1}`)}},
		{Kind: runevent.RunError, At: at, Code: messages.WriteNotAllowed, Message: "needs <--allow-write> & more", StopKey: "tool:toolu_01",
			Extra: map[string]json.RawMessage{"divergence": raw(`{"path":"$.q","got":"\u003e"}`)}},
	}
}

// pinnedJSON is what a journal stores for pinnedEvents (run_seq 2 on; the
// run:submitted event first) and what MemLog.EventsJSON gives: the bytes
// of `pyrula events`, the worker's stream, the archive and a bundle's
// history. They must never change.
// fp is the fingerprint of the pinned calls.
var fp = strings.Repeat("0a", 32)

var pinnedJSON = []string{
	`{"at":"2026-03-14T09:26:53.037654Z","kind":"run:submitted","run_seq":1,"target_name":"t<&>"}`,
	`{"at":"2026-03-14T09:26:53.037654Z","code_version":"v<1>&` + "\u2028" + `","inputs":{"a":"<&>` + "\u2028" + `é","b":[1.0,1000.0,0,2.5]},"kind":"run:start","run_seq":2}`,
	`{"at":"2026-03-14T09:26:53.037654Z","code_version":"bad ` + "\ufffd\ufffd" + ` utf8","inputs":null,"kind":"run:start","run_seq":3}`,
	`{"at":"2026-03-14T09:26:53.037654Z","call":{"effect":"read","fingerprint":"` + fp + `","key":"fetch<&>` + "\u2028" + `:0","kind":"step"},"input":{"a":"<","z":1},"kind":"call:start","run_seq":4}`,
	`{"at":"2026-03-14T09:26:53.037654Z","call":{"effect":"read","fingerprint":"` + fp + `","key":"fetch<&>` + "\u2028" + `:0","kind":"step"},"kind":"call:done","provenance":"reused<","run_seq":5}`,
	`{"at":"2026-03-14T09:26:53.037654Z","call":{"effect":"write","fingerprint":"` + fp + `","key":"toolu_01","kind":"tool"},"input":{"q":"x"},"kind":"call:start","run_seq":6,"tool":"refund&","wake_at":"2026-03-14T09:28:23.037654326Z"}`,
	`{"at":"2026-03-14T09:26:53.037654Z","call":{"effect":"write","fingerprint":"` + fp + `","key":"toolu_01","kind":"tool"},"kind":"call:done","run_seq":7}`,
	`{"at":"2026-03-14T09:26:53.037654Z","call":{"effect":"read","fingerprint":"ab","key":"a<b","kind":"step"},"kind":"case:call","note":["` + "\u2028" + `",1.5],"provenance":"reused","run_seq":8,"seq":3}`,
	`{"at":"2026-03-14T09:26:53.037654Z","kind":"case:outcome","prices":{"a":1,"b":2},"run_seq":9,"status":"error"}`,
	`{"at":"2026-03-14T09:26:53.037654Z","code":"write_not_allowed","divergence":{"got":">","path":"$.q"},"kind":"run:error","message":"needs <--allow-write> & more","run_seq":10,"stop_key":"tool:toolu_01","stop_token":null}`,
}

// pinnedHash is the bundle hash of the case captured from that run at its
// last event before the terminal one.
const pinnedHash = "2f50bbb14a64f85cdabfe8b7289fdd23bd91c2ec578617b5b10fba79e3ad8ec7"

// TestPinnedBytes: the runtime's events reach the journal (through
// journallog) and MemLog.EventsJSON as exactly the pinned bytes, and a case
// captured from the run has the pinned hash.
func TestPinnedBytes(t *testing.T) {
	ctx := context.Background()
	j, err := memjournal.New(memjournal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	log, err := journallog.New(j, journallog.Options{Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	mem := host.NewMemLog()
	events := pinnedEvents()
	first := events[0]
	// The run:submitted event a journal writes, as MemLog gets it.
	sub := host.Event{Kind: runevent.RunSubmitted, At: first.At, Extra: map[string]json.RawMessage{"target_name": json.RawMessage(`"t\u003c&\u003e"`)}}
	if _, err := mem.Append(ctx, "r", host.Batch{Target: "t<&>", Events: []host.Event{sub}}); err != nil {
		t.Fatal(err)
	}
	for _, ev := range events {
		b := host.Batch{Target: "t<&>", Events: []host.Event{ev}}
		if ev.Kind == runevent.CallDone {
			b.Results = []bundle.Result{{Kind: string(ev.Call.Kind), Key: ev.Call.Key, Fingerprint: ev.Call.Fingerprint, Result: json.RawMessage(`{"ok": true}`)}}
		}
		if ev.Kind.Terminal() {
			if _, err := log.Finish(ctx, "r", ev); err != nil {
				t.Fatal(err)
			}
			if _, err := mem.Finish(ctx, "r", ev); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := log.Append(ctx, "r", b); err != nil {
			t.Fatal(err)
		}
		if _, err := mem.Append(ctx, "r", b); err != nil {
			t.Fatal(err)
		}
	}
	r, err := j.Run(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	memJSON := mem.EventsJSON("r")
	if len(r.Events) != len(pinnedJSON) || len(memJSON) != len(pinnedJSON) {
		t.Fatalf("%d events in the journal, %d in MemLog, want %d", len(r.Events), len(memJSON), len(pinnedJSON))
	}
	for i, want := range pinnedJSON {
		got, err := r.Events[i].JSON()
		if err != nil || string(got) != want {
			t.Errorf("journal event %d:\n got %s (%v)\nwant %s", i+1, got, err, want)
		}
		if string(memJSON[i]) != want {
			t.Errorf("MemLog event %d:\n got %s\nwant %s", i+1, memJSON[i], want)
		}
	}

	fork := r.Meta.LastSeq - 1
	c, err := capture.Encode(r, capture.Params{ForkAfterSeq: &fork, PyrulaVersion: "test", Kind: bundle.KindAgent})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Decode()
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range b.History {
		if want := pinnedJSON[i]; string(h) != want {
			t.Errorf("history %d:\n got %s\nwant %s", i, h, want)
		}
	}
	if got := string(c.Hash()); got != pinnedHash {
		t.Errorf("bundle hash %s, want %s", got, pinnedHash)
	}
}
