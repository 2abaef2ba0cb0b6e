package replay

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/runevent"
)

// TestCallLineEventBytes: the typed case:call event of a line is stored
// as exactly the bytes of the event built from lineExtra(line, true), the
// form every line had before (and lines with values still have): odd
// characters, invalid UTF-8, seq 0, and lines with values included. It also
// checks that the typed form is taken where it can be.
func TestCallLineEventBytes(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 6000, time.UTC)
	lines := []CallLine{
		{Type: "call", Seq: 7, Kind: "step", Key: "fetch:7", Effect: "read", Fingerprint: "ab12", Provenance: ProvReused},
		{Type: "call", Seq: 0, Kind: "tool", Key: "<toolu_&1>", Effect: "write", Fingerprint: "", Provenance: ProvLive},
		{Type: "call", Seq: 12, Kind: "stream", Key: "feed \"q\"\\ \u2028 é\x01 \x7f:1", Effect: "read", Fingerprint: "bad\xffutf8", Provenance: ProvChanged},
		{Type: "call", Seq: 3, Kind: "model", Key: "model:3", Effect: "read", Fingerprint: "ff", Provenance: ProvReused,
			Result: json.RawMessage(`{"a": 1}`)},
		{Type: "call", Seq: 4, Kind: "step", Key: "s:4", Effect: "read", Fingerprint: "ff"},
	}
	for _, l := range lines {
		ev := callLineEvent(l, at, new(host.CallRef))
		if typed := l.Provenance != "" && l.Result == nil; typed != (ev.Extra == nil) {
			t.Errorf("%+v: typed form taken = %v, want %v", l, ev.Extra == nil, typed)
		}
		got, err := ev.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		want, err := host.Event{Kind: runevent.CaseCall, At: at, Extra: lineExtra(l, true)}.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%+v:\n got %s\nwant %s", l, got, want)
		}
	}
}
