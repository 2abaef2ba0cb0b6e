package flow_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pyrula/caseworker/canonjson"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
)

func TestFingerprintGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		input     any
		canonical string
		want      string // from Python: sha256(json.dumps(x, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
	}{
		{"now and random input", struct{}{}, `{}`, "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"},
		{"null", nil, `null`, "74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b"},
		{"sleep input of 300s", map[string]any{"seconds": 300}, `{"seconds":300}`, "a7a8d755648711717ad13caf6c5a400db6c30758a37d3436b20034357f452101"},
		{"lookup_order tool input", json.RawMessage(`{ "order_id" : "ord_7Q2K" }`), `{"order_id":"ord_7Q2K"}`, "39d2784dcc4fb23b2d8e85260637ae4857300420a1881b494482f78be3ff7ffd"},
		{"unicode and key order", map[string]any{"z": "Jürgen — <b>", "a": 1.5}, `{"a":1.5,"z":"Jürgen — <b>"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			canon, fp, err := host.Fingerprint(tt.input)
			if err != nil {
				t.Fatal(err)
			}
			if string(canon) != tt.canonical {
				t.Errorf("canonical %s, want %s", canon, tt.canonical)
			}
			sum := sha256.Sum256([]byte(tt.canonical))
			if want := hex.EncodeToString(sum[:]); fp != want {
				t.Errorf("fingerprint %s, want sha256 of canonical JSON %s", fp, want)
			}
			if tt.want != "" && fp != tt.want {
				t.Errorf("fingerprint %s, want %s", fp, tt.want)
			}
			again, err := canonjson.Canonicalize(canon)
			if err != nil || string(again) != string(canon) {
				t.Errorf("canonical input is not a fixed point: %s", again)
			}
		})
	}
	if _, _, err := host.Fingerprint(json.RawMessage(`{"a":1,"a":2}`)); err == nil {
		t.Error("duplicate keys: want an error")
	}
}

// TestFingerprintAroundSharedSize checks inputs whose canonical JSON is
// kept in one allocation with its fingerprint and inputs too large for it:
// each fingerprint is the SHA-256 of its input, and appending to the input
// returned (as a caller may) changes neither.
func TestFingerprintAroundSharedSize(t *testing.T) {
	t.Parallel()
	// {"s":"…"} is n+8 bytes: 1016 is the largest n kept with its
	// fingerprint.
	for _, n := range []int{0, 1, 1000, 1015, 1016, 1017, 1018, 4096} {
		input := map[string]string{"s": strings.Repeat("x", n)}
		canon, fp, err := host.Fingerprint(input)
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"s":"` + strings.Repeat("x", n) + `"}`; string(canon) != want {
			t.Fatalf("%d: canonical input of %d bytes, want %d", n, len(canon), len(want))
		}
		sum := sha256.Sum256(canon)
		want := hex.EncodeToString(sum[:])
		if fp != want {
			t.Fatalf("%d: fingerprint %s, want %s", n, fp, want)
		}
		_ = append(canon, "yyyyyyyy"...) // a caller's append: it must not reach the fingerprint's bytes
		if fp != want {
			t.Fatalf("%d: appending to the input changed its fingerprint to %s", n, fp)
		}
	}
}

func TestCallErrorTypes(t *testing.T) {
	t.Parallel()
	ce := flow.Errorf("CouponExpired", "coupon %s expired", "SPRING")
	if ce.Error() != "CouponExpired: coupon SPRING expired" {
		t.Errorf("Error() = %q", ce.Error())
	}
	stop := &host.StopError{Code: messages.ReplayInputChanged, Message: "x"}
	if code, ok := messages.CodeOf(stop); !ok || code != messages.ReplayInputChanged {
		t.Errorf("CodeOf(StopError) = %v, %v", code, ok)
	}
	var me *messages.Error
	if !errors.As(stop, &me) {
		t.Error("StopError does not unwrap to *messages.Error")
	}
}

func TestEventJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 3, 14, 9, 26, 53, 37_000_000, time.UTC)
	call := &host.CallRef{Kind: host.KindSleep, Key: "0", Fingerprint: "ab", Effect: flow.Pure}
	tests := []struct {
		ev   host.Event
		want string
	}{
		{host.Event{RunSeq: 2, Kind: runevent.RunStart, At: at, Inputs: json.RawMessage(`{"sku":"SKU-42"}`), CodeVersion: "v1"},
			`{"at":"2025-03-14T09:26:53.037000Z","code_version":"v1","inputs":{"sku":"SKU-42"},"kind":"run:start","run_seq":2}`},
		{host.Event{RunSeq: 3, Kind: runevent.CallStart, At: at, Call: call, Input: json.RawMessage(`{"seconds":300}`), WakeAt: at.Add(300 * time.Second)},
			`{"at":"2025-03-14T09:26:53.037000Z","call":{"effect":"pure","fingerprint":"ab","key":"0","kind":"sleep"},"input":{"seconds":300},"kind":"call:start","run_seq":3,"wake_at":"2025-03-14T09:31:53.037Z"}`},
		{host.Event{RunSeq: 4, Kind: runevent.CallDone, At: at, Call: call, Provenance: "reused"},
			`{"at":"2025-03-14T09:26:53.037000Z","call":{"effect":"pure","fingerprint":"ab","key":"0","kind":"sleep"},"kind":"call:done","provenance":"reused","run_seq":4}`},
		{host.Event{RunSeq: 5, Kind: runevent.RunComplete, At: at, Result: json.RawMessage(`null`)},
			`{"at":"2025-03-14T09:26:53.037000Z","kind":"run:complete","result":null,"run_seq":5}`},
		{host.Event{RunSeq: 5, Kind: runevent.RunError, At: at, Code: messages.RuntimeError, Message: "boom"},
			`{"at":"2025-03-14T09:26:53.037000Z","code":"runtime_error","kind":"run:error","message":"boom","run_seq":5,"stop_key":null,"stop_token":null}`},
		{host.Event{RunSeq: 5, Kind: runevent.RunError, At: at, Code: messages.WriteNotAllowed, Message: "m", StopKey: "tool:toolu_01", StopToken: "tool:refund"},
			`{"at":"2025-03-14T09:26:53.037000Z","code":"write_not_allowed","kind":"run:error","message":"m","run_seq":5,"stop_key":"tool:toolu_01","stop_token":"tool:refund"}`},
		{host.Event{Kind: runevent.RunCancelled, At: at},
			`{"at":"2025-03-14T09:26:53.037000Z","kind":"run:cancelled"}`},
		{host.Event{RunSeq: 1, Kind: runevent.RunSubmitted, At: at, Extra: map[string]json.RawMessage{"run_id": json.RawMessage(`"run_abc"`)}},
			`{"at":"2025-03-14T09:26:53.037000Z","kind":"run:submitted","run_id":"run_abc","run_seq":1}`},
	}
	for _, tt := range tests {
		raw, err := json.Marshal(tt.ev)
		if err != nil {
			t.Fatal(err)
		}
		if string(raw) != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.ev.Kind, raw, tt.want)
		}
		var back host.Event
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatal(err)
		}
		if !back.At.Equal(tt.ev.At) || !back.WakeAt.Equal(tt.ev.WakeAt) {
			t.Errorf("%s: times changed in a round trip", tt.ev.Kind)
		}
		back.At, back.WakeAt = tt.ev.At, tt.ev.WakeAt
		if !reflect.DeepEqual(back, tt.ev) {
			t.Errorf("%s: round trip\n got %+v\nwant %+v", tt.ev.Kind, back, tt.ev)
		}
	}
}

func TestValidateAnswer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind host.CallKind
		ans  string
		ok   bool
	}{
		{host.KindModel, `"hello"`, true},
		{host.KindModel, `{"role":"assistant","content":[{"type":"text","text":"hi"}]}`, true},
		{host.KindModel, `{"role":"user","content":[]}`, false},
		{host.KindModel, `{"role":"assistant"}`, false},
		{host.KindModel, `42`, false},
		{host.KindSignal, `{"payload":null}`, true},
		{host.KindSignal, `{"value":1}`, false},
		{host.KindSignal, `"x"`, false},
		{host.KindInterrupt, `{"action":"approve","value":true}`, true},
		{host.KindInterrupt, `{"action":"approve"}`, false},
		{host.KindInterrupt, `{"value":1}`, false},
		{host.KindNow, `"2026-11-30T10:00:02Z"`, true},
		{host.KindNow, `"yesterday"`, false},
		{host.KindRandom, `0.5`, true},
		{host.KindRandom, `null`, false},
		{host.KindStep, `{"anything":[1,2]}`, true},
		{host.KindStep, `{not json`, false},
	}
	for _, tt := range tests {
		err := host.ValidateAnswer(tt.kind, json.RawMessage(tt.ans))
		if (err == nil) != tt.ok {
			t.Errorf("ValidateAnswer(%s, %s) = %v, want ok=%v", tt.kind, tt.ans, err, tt.ok)
		}
	}
}
