package runevent_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pyrula/caseworker/canonjson"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
)

func raw(s string) json.RawMessage { return json.RawMessage(s) }

// TestAppendJSON pins the bytes of every kind: they are what journals
// store and bundles' histories hold.
func TestAppendJSON(t *testing.T) {
	at := time.Date(2025, 3, 14, 10, 26, 53, 37_000_999, time.FixedZone("CET", 3600))
	call := &runevent.Call{Kind: "sleep", Key: "0", Fingerprint: "ab", Effect: runevent.EffectPure}
	for _, tc := range []struct {
		ev   runevent.Event
		want string
	}{
		{runevent.Event{RunSeq: 2, Kind: runevent.RunStart, At: at, Inputs: raw(`{"sku":"SKU-42"}`), CodeVersion: "v1"},
			`{"at":"2025-03-14T09:26:53.037000Z","code_version":"v1","inputs":{"sku":"SKU-42"},"kind":"run:start","run_seq":2}`},
		{runevent.Event{RunSeq: 2, Kind: runevent.RunStart, At: at},
			`{"at":"2025-03-14T09:26:53.037000Z","code_version":"","inputs":null,"kind":"run:start","run_seq":2}`},
		{runevent.Event{RunSeq: 3, Kind: runevent.CallStart, At: at, Call: call, Input: raw(`{"seconds":300}`), WakeAt: at.Add(300 * time.Second)},
			`{"at":"2025-03-14T09:26:53.037000Z","call":{"effect":"pure","fingerprint":"ab","key":"0","kind":"sleep"},"input":{"seconds":300},"kind":"call:start","run_seq":3,"wake_at":"2025-03-14T09:31:53.037000999Z"}`},
		{runevent.Event{RunSeq: 3, Kind: runevent.CallStart, At: at, Tool: "refund", Provenance: "not of the kind", Result: raw(`1`)},
			`{"at":"2025-03-14T09:26:53.037000Z","call":null,"input":null,"kind":"call:start","run_seq":3,"tool":"refund"}`},
		{runevent.Event{RunSeq: 4, Kind: runevent.CallDone, At: at, Call: call, Provenance: "reused"},
			`{"at":"2025-03-14T09:26:53.037000Z","call":{"effect":"pure","fingerprint":"ab","key":"0","kind":"sleep"},"kind":"call:done","provenance":"reused","run_seq":4}`},
		{runevent.Event{RunSeq: 5, Kind: runevent.RunComplete, At: at, Result: raw(`null`)},
			`{"at":"2025-03-14T09:26:53.037000Z","kind":"run:complete","result":null,"run_seq":5}`},
		{runevent.Event{RunSeq: 5, Kind: runevent.RunComplete, At: at, Result: raw(` {"b": 1.0, "a": "\u003c"} `)},
			`{"at":"2025-03-14T09:26:53.037000Z","kind":"run:complete","result":{"a":"<","b":1.0},"run_seq":5}`},
		{runevent.Event{RunSeq: 5, Kind: runevent.RunError, At: at, Code: messages.RuntimeError, Message: "boom <&>\u2028"},
			`{"at":"2025-03-14T09:26:53.037000Z","code":"runtime_error","kind":"run:error","message":"boom <&>` + "\u2028" + `","run_seq":5,"stop_key":null,"stop_token":null}`},
		{runevent.Event{RunSeq: 5, Kind: runevent.RunError, At: at, Code: messages.WriteNotAllowed, Message: "m", StopKey: "tool:toolu_01", StopToken: "tool:refund",
			Extra: map[string]json.RawMessage{"reason": raw(`"x"`), "stop_key": raw(`"dropped: the field is set"`)}},
			`{"at":"2025-03-14T09:26:53.037000Z","code":"write_not_allowed","kind":"run:error","message":"m","reason":"x","run_seq":5,"stop_key":"tool:toolu_01","stop_token":"tool:refund"}`},
		{runevent.Event{Kind: runevent.RunCancelled, At: at, Message: "not of the kind"},
			`{"at":"2025-03-14T09:26:53.037000Z","kind":"run:cancelled"}`},
		{runevent.Event{RunSeq: 1, Kind: runevent.RunSubmitted, At: at, Extra: map[string]json.RawMessage{"run_id": raw(`"run_abc"`), "zz": nil, "a\u00e9": raw(`[ 1e3 ]`)}},
			`{"at":"2025-03-14T09:26:53.037000Z","a` + "\u00e9" + `":[1000.0],"kind":"run:submitted","run_id":"run_abc","run_seq":1,"zz":null}`},
		{runevent.Event{RunSeq: 1, Kind: "x:y", Extra: map[string]json.RawMessage{"call": raw(`{"kind":"step"}`), "provenance": raw(`5`)}},
			`{"at":"0001-01-01T00:00:00.000000Z","call":{"kind":"step"},"kind":"x:y","provenance":5,"run_seq":1}`},
		{runevent.Event{RunSeq: 7, Kind: runevent.CallDone, At: at, Call: &runevent.Call{Kind: "k\xff", Key: "a\xfe\xfdb"}},
			`{"at":"2025-03-14T09:26:53.037000Z","call":{"effect":"","fingerprint":"","key":"a` + "\ufffd\ufffd" + `b","kind":"k` + "\ufffd" + `"},"kind":"call:done","run_seq":7}`},
		{runevent.Event{RunSeq: 7, Kind: runevent.CallDone, At: at, Extra: map[string]json.RawMessage{"provenance": raw(`"from Extra"`)}},
			`{"at":"2025-03-14T09:26:53.037000Z","call":null,"kind":"call:done","provenance":"from Extra","run_seq":7}`},
	} {
		got, err := tc.ev.AppendJSON([]byte("x"))
		if err != nil || string(got) != "x"+tc.want {
			t.Errorf("%s: AppendJSON\n got %s (%v)\nwant x%s", tc.ev.Kind, got, err, tc.want)
			continue
		}
		if c, err := canonjson.Canonicalize(got[1:]); err != nil || !bytes.Equal(c, got[1:]) {
			t.Errorf("%s: %s is not canonical (%v)", tc.ev.Kind, got[1:], err)
		}
		if m, err := json.Marshal(tc.ev); err != nil || !strings.Contains(tc.want, "<") && string(m) != tc.want {
			t.Errorf("%s: json.Marshal %s, %v", tc.ev.Kind, m, err)
		}
		back, err := runevent.Decode(got[1:])
		if err != nil {
			t.Errorf("%s: Decode: %v", tc.ev.Kind, err)
			continue
		}
		if again, err := back.JSON(); err != nil || string(again) != tc.want {
			t.Errorf("%s: JSON of the decoded event %s (%v)", tc.ev.Kind, again, err)
		}
		head, tail, err := tc.ev.SplitJSON()
		if err != nil {
			t.Fatal(err)
		}
		if seq := tc.ev.RunSeq; seq > 0 {
			if joined := string(head) + jsonInt(seq) + string(tail); joined != tc.want {
				t.Errorf("%s: SplitJSON joins to %s", tc.ev.Kind, joined)
			}
		}
	}
}

