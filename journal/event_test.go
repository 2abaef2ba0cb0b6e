package journal_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/runevent"
)

func TestEventJSONRoundTrip(t *testing.T) {
	t.Parallel()
	e, err := journal.NewEvent(runevent.CallStart, map[string]any{
		"call":  journal.Call{Kind: "tool", Key: "toolu_01", Fingerprint: "ab", Effect: "write"},
		"input": map[string]any{"q": "<a&b>", "n": 1.5},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.RunSeq = 7
	e.At = time.Date(2025, 1, 2, 3, 4, 5, 6_789_000, time.FixedZone("CET", 3600))
	raw, err := e.JSON()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"at":"2025-01-02T02:04:05.006789Z","call":{"effect":"write","fingerprint":"ab","key":"toolu_01","kind":"tool"},"input":{"n":1.5,"q":"<a&b>"},"kind":"call:start","run_seq":7}`
	if string(raw) != want {
		t.Fatalf("JSON =\n%s\nwant\n%s", raw, want)
	}
	var back journal.Event
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if back.RunSeq != 7 || back.Kind != runevent.CallStart || !back.At.Equal(e.At) || back.At.Location() != time.UTC {
		t.Errorf("decoded %+v", back)
	}
	again, err := back.JSON()
	if err != nil || string(again) != want {
		t.Errorf("JSON of the decoded event = %s, %v", again, err)
	}
	c, ok := journal.CallOf(back)
	if !ok || c.ID() != "tool:toolu_01" || c.Effect != "write" {
		t.Errorf("Call = %+v, %v", c, ok)
	}
	var in struct{ Q string }
	if ok, err := back.Field("input", &in); !ok || err != nil || in.Q != "<a&b>" {
		t.Errorf("Field(input) = %v, %v, %+v", ok, err, in)
	}
	if ok, err := back.Field("missing", &in); ok || err != nil {
		t.Errorf("Field(missing) = %v, %v", ok, err)
	}
	if _, ok := journal.CallOf(journal.Event{Kind: "x"}); ok {
		t.Error("Call of an event without a call field reported ok")
	}
}

func TestEventInvalid(t *testing.T) {
	t.Parallel()
	for name, e := range map[string]journal.Event{
		"no kind":        {},
		"reserved name":  {Kind: "k", Extra: map[string]json.RawMessage{"run_seq": json.RawMessage(`1`)}},
		"invalid value":  {Kind: "k", Extra: map[string]json.RawMessage{"a": json.RawMessage(`nope`)}},
		"two values":     {Kind: "k", Extra: map[string]json.RawMessage{"a": json.RawMessage(`1 2`)}},
		"bad UTF-8 kind": {Kind: "k\xff"},
	} {
		if _, err := e.JSON(); !errors.Is(err, runevent.ErrInvalid) {
			t.Errorf("%s: JSON error %v, want ErrInvalid", name, err)
		}
	}
	// An event not yet appended has no run_seq.
	var unappended journal.Event
	if err := json.Unmarshal([]byte(`{"kind":"k","at":"2025-01-01T00:00:00Z"}`), &unappended); err != nil || unappended.RunSeq != 0 {
		t.Errorf("Unmarshal of an event without run_seq: %+v, %v", unappended, err)
	}
	for _, raw := range []string{`{}`, `[]`, `{"run_seq":1,"at":"2025-01-01T00:00:00Z"}`, `{"run_seq":0,"kind":"k","at":"2025-01-01T00:00:00Z"}`, `{"run_seq":1,"kind":"k","at":"yesterday"}`} {
		var e journal.Event
		if err := json.Unmarshal([]byte(raw), &e); err == nil {
			t.Errorf("Unmarshal(%s) accepted it", raw)
		}
	}
	if _, err := journal.NewEvent("k", []int{1}); !errors.Is(err, journal.ErrInvalid) {
		t.Errorf("NewEvent with an array: %v", err)
	}
	if _, err := journal.NewEvent("k", map[string]any{"kind": 1}); !errors.Is(err, journal.ErrInvalid) {
		t.Errorf("NewEvent with a reserved name: %v", err)
	}
}

func TestKinds(t *testing.T) {
	t.Parallel()
	for kind, want := range map[journal.Kind]journal.Status{
		runevent.RunComplete: journal.StatusComplete, runevent.RunError: journal.StatusError, runevent.RunCancelled: journal.StatusCancelled,
	} {
		if !journal.IsTerminal(kind) {
			t.Errorf("IsTerminal(%s) = false", kind)
		}
		if s, ok := journal.TerminalStatus(kind); !ok || s != want || !s.Terminal() || !s.Valid() {
			t.Errorf("TerminalStatus(%s) = %s, %v", kind, s, ok)
		}
	}
	for _, kind := range []journal.Kind{runevent.RunSubmitted, runevent.RunStart, runevent.CallStart, runevent.CallDone, runevent.CaseCall, runevent.CaseOutcome, "run:completed"} {
		if journal.IsTerminal(kind) {
			t.Errorf("IsTerminal(%s) = true", kind)
		}
	}
	for _, s := range []journal.Status{journal.StatusRunning, journal.StatusSuspended} {
		if s.Terminal() || !s.Valid() {
			t.Errorf("status %s: terminal %v valid %v", s, s.Terminal(), s.Valid())
		}
	}
	if journal.Status("done").Valid() {
		t.Error(`Status("done").Valid()`)
	}
}

func TestCheckRunID(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"run_abc123", "a", "0", "case/run-1:2@x.y+z=", strings.Repeat("r", 200)} {
		if err := journal.CheckRunID(id); err != nil {
			t.Errorf("CheckRunID(%q): %v", id, err)
		}
	}
	for _, id := range []string{"", "_x", "a b", "a{b}", "a}", "é", "a\n", strings.Repeat("r", 201)} {
		if err := journal.CheckRunID(id); !errors.Is(err, journal.ErrInvalid) {
			t.Errorf("CheckRunID(%q) = %v, want ErrInvalid", id, err)
		}
	}
	for _, ns := range []string{"pyrula", "team-a.prod:eu_1"} {
		if err := journal.CheckNamespace(ns); err != nil {
			t.Errorf("CheckNamespace(%q): %v", ns, err)
		}
	}
	for _, ns := range []string{"", "a{", "a b", "a/b", strings.Repeat("n", 101)} {
		if err := journal.CheckNamespace(ns); !errors.Is(err, journal.ErrInvalid) {
			t.Errorf("CheckNamespace(%q) = %v, want ErrInvalid", ns, err)
		}
	}
}

func TestEventValue(t *testing.T) {
	t.Parallel()
	// An Event is plain data: equal events compare equal with DeepEqual.
	a := journal.Event{RunSeq: 1, Kind: "k", Extra: map[string]json.RawMessage{"x": json.RawMessage(`1`)}}
	raw, _ := a.JSON()
	var b journal.Event
	_ = json.Unmarshal(raw, &b)
	b.At = a.At
	if !reflect.DeepEqual(a, b) {
		t.Errorf("%+v != %+v", a, b)
	}
}

func ExampleEvent_JSON() {
	e, _ := journal.NewEvent(runevent.RunError, map[string]any{
		"code": "write_not_allowed", "message": "a write needs --allow-write step:reserve",
		"stop_key": "step:reserve:0", "stop_token": "step:reserve",
	})
	e.RunSeq = 9
	e.At = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	raw, _ := e.JSON()
	fmt.Println(string(raw))
	// Output:
	// {"at":"2025-01-02T03:04:05.000000Z","code":"write_not_allowed","kind":"run:error","message":"a write needs --allow-write step:reserve","run_seq":9,"stop_key":"step:reserve:0","stop_token":"step:reserve"}
}
