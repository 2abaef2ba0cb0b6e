package bundle

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"sync"
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

// Hashers running at once share the pieces finished ones give back; each
// still hashes exactly its own bytes.
func TestAsyncHashersAtOnce(t *testing.T) {
	const hashers = 8
	rng := rand.New(rand.NewPCG(7, 8))
	pool := make([]byte, 3*maxPieces*hashPiece)
	for i := range pool {
		pool[i] = byte(rng.Uint32())
	}
	var wg sync.WaitGroup
	errs := make(chan error, hashers)
	for g := range hashers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for round := range 4 {
				from := rng.IntN(len(pool) - hashInline)
				data := pool[from : from+hashInline+rng.IntN(len(pool)-from-hashInline)]
				a := newAsyncHasher()
				if round%2 == 0 {
					a.start()
				}
				for p := data; len(p) > 0; {
					n := min(len(p), 1+rng.IntN(200_000))
					a.Write(p[:n])
					p = p[n:]
				}
				want := sha256.Sum256(data)
				if got := a.Sum(); string(got) != hex.EncodeToString(want[:]) {
					errs <- fmt.Errorf("hasher %d, round %d (%d bytes): sum %s, want %x", g, round, len(data), got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
