package envelope

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/messages"
)

// The codec's fast paths, each against what it stands in for, on the
// messages the platform client sends: typical inputs, as every message of
// a busy worker takes these paths.
var (
	fastHash      = strings.Repeat("0", 64)
	fastDeleteRaw = `{"fixture_hash":"` + fastHash + `","fixture_store":"s3://cases/prod"}`
	fastEnvRaw    = `{"body":` + fastDeleteRaw + `,"message_id":"bench-000123","reply_to":"platform:replies","type":"delete_case_bundle"}`
)

// BenchmarkFastPaths measures each fast path ("fast") and the
// encoding/json code it replaces ("json"):
//
//	hash_body      HashBody of a canonical body: a scan, against decoding and re-encoding it
//	parse_envelope decoding an entry's envelope: Parse, against json.Unmarshal
//
// A fast path stays when it is at least twice as fast as encoding/json
// and saves at least 1 µs of the worker's CPU per message
// (docs/performance.md records the figures). Run it with:
//
//	go test ./worker/internal/envelope -run '^$' -bench FastPaths -benchmem
func BenchmarkFastPaths(b *testing.B) {
	env := messages.Envelope{MessageID: "bench-000123", Type: messages.DeleteCaseBundle, Body: json.RawMessage(fastDeleteRaw)}
	run := func(name string, fast, slow func(b *testing.B)) {
		b.Run(name+"/fast", func(b *testing.B) { b.ReportAllocs(); fast(b) })
		b.Run(name+"/json", func(b *testing.B) { b.ReportAllocs(); slow(b) })
	}
	run("hash_body", func(b *testing.B) {
		for b.Loop() {
			if _, err := HashBody(env); err != nil {
				b.Fatal(err)
			}
		}
	}, func(b *testing.B) {
		for b.Loop() {
			if _, err := hashBodySlow(env); err != nil {
				b.Fatal(err)
			}
		}
	})
	run("parse_envelope", func(b *testing.B) {
		for b.Loop() {
			if _, err := Parse(fastEnvRaw); err != nil {
				b.Fatal(err)
			}
		}
	}, func(b *testing.B) {
		for b.Loop() {
			var e messages.Envelope
			if err := json.Unmarshal([]byte(fastEnvRaw), &e); err != nil {
				b.Fatal(err)
			}
		}
	})

}

// hashBodySlow is HashBody without its fast path: the body decoded and
// encoded again before hashing.
func hashBodySlow(env messages.Envelope) (string, error) {
	canon, err := canonicalize(env.Body)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write([]byte(env.Type))
	h.Write([]byte{0})
	h.Write(canon)
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])), nil
}

// TestFastPathsAreTaken proves that each fast path is taken for the
// messages it is for, by what it saves: a typical message costs far fewer
// allocations than the same message forced onto the encoding/json path
// (a space or an escape the scan leaves to encoding/json). Without the
// fast path both would cost the same.
func TestFastPathsAreTaken(t *testing.T) {
	allocs := func(f func()) float64 { return testing.AllocsPerRun(50, f) }
	spaced := messages.Envelope{Type: messages.DeleteCaseBundle, Body: json.RawMessage(strings.Replace(fastDeleteRaw, ",", ", ", 1))}
	canonical := messages.Envelope{Type: messages.DeleteCaseBundle, Body: json.RawMessage(fastDeleteRaw)}
	if a, b := mustHash(t, canonical), mustHash(t, spaced); a != b {
		t.Fatalf("HashBody: %s for the canonical body, %s spaced; want the same", a, b)
	}
	fast, slow := allocs(func() { _, _ = HashBody(canonical) }), allocs(func() { _, _ = HashBody(spaced) })
	if fast*4 > slow {
		t.Errorf("HashBody: %v allocations for a canonical body, %v for a spaced one; want the canonical one scanned, not re-encoded", fast, slow)
	}

	escaped := strings.Replace(fastEnvRaw, `"bench-000123"`, `"bench-\u0030000123"`, 1)
	if env, err := Parse(escaped); err != nil || env.MessageID != "bench-0000123" {
		t.Fatalf("Parse(escaped) = %+v, %v", env, err)
	}
	fast, slow = allocs(func() { _, _ = Parse(fastEnvRaw) }), allocs(func() { _, _ = Parse(escaped) })
	if fast*4 > slow {
		t.Errorf("Parse: %v allocations for a typical envelope, %v for an escaped one; want the typical one read by the scan", fast, slow)
	}
}

func mustHash(t *testing.T, env messages.Envelope) string {
	t.Helper()
	h, err := HashBody(env)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// EncodeResult writes a delete's result as a constant, and every other
// result as json.Marshal does.
func TestEncodeResult(t *testing.T) {
	for _, r := range []any{messages.DeleteCaseBundleResult{Deleted: true}, messages.DeleteCaseBundleResult{}, map[string]int{"a": 1}} {
		got, err := EncodeResult(r)
		want, _ := json.Marshal(r)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("EncodeResult(%+v) = %s, %v; want %s", r, got, err, want)
		}
	}
}
