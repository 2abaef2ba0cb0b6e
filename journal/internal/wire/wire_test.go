package wire

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/bundle/canonjson"
	"github.com/pyrula/caseworker/runevent"
)

func TestSplitJoin(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, fields := range []map[string]json.RawMessage{
		nil,
		{"zzz": json.RawMessage(`1`)}, // sorts after run_seq
		{"a": json.RawMessage(`1`), "stop_key": json.RawMessage(`null`)}, // on both sides
		{"run_se": json.RawMessage(`1`), "run_seqq": json.RawMessage(`2`)},
	} {
		head, tail, err := SplitEvent("k:x", at, fields)
		if err != nil {
			t.Fatal(err)
		}
		for _, seq := range []int64{1, 42, 1 << 40} {
			joined := JoinEvent(head, seq, tail)
			want, err := AppendEvent(nil, seq, "k:x", at, fields)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(joined, want) {
				t.Errorf("joined %s, want %s", joined, want)
			}
			if c, err := canonjson.Canonicalize(joined); err != nil || !bytes.Equal(c, joined) {
				t.Errorf("%s is not canonical (%v)", joined, err)
			}
		}
	}
}

func TestResultRecord(t *testing.T) {
	for _, r := range []bundle.Result{
		{Kind: "step", Key: "a:0", Fingerprint: "f", Result: json.RawMessage(`{"b":1,"a":[1.0]}`)},
		{Kind: "tool", Key: "toolu_\"01", Fingerprint: "", Error: json.RawMessage(`"boom"`)},
		{Kind: "now", Key: "0", Fingerprint: "f", Result: json.RawMessage(`null`)},
	} {
		rec, err := AppendResult(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		if c, err := canonjson.Canonicalize(rec); err != nil || !bytes.Equal(c, rec) {
			t.Errorf("record %s is not canonical (%v)", rec, err)
		}
		back, err := DecodeResult(rec)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := AppendResult(nil, back)
		if !bytes.Equal(again, rec) {
			t.Errorf("round trip %s → %s", rec, again)
		}
	}
}

// FuzzEvent: any event that encodes decodes to the same event, and encodes
// again to the same canonical bytes; decoding never panics.
func FuzzEvent(f *testing.F) {
	f.Add("call:start", "input", []byte(`{"b":[1,2.50,"\u2028"],"a":null}`), int64(3))
	f.Add("run:error", "stop_token", []byte(`null`), int64(1))
	f.Add("k", "émoji", []byte(`"✓<>&"`), int64(1<<62))
	f.Fuzz(func(t *testing.T, kind, name string, value []byte, seq int64) {
		if seq < 1 {
			seq = 1
		}
		at := time.Date(2025, 1, 2, 3, 4, 5, 6000, time.UTC)
		raw, err := AppendEvent(nil, seq, runevent.Kind(kind), at, map[string]json.RawMessage{name: value})
		if err != nil {
			return
		}
		gotSeq, gotKind, gotAt, fields, err := DecodeEvent(raw)
		if err != nil {
			t.Fatalf("DecodeEvent(%s): %v", raw, err)
		}
		if gotSeq != seq || gotKind != runevent.Kind(kind) || !gotAt.Equal(at) || len(fields) != 1 {
			t.Fatalf("decoded %d %q %v %v from %s", gotSeq, gotKind, gotAt, fields, raw)
		}
		again, err := AppendEvent(nil, gotSeq, gotKind, gotAt, fields)
		if err != nil || !bytes.Equal(again, raw) {
			t.Fatalf("re-encoded %s (%v), want %s", again, err, raw)
		}
		if c, err := canonjson.Canonicalize(raw); err != nil || !bytes.Equal(c, raw) {
			t.Fatalf("%s is not canonical (%v)", raw, err)
		}
		_, _, _, _, _ = DecodeEvent(value)
		_, _ = DecodeResult(value)
	})
}
