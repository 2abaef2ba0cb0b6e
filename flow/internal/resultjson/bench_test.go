package resultjson_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/pyrula/caseworker/flow/internal/resultjson"
)

// order is the shape of a typical step result.
type order struct {
	ID     int      `json:"id"`
	Status string   `json:"status"`
	Total  float64  `json:"total"`
	Items  []string `json:"items"`
	Ship   *struct {
		City string `json:"city"`
		Zip  string `json:"zip"`
	} `json:"ship"`
}

// BenchmarkDecode decodes one result with Decode and, as the anchor in
// the same run, with encoding/json, alternating; x-encoding-json is how
// many times faster Decode is.
//
//	go test -run '^$' -bench Decode ./flow/internal/resultjson/
func BenchmarkDecode(b *testing.B) {
	raw := []byte(`{"id":4242,"items":["a","b","c"],"ship":{"city":"Lyon","zip":"69001"},"status":"shipped","total":4242.5}`)
	var fast, std time.Duration
	b.ReportAllocs()
	for range b.N {
		t0 := time.Now()
		var v order
		if !resultjson.Decode(raw, &v) {
			b.Fatal("Decode left a plain result to encoding/json")
		}
		t1 := time.Now()
		var w order
		if err := json.Unmarshal(raw, &w); err != nil {
			b.Fatal(err)
		}
		fast, std = fast+t1.Sub(t0), std+time.Since(t1)
	}
	b.ReportMetric(float64(fast.Nanoseconds())/float64(b.N), "ns/decode")
	b.ReportMetric(float64(std.Nanoseconds())/float64(b.N), "ns/decode-encoding-json")
	b.ReportMetric(float64(std)/float64(fast), "x-encoding-json")
}
