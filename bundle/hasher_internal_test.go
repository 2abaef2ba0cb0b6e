package bundle

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"testing"
)

// TestAsyncHasher: whatever the sizes written (in line only, a piece
// filled exactly, pieces and a rest, in odd writes), the sum is SHA-256 of
// the bytes, and the pieces a finished hasher gives back serve the next.
func TestAsyncHasher(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	data := make([]byte, 8*hashChunk+17)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for round := range 3 {
		for _, size := range []int{0, 1, hashChunk, hashChunk + 1, 2 * hashChunk, 3*hashChunk + hashChunk/2, 8*hashChunk + 17} {
			for _, write := range []int{size + 1, 4096, 100_003} {
				a := newAsyncHasher()
				for p := data[:size]; len(p) > 0; {
					n := min(len(p), write)
					a.Write(p[:n])
					p = p[n:]
				}
				want := sha256.Sum256(data[:size])
				if got := a.Sum(); string(got) != hex.EncodeToString(want[:]) {
					t.Fatalf("round %d, %d bytes in writes of %d: sum %s, want %x", round, size, write, got, want)
				}
			}
		}
	}
}
