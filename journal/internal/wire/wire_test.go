package wire

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/canonjson"
)

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

// FuzzResult: decoding a result record never panics, and a record that
// decodes encodes to canonical JSON that decodes and encodes again to the
// same bytes.
func FuzzResult(f *testing.F) {
	f.Add([]byte(`{"fingerprint":"f","key":"a:0","kind":"step","result":{"a":[1.0],"b":1}}`))
	f.Add([]byte(`{"error":"boom","fingerprint":"","key":"toolu_\"01","kind":"tool"}`))
	f.Add([]byte(` {"kind":"now","key":"0","fingerprint":"f","result":null} `))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeResult(data)
		if err != nil {
			return
		}
		rec, err := AppendResult(nil, r)
		if err != nil {
			return // a value canonical JSON refuses
		}
		if c, err := canonjson.Canonicalize(rec); err != nil || !bytes.Equal(c, rec) {
			t.Fatalf("record %s of DecodeResult(%s) is not canonical (%v)", rec, data, err)
		}
		back, err := DecodeResult(rec)
		if err != nil {
			t.Fatalf("DecodeResult(%s): %v", rec, err)
		}
		if again, err := AppendResult(nil, back); err != nil || !bytes.Equal(again, rec) {
			t.Fatalf("record %s encodes again to %s (%v)", rec, again, err)
		}
	})
}
