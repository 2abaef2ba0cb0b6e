package canonjson_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pyrula/caseworker/canonjson"
)

var (
	benchDocOnce sync.Once
	benchDoc     []byte
)

// bundleLikeDoc returns a deterministic bundle-like JSON document of about
// size bytes: a manifest, a history and many results with nested strings
// (some non-ASCII, some needing escapes), integers and doubles. It is
// written by encoding/json, so its keys are sorted but it is not canonical
// (HTML characters escaped as \u003c, doubles in Go's form, results unsorted).
func bundleLikeDoc(size int) []byte {
	rng := rand.New(rand.NewPCG(2024, 6))
	words := []string{
		"alpha", "beta", "gamma", "delta", "tool", "result", "value", "query", "answer",
		"héllo", "wörld", "naïve", "中文", "日本語", "😀", "a<b>&c", "line\nbreak", "tab\tsep",
		"quote\"d", "back\\slash", "\u2028sep", "del\x7f", "ctl\x01",
	}
	text := func(n int) string {
		var sb strings.Builder
		for i := 0; i < n; i++ {
			if i > 0 {
				sb.WriteByte(' ')
			}
			sb.WriteString(words[rng.IntN(len(words))])
		}
		return sb.String()
	}
	number := func() any {
		switch rng.IntN(5) {
		case 0:
			return rng.Int64N(1 << 40)
		case 1:
			return json.Number(fmt.Sprintf("%d%018d", 1+rng.Int64N(1e9-1), rng.Int64N(1e18)))
		case 2:
			return float64(rng.IntN(100000)) / 100
		case 3:
			for {
				f := math.Float64frombits(rng.Uint64())
				if !math.IsInf(f, 0) && !math.IsNaN(f) {
					return f
				}
			}
		default:
			return rng.NormFloat64() * 1e6
		}
	}
	type result struct {
		Key         string         `json:"key"`
		Kind        string         `json:"kind"`
		Fingerprint string         `json:"fingerprint"`
		Result      map[string]any `json:"result,omitempty"`
		Error       map[string]any `json:"error,omitempty"`
	}
	history := []map[string]any{}
	for i := 1; i <= 200; i++ {
		history = append(history, map[string]any{
			"run_seq": i, "kind": "step:complete", "at": 1.7e9 + float64(i)/8,
			"data": map[string]any{"step": text(2), "value": []any{number(), number(), text(3)}},
		})
	}
	doc := map[string]any{
		"manifest": map[string]any{
			"format": 1, "kind": "agent", "target_name": "bench", "code_version": "v1",
			"registration":    map[string]any{"tools": []any{map[string]any{"name": "search", "writes": false}}, "steps": []any{}},
			"recorded_config": map[string]any{"model": "m", "temperature": 0.7},
			"pyrula_version":  "0.1.0",
			"source":          map[string]any{"run_id": "r1", "namespace": "default", "origin": "valkey"},
			"fork_after_seq":  200,
			"capture":         map[string]any{"complete": true, "missing": []any{}},
			"inputs":          map[string]any{"q": text(20)},
		},
		"history": history,
	}
	var results []result
	approx := 0
	for i := 0; approx < size; i++ {
		r := result{
			Key:         fmt.Sprintf("call:%d", rng.IntN(1<<30)),
			Kind:        []string{"model", "tool", "step"}[rng.IntN(3)],
			Fingerprint: fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64()),
		}
		if rng.IntN(10) == 0 {
			r.Error = map[string]any{"type": "Timeout", "message": text(8)}
		} else {
			nums := make([]any, rng.IntN(12))
			for j := range nums {
				nums[j] = number()
			}
			r.Result = map[string]any{
				"text":   text(10 + rng.IntN(40)),
				"tokens": rng.IntN(5000),
				"scores": nums,
				"nested": map[string]any{
					"ok":    rng.IntN(2) == 0,
					"none":  nil,
					"items": []any{text(3), map[string]any{"id": i, "w": number()}, []any{}},
				},
			}
		}
		results = append(results, r)
		rb, err := json.Marshal(r)
		if err != nil {
			panic(err)
		}
		approx += len(rb) + 1
	}
	doc["results"] = results
	b, err := json.Marshal(doc)
	if err != nil {
		panic(err)
	}
	return b
}

