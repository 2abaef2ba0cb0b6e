package bundle

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"testing"
)

// TestAsyncHasher: whatever the sizes written (in line only, a piece
// filled exactly, pieces and a rest, more than maxPieces in flight, in odd
// writes), started early or not, the sum is SHA-256 of the bytes, and the
// pieces a finished hasher gives back serve the next.
func TestAsyncHasher(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	long := 2*maxPieces*hashPiece + 17
	data := make([]byte, long)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for round := range 3 {
		for _, size := range []int{0, 1, hashInline, hashInline + 1, hashInline + hashPiece, hashInline + 3*hashPiece + hashPiece/2, long} {
			for _, write := range []int{size + 1, 4096, 100_003} {
				for _, early := range []bool{false, true} {
					a := newAsyncHasher()
					if early {
						a.start()
					}
					for p := data[:size]; len(p) > 0; {
						n := min(len(p), write)
						a.Write(p[:n])
						p = p[n:]
					}
					want := sha256.Sum256(data[:size])
					if got := a.Sum(); string(got) != hex.EncodeToString(want[:]) {
						t.Fatalf("round %d, %d bytes in writes of %d (early %v): sum %s, want %x", round, size, write, early, got, want)
					}
				}
			}
		}
	}
	if len(freePieces) == 0 {
		t.Fatal("finished hashers gave no piece back")
	}
}
