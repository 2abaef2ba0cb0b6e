package replay

import (
	"encoding/json"
	"reflect"
	"testing"
)

// callExtra must build exactly what lineExtra(line, true) builds.
func TestCallExtraMatchesLineExtra(t *testing.T) {
	lines := []CallLine{
		{Type: "call", Seq: 7, Kind: "step", Key: "fetch:7", Effect: "read", Fingerprint: "ab12", Provenance: ProvReused},
		{Type: "call", Seq: 0, Kind: "tool", Key: "<toolu_&1>", Effect: "write", Fingerprint: "", Provenance: ProvLive},
		{Type: "call", Seq: 12, Kind: "stream", Key: "feed \"q\"\\ \u2028 é\x01 \x7f:1", Effect: "read", Fingerprint: "bad\xffutf8", Provenance: ProvChanged},
		{Type: "call", Seq: 3, Kind: "model", Key: "model:3", Effect: "read", Fingerprint: "ff", Provenance: ProvReused,
			Result: json.RawMessage(`{"a": 1}`)},
	}
	for _, l := range lines {
		want, got := lineExtra(l, true), callExtra(l)
		if len(want) != len(got) {
			t.Fatalf("%+v: got %s, want %s", l, fmtExtra(got), fmtExtra(want))
		}
		for k, v := range want {
			if !reflect.DeepEqual([]byte(v), []byte(got[k])) {
				t.Fatalf("%+v: %s: got %s, want %s", l, k, got[k], v)
			}
		}
	}
}

func fmtExtra(m map[string]json.RawMessage) string {
	raw, _ := json.Marshal(m)
	return string(raw)
}