// TestSplitJSON: the pieces join to the event with any run_seq, wherever
// run_seq sorts among the members.
func TestSplitJSON(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, extra := range []map[string]json.RawMessage{
		nil,
		{"zzz": raw(`1`)}, // sorts after run_seq
		{"a": raw(`1`), "stop_key": raw(`null`)},
		{"run_se": raw(`1`), "run_seqq": raw(`2`)},
	} {
		ev := runevent.Event{Kind: "k:x", At: at, Extra: extra}
		head, tail, err := ev.SplitJSON()
		if err != nil {
			t.Fatal(err)
		}
		out, cut, err := ev.AppendSplitJSON([]byte("before"))
		if err != nil || string(out[:6]) != "before" || string(out[6:cut]) != string(head) || string(out[cut:]) != string(tail) {
			t.Errorf("AppendSplitJSON after 6 bytes = %q cut at %d (%v), want before + %s | %s", out, cut, err, head, tail)
		}
		for _, seq := range []int64{1, 42, 1 << 62} {
			ev.RunSeq = seq
			want, err := ev.JSON()
			if err != nil {
				t.Fatal(err)
			}
			got := string(head) + jsonInt(seq) + string(tail)
			if got != string(want) {
				t.Errorf("split %s | %s joins to %s, want %s", head, tail, got, want)
			}
		}
	}
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestInvalid: what has no JSON form is refused, and what is not an event
// object does not decode.
func TestInvalid(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for name, e := range map[string]runevent.Event{
		"no kind":         {At: at},
		"reserved name":   {Kind: "k", Extra: map[string]json.RawMessage{"run_seq": raw(`1`)}},
		"reserved at":     {Kind: "k", Extra: map[string]json.RawMessage{"at": raw(`1`)}},
		"invalid value":   {Kind: "k", Extra: map[string]json.RawMessage{"a": raw(`nope`)}},
		"two values":      {Kind: "k", Extra: map[string]json.RawMessage{"a": raw(`1 2`)}},
		"duplicate keys":  {Kind: "k", Extra: map[string]json.RawMessage{"a": raw(`{"a":1,"a":1}`)}},
		"lone surrogate":  {Kind: "k", Extra: map[string]json.RawMessage{"a": raw(`"\ud800"`)}},
		"bad UTF-8 kind":  {Kind: "k\xff"},
		"bad UTF-8 name":  {Kind: "k", Extra: map[string]json.RawMessage{"a\xff": raw(`1`)}},
		"invalid input":   {Kind: runevent.CallStart, Input: raw(`{"a":`)},
		"invalid result":  {Kind: runevent.RunComplete, Result: raw(`NaN`)},
		"year 10000":      {Kind: "k", At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		"wake_at year 0":  {Kind: runevent.CallStart, WakeAt: time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)},
		"invalid in kind": {Kind: runevent.RunStart, Extra: map[string]json.RawMessage{"inputs": raw(`[`)}},
	} {
		if _, err := e.JSON(); !errors.Is(err, runevent.ErrInvalid) {
			t.Errorf("%s: JSON error %v, want ErrInvalid", name, err)
		}
		if _, _, err := e.SplitJSON(); !errors.Is(err, runevent.ErrInvalid) {
			t.Errorf("%s: SplitJSON error %v, want ErrInvalid", name, err)
		}
		if _, err := e.RoundTrip(); !errors.Is(err, runevent.ErrInvalid) {
			t.Errorf("%s: RoundTrip error %v, want ErrInvalid", name, err)
		}
		if got, _, err := e.AppendSplitJSON([]byte("keep")); string(got) != "keep" || err == nil {
			t.Errorf("%s: AppendSplitJSON changed dst to %q", name, got)
		}
		if got, err := e.AppendJSON([]byte("keep")); string(got) != "keep" || err == nil {
			t.Errorf("%s: AppendJSON changed dst to %q", name, got)
		}
	}
	for _, text := range []string{
		``, `{}`, `[]`, `null`, `{"kind":"k"}`, `{"at":"2025-01-01T00:00:00Z"}`,
		`{"run_seq":0,"kind":"k","at":"2025-01-01T00:00:00Z"}`,
		`{"run_seq":1.5,"kind":"k","at":"2025-01-01T00:00:00Z"}`,
		`{"run_seq":"1","kind":"k","at":"2025-01-01T00:00:00Z"}`,
		`{"run_seq":1,"kind":"","at":"2025-01-01T00:00:00Z"}`,
		`{"run_seq":1,"kind":"k","at":"yesterday"}`,
		`{"run_seq":1,"kind":"k","at":"2025-01-01T00:00:00Z","a":1,"a":2}`,
		`{"run_seq":1,"kind":"k","at":"2025-01-01T00:00:00Z"} {}`,
		`{"run_seq":1,"kind":"k","at":"2025-01-01T00:00:00Z","a":"\ud800"}`,
	} {
		if e, err := runevent.Decode([]byte(text)); !errors.Is(err, runevent.ErrInvalid) {
			t.Errorf("Decode(%s) = %+v, %v; want ErrInvalid", text, e, err)
		}
		var e runevent.Event
		if err := json.Unmarshal([]byte(text), &e); err == nil {
			t.Errorf("Unmarshal(%s) accepted it", text)
		}
	}
}

// TestDecodeExact: whatever event object is decoded, its JSON is the
// canonical form of the text, byte for byte: members the fields cannot
// hold exactly stay in Extra, members the text lacks stay out.
func TestDecodeExact(t *testing.T) {
	const at = `"at":"2025-01-02T03:04:05.000006Z"`
	for _, tc := range []struct {
		text  string
		check func(e runevent.Event) bool
	}{
		{`{` + at + `,"kind":"run:complete","run_seq":4}`,
			func(e runevent.Event) bool { return e.Result == nil && e.Lacks("result") && e.Extra == nil }},
		{`{` + at + `,"kind":"run:complete","output":{"ok":true},"run_seq":4}`,
			func(e runevent.Event) bool { return e.Lacks("result") && string(e.Extra["output"]) == `{"ok":true}` }},
		{`{` + at + `,"kind":"run:complete","result":null,"run_seq":4}`,
			func(e runevent.Event) bool { return string(e.Result) == "null" && !e.Lacks("result") }},
		{`{` + at + `,"kind":"run:start","run_seq":2}`,
			func(e runevent.Event) bool { return e.Lacks("inputs") && e.Lacks("code_version") && !e.Lacks("result") }},
		{`{` + at + `,"code_version":5,"inputs":null,"kind":"run:start","run_seq":2}`,
			func(e runevent.Event) bool {
				return e.Inputs == nil && string(e.Extra["code_version"]) == "5" && !e.Lacks("code_version")
			}},
		{`{` + at + `,"call":{"kind":"step","key":"a:0"},"input":{"n":1},"kind":"call:start","run_seq":3}`,
			func(e runevent.Event) bool {
				return e.Call == nil && e.Extra["call"] != nil && string(e.Input) == `{"n":1}`
			}},
		{`{` + at + `,"call":{"effect":"read","extra":1,"fingerprint":"f","key":"a:0","kind":"step"},"input":null,"kind":"call:start","run_seq":3}`,
			func(e runevent.Event) bool { return e.Call == nil && e.Extra["call"] != nil && e.Input == nil }},
		{`{` + at + `,"call":{"effect":"read","fingerprint":7,"key":"a:0","kind":"step"},"kind":"call:done","run_seq":3}`,
			func(e runevent.Event) bool { return e.Call == nil && e.Extra["call"] != nil }},
		{`{` + at + `,"call":{"effect":"read","fingerprint":"f","key":"a:0","kind":"step"},"input":1,"kind":"call:start","run_seq":3,"tool":"","wake_at":"2025-01-02T03:04:05+01:00"}`,
			func(e runevent.Event) bool {
				return e.Call != nil && e.Call.ID() == "step:a:0" && e.Tool == "" && e.WakeAt.IsZero() && len(e.Extra) == 2
			}},
		{`{` + at + `,"call":null,"input":null,"kind":"call:start","run_seq":3,"tool":"t","wake_at":"2025-01-02T03:04:05.5Z"}`,
			func(e runevent.Event) bool {
				return e.Call == nil && e.Tool == "t" && e.WakeAt.Nanosecond() == 5e8 && e.Extra == nil
			}},
		{`{` + at + `,"call":null,"kind":"call:done","provenance":"","run_seq":3}`,
			func(e runevent.Event) bool { return e.Provenance == "" && string(e.Extra["provenance"]) == `""` }},
		{`{` + at + `,"code":"runtime_error","kind":"run:error","message":"m","run_seq":9,"stop_key":"","stop_token":null}`,
			func(e runevent.Event) bool {
				return e.Code == messages.RuntimeError && e.StopKey == "" && string(e.Extra["stop_key"]) == `""` && !e.Lacks("stop_token")
			}},
		{`{` + at + `,"kind":"run:error","run_seq":9,"stop_key":"step:a:0"}`,
			func(e runevent.Event) bool { return e.Lacks("code") && e.Lacks("message") && e.StopKey == "step:a:0" }},
		{`{` + at + `,"call":{"effect":"read","fingerprint":"f","key":"a:0","kind":"step"},"kind":"case:call","provenance":"reused","run_seq":5,"seq":1}`,
			func(e runevent.Event) bool {
				return e.Call != nil && e.Call.Key == "a:0" && e.Provenance == "reused" && e.CallSeq == 1 && len(e.Extra) == 0
			}},
		// A case:call member its field cannot hold exactly stays in Extra.
		{`{` + at + `,"call":{"effect":"read","key":"a:0","kind":"step"},"kind":"case:call","provenance":"","result":{"a":1},"run_seq":5,"seq":1.5}`,
			func(e runevent.Event) bool {
				return e.Call == nil && e.Provenance == "" && e.CallSeq == 0 && len(e.Extra) == 4 && string(e.Extra["seq"]) == "1.5"
			}},
		{`{` + at + `,"kind":"case:call","run_seq":5,"seq":0}`,
			func(e runevent.Event) bool { return e.CallSeq == 0 && len(e.Extra) == 0 && e.Lacks("call") }},
		// Not canonical text: read with the full decoder.
		{` { "run_seq" : 3, "kind":"call:start", "at":"2025-01-02T04:04:05.000006+01:00", "input": {"b":1, "a":[1.0]},
		   "call": {"kind":"st\u0065p","key":"a:0","fingerprint":"f","effect":"read"}, "x\u00e9": "<\u2028>" }`,
			func(e runevent.Event) bool {
				return e.Call != nil && e.Call.Kind == "step" && e.At.Location() == time.UTC && string(e.Extra["xé"]) == `"<\u2028>"`
			}},
		{`{"run_seq":3,"kind":"k","at":"2025-01-02T03:04:05.000006Z","\u0061":1}`,
			func(e runevent.Event) bool { return string(e.Extra["a"]) == "1" }},
		// An unappended event: no run_seq.
		{`{` + at + `,"kind":"run:cancelled"}`,
			func(e runevent.Event) bool { return e.RunSeq == 0 && e.Extra == nil }},
	} {
		e, err := runevent.Decode([]byte(tc.text))
		if err != nil {
			t.Errorf("Decode(%s): %v", tc.text, err)
			continue
		}
		if !tc.check(e) {
			t.Errorf("Decode(%s) = %+v", tc.text, e)
		}
		want, err := canonjson.Canonicalize([]byte(tc.text))
		if err != nil {
			t.Fatal(err)
		}
		// at is written in TimeLayout.
		want = bytes.Replace(want, []byte(`"at":"2025-01-02T04:04:05.000006+01:00"`), []byte(`"at":"2025-01-02T03:04:05.000006Z"`), 1)
		if got, err := e.JSON(); err != nil || !bytes.Equal(got, want) {
			t.Errorf("JSON of Decode(%s)\n got %s (%v)\nwant %s", tc.text, got, err, want)
		}
		var u runevent.Event
		if err := json.Unmarshal([]byte(tc.text), &u); err != nil || !reflect.DeepEqual(u, e) {
			t.Errorf("Unmarshal(%s) = %+v, %v; Decode gives %+v", tc.text, u, err, e)
		}
		rt, err := e.RoundTrip()
		if err != nil || !reflect.DeepEqual(rt, decodeJSON(t, e)) {
			t.Errorf("RoundTrip of Decode(%s) = %+v, %v", tc.text, rt, err)
		}
	}
}

// decodeJSON is Decode of AppendJSON of e.
func decodeJSON(t *testing.T, e runevent.Event) runevent.Event {
	t.Helper()
	raw, err := e.JSON()
	if err != nil {
		t.Fatalf("JSON of %+v: %v", e, err)
	}
	back, err := runevent.Decode(raw)
	if err != nil {
		t.Fatalf("Decode(%s): %v", raw, err)
	}
	return back
}

// TestFromMembers: an event built from named members writes exactly them.
func TestFromMembers(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	e, err := runevent.FromMembers(runevent.RunComplete, map[string]json.RawMessage{"output": raw(`{"ok": true}`)})
	if err != nil {
		t.Fatal(err)
	}
	e.RunSeq, e.At = 4, at
	if got, _ := e.JSON(); string(got) != `{"at":"2025-01-02T03:04:05.000000Z","kind":"run:complete","output":{"ok":true},"run_seq":4}` {
		t.Errorf("JSON %s", got)
	}
	e, err = runevent.FromMembers(runevent.CallStart, map[string]json.RawMessage{
		"call": raw(`{"kind":"tool","key":"toolu_01","fingerprint":"ab","effect":"write"}`), "input": raw(`{"q":"<a&b>","n":1.5}`), "nil": nil})
	if err != nil {
		t.Fatal(err)
	}
	if e.Call == nil || e.Call.ID() != "tool:toolu_01" || e.Call.Effect != runevent.EffectWrite || string(e.Input) != `{"q":"<a&b>","n":1.5}` {
		t.Errorf("FromMembers: %+v", e)
	}
	var in struct{ Q string }
	if ok, err := e.Field("input", &in); !ok || err != nil || in.Q != "<a&b>" {
		t.Errorf("Field(input) = %v, %v, %+v", ok, err, in)
	}
	var c runevent.Call
	if ok, err := e.Field("call", &c); !ok || err != nil || c != *e.Call {
		t.Errorf("Field(call) = %v, %v, %+v", ok, err, c)
	}
	var null *int
	if ok, err := e.Field("nil", &null); !ok || err != nil {
		t.Errorf("Field(nil) = %v, %v", ok, err)
	}
	if ok, err := e.Field("missing", &in); ok || err != nil {
		t.Errorf("Field(missing) = %v, %v", ok, err)
	}
	if ok, _ := e.Field("kind", new(string)); ok {
		t.Error("Field(kind) found the event's own member")
	}
	var token *string
	if ok, err := (runevent.Event{Kind: runevent.RunError}).Field("stop_token", &token); !ok || err != nil || token != nil {
		t.Errorf("Field(stop_token) of a run:error = %v, %v, %v", ok, err, token)
	}
	if ok, _ := (runevent.Event{Kind: runevent.CallDone}).Field("provenance", new(string)); ok {
		t.Error("Field(provenance) found a member that is not written")
	}
	for _, name := range []string{"run_seq", "kind", "at", "bad\xff"} {
		if _, err := runevent.FromMembers("k", map[string]json.RawMessage{name: raw(`1`)}); !errors.Is(err, runevent.ErrInvalid) {
			t.Errorf("FromMembers with %q: %v", name, err)
		}
	}
	if e, err := runevent.FromMembers(runevent.RunStart, map[string]json.RawMessage{"inputs": raw(`{"a":`)}); err != nil {
		t.Fatal(err)
	} else if _, err := e.JSON(); !errors.Is(err, runevent.ErrInvalid) {
		t.Errorf("an invalid member encodes: %v", err)
	}
}

// TestEffect pins the effects' spelling.
func TestEffect(t *testing.T) {
	for _, e := range []runevent.Effect{runevent.EffectRead, runevent.EffectWrite, runevent.EffectPure} {
		if !e.Valid() {
			t.Errorf("%s is not valid", e)
		}
	}
	if runevent.Effect("delete").Valid() || runevent.Effect("").Valid() {
		t.Error("an unknown effect is valid")
	}
	if got := (runevent.Call{Kind: "tool", Key: "toolu_01"}).ID(); got != "tool:toolu_01" {
		t.Errorf("ID = %s", got)
	}
}