func BenchmarkCanonicalize(b *testing.B) {
	benchDocOnce.Do(func() { benchDoc = bundleLikeDoc(16 << 20) })
	doc := benchDoc
	out, err := canonjson.Canonicalize(doc)
	if err != nil {
		b.Fatalf("Canonicalize refused the benchmark document: %v", err)
	}
	b.Logf("input %d bytes, canonical %d bytes", len(doc), len(out))

	b.Run("16MiB", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := canonjson.Canonicalize(doc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("16MiB/reuse_buffer", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		b.ReportAllocs()
		buf := make([]byte, 0, len(out))
		for b.Loop() {
			var err error
			if buf, err = canonjson.Append(buf[:0], doc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("16MiB/with_sha256", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		b.ReportAllocs()
		for b.Loop() {
			c, err := canonjson.Canonicalize(doc)
			if err != nil {
				b.Fatal(err)
			}
			_ = sha256.Sum256(c)
		}
	})
}

// BenchmarkAppendGo: a call input written by AppendGo against its anchor in
// the same loop, json.Marshal then Canonicalize (what a call's fingerprint
// took before), for the read step's input of the case-run benchmarks and
// for a larger value (nested structs, a map, floats, a slice of strings).
// Reports ns per value of each and their ratio.
//
//	go test -run '^$' -bench AppendGo -benchtime 200000x ./canonjson/
func BenchmarkAppendGo(b *testing.B) {
	type step struct {
		ID    int    `json:"id"`
		Query string `json:"query"`
	}
	type line struct {
		SKU   string  `json:"sku"`
		Qty   int     `json:"qty"`
		Price float64 `json:"price"`
	}
	type order struct {
		Customer string            `json:"customer"`
		Lines    []line            `json:"lines"`
		Notes    []string          `json:"notes,omitempty"`
		Meta     map[string]string `json:"meta"`
		Coupon   *string           `json:"coupon"`
	}
	coupon := "SAVE10"
	for _, c := range []struct {
		name string
		v    any
	}{
		{"step", step{ID: 4711, Query: "status of order 4711"}},
		{"order", order{Customer: "c-981", Lines: []line{{"A-1", 2, 9.99}, {"B-22", 1, 120}, {"C-3", 12, 0.5}},
			Notes: []string{"gift wrap", "leave at door"}, Meta: map[string]string{"region": "eu", "channel": "web", "ab": "b"}, Coupon: &coupon}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var fast, anchor int64
			buf := make([]byte, 0, 1024)
			b.ReportAllocs()
			for range b.N {
				t0 := nanotime()
				out, ok := canonjson.AppendGo(buf[:0], c.v)
				t1 := nanotime()
				raw, err := json.Marshal(c.v)
				if err != nil {
					b.Fatal(err)
				}
				want, err := canonjson.Canonicalize(raw)
				t2 := nanotime()
				if err != nil || !ok || string(out) != string(want) {
					b.Fatalf("AppendGo = %s, %v; want %s", out, ok, want)
				}
				fast, anchor = fast+t1-t0, anchor+t2-t1
			}
			b.ReportMetric(float64(fast)/float64(b.N), "ns/appendgo")
			b.ReportMetric(float64(anchor)/float64(b.N), "ns/marshal+canon")
			b.ReportMetric(float64(fast)/float64(anchor), "ratio")
		})
	}
}

// nanotime is the monotonic clock in nanoseconds.
func nanotime() int64 { return int64(time.Since(benchEpoch)) }

var benchEpoch = time.Now()

// BenchmarkAppendCanonical: Append of a value that is canonical already (a
// call's recorded result, as the journal's writes and a capture's read meet
// it), which a Scanner checks and which is copied, against its anchor in the
// same loop, the same text with a space after its first brace (not
// canonical: read token by token, as every value was before the check),
// each into a buffer of its own. Reports ns per value of each and their
// ratio.
//
//	go test -run '^$' -bench AppendCanonical -benchtime 200000x ./canonjson/
func BenchmarkAppendCanonical(b *testing.B) {
	for _, c := range []struct{ name, v string }{
		{"result", `{"id":4711,"items":["alpha","beta","gamma","delta"],"status":"shipped","total":1234.5}`},
		{"event", `{"at":"2026-12-07T10:04:09.123456Z","call":{"effect":"read","fingerprint":"3f9a1c2e8b7d6f5a4c3b2a1908f7e6d5c4b3a29180f7e6d5c4b3a2918f7e6d5c","key":"fetch:12","kind":"step"},"input":{"id":12,"query":"status of order 12 — «rush»"},"kind":"call:start","run_seq":40}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			// The anchor is the same text with a space after its first
			// brace: not canonical from its second byte, so it is read
			// token by token (a space before the value would not do: the
			// value after it is canonical, and copied).
			text, spaced := []byte(c.v), []byte("{ "+c.v[1:])
			var fast, anchor int64
			buf, abuf := make([]byte, 0, 1024), make([]byte, 0, 1024)
			b.ReportAllocs()
			for range b.N {
				t0 := nanotime()
				out, err := canonjson.Append(buf[:0], text)
				t1 := nanotime()
				want, werr := canonjson.Append(abuf[:0], spaced)
				t2 := nanotime()
				if err != nil || werr != nil || string(out) != string(want) || string(out) != c.v {
					b.Fatalf("Append = %s, %v; the token path gives %s, %v", out, err, want, werr)
				}
				fast, anchor = fast+t1-t0, anchor+t2-t1
			}
			b.ReportMetric(float64(fast)/float64(b.N), "ns/scanned")
			b.ReportMetric(float64(anchor)/float64(b.N), "ns/tokens")
			b.ReportMetric(float64(fast)/float64(anchor), "ratio")
		})
	}
}
