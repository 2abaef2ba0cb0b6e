package runevent_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/pyrula/caseworker/runevent"
)

// benchEvents are the events a case run appends per call: call:start,
// call:done and its case:call line.
func benchEvents() []runevent.Event {
	at := time.Now()
	fp := fmt.Sprintf("%064x", 7)
	ref := &runevent.Call{Kind: "step", Key: "fetch:1234", Fingerprint: fp, Effect: runevent.EffectRead}
	return []runevent.Event{
		{RunSeq: 5, Kind: runevent.CallStart, At: at, Call: ref, Input: json.RawMessage(`{"id":12345,"sku":"SKU-42"}`)},
		{RunSeq: 6, Kind: runevent.CallDone, At: at, Call: ref, Provenance: "reused"},
		{RunSeq: 7, Kind: runevent.CaseCall, At: at, Extra: map[string]json.RawMessage{"seq": json.RawMessage(`1234`), "provenance": json.RawMessage(`"reused"`),
			"call": json.RawMessage(`{"effect":"read","fingerprint":"` + fp + `","key":"fetch:1234","kind":"step"}`)}},
	}
}

// BenchmarkRoundTrip: what MemLog does to each event it appends.
func BenchmarkRoundTrip(b *testing.B) {
	for _, ev := range benchEvents() {
		b.Run(string(ev.Kind), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ev.RoundTrip(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAppendJSON: what a journal does to each event it appends.
func BenchmarkAppendJSON(b *testing.B) {
	for _, ev := range benchEvents() {
		b.Run(string(ev.Kind), func(b *testing.B) {
			b.ReportAllocs()
			var buf []byte
			for b.Loop() {
				var err error
				if buf, err = ev.AppendJSON(buf[:0]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecode: what a journal does to each event it reads.
func BenchmarkDecode(b *testing.B) {
	for _, ev := range benchEvents() {
		raw, _ := ev.JSON()
		b.Run(string(ev.Kind), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := runevent.Decode(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
