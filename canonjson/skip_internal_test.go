package canonjson

import (
	"math/rand/v2"
	"testing"
)

// TestSkipPlain: skipPlain stops where a byte-by-byte scan of the plain
// table stops, for every start, on text of plain bytes with every kind of
// byte that is not plain put at every place.
func TestSkipPlain(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	naive := func(src []byte, i int) int {
		for i < len(src) && plain[src[i]] {
			i++
		}
		return i
	}
	for n := range 40 {
		for c := range 256 {
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(0x20 + r.IntN(0x60))
				for !plain[src[i]] {
					src[i] = byte(0x20 + r.IntN(0x60))
				}
			}
			if n > 0 {
				src[r.IntN(n)] = byte(c)
			}
			for i := 0; i <= n; i++ {
				if got, want := skipPlain(src, i), naive(src, i); got != want {
					t.Fatalf("skipPlain(%q, %d) = %d, want %d", src, i, got, want)
				}
			}
		}
	}
}

// BenchmarkSkipPlain: a fingerprint's 64 hex digits.
func BenchmarkSkipPlain(b *testing.B) {
	src := []byte("9f2c3a4b5c6d7e8f9f2c3a4b5c6d7e8f9f2c3a4b5c6d7e8f9f2c3a4b5c6d7e8f\"")
	b.Run("words", func(b *testing.B) {
		for range b.N {
			if skipPlain(src, 0) != 64 {
				b.Fatal("wrong end")
			}
		}
	})
	b.Run("bytes", func(b *testing.B) {
		for range b.N {
			i := 0
			for i < len(src) && plain[src[i]] {
				i++
			}
			if i != 64 {
				b.Fatal("wrong end")
			}
		}
	})
}
