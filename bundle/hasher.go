package bundle

import (
	"hash"
	"runtime"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
)

// A verified read decompresses on one core and hashes on the other:
// SHA-256 (about 1.5 GB/s here) is slower than decompression, so the hash
// is the read's critical path, and the hasher must start early and never
// wait for a piece. Streams up to hashInline bytes are hashed in line (no
// goroutine, no allocation); longer ones are copied into pieces of
// hashPiece bytes that a goroutine hashes, at most maxPieces in flight.
const (
	hashInline = 256 << 10
	hashPiece  = 64 << 10
	maxPieces  = 64 // 4 MiB
)

// freePieces holds the pieces of finished hashers, least recently used
// first: a piece the other core has just hashed is still in its cache, and
// writing it again at once costs more than writing one used earlier.
var freePieces = make(chan []byte, maxPieces)

// asyncHasher hashes what is written to it on its own goroutine, so that a
// verified read hashes one piece while the next is decompressed.
type asyncHasher struct {
	h      hash.Hash
	total  int64
	buf    []byte
	ch     chan []byte // pieces to hash
	free   chan []byte // pieces hashed, back from the goroutine
	done   chan struct{}
	pieces int // pieces held, in ch, free, buf or being hashed
}

func newAsyncHasher() *asyncHasher { return &asyncHasher{h: newHasher()} }

// start starts the goroutine, if it does not run yet. A reader that knows
// its stream is long calls it before the first byte is decompressed, so
// that the goroutine is running when the first piece is ready.
func (a *asyncHasher) start() {
	if a.ch != nil {
		return
	}
	a.ch = make(chan []byte, maxPieces)
	a.free = make(chan []byte, maxPieces)
	a.done = make(chan struct{})
	go func() {
		defer close(a.done)
		for b := range a.ch {
			a.h.Write(b)
			a.free <- b[:0]
		}
	}()
}

// Write copies p for hashing; it never fails.
func (a *asyncHasher) Write(p []byte) {
	if a.ch == nil && a.total+int64(len(p)) <= hashInline {
		a.total += int64(len(p))
		a.h.Write(p)
		return
	}
	a.start()
	a.total += int64(len(p))
	for len(p) > 0 {
		if a.buf == nil {
			a.buf = a.get()
		}
		n := copy(a.buf[len(a.buf):cap(a.buf)], p)
		a.buf, p = a.buf[:len(a.buf)+n], p[n:]
		if len(a.buf) == cap(a.buf) {
			a.ch <- a.buf
			a.buf = nil
		}
	}
}

// get returns an empty piece: while this hasher holds fewer than
// maxPieces, a finished hasher's or a new one; else the next one its
// goroutine gives back. The bound keeps both channels from filling (the
// goroutine never waits to give a piece back), whatever other hashers
// give back meanwhile.
func (a *asyncHasher) get() []byte {
	if a.pieces < maxPieces {
		a.pieces++
		select {
		case b := <-freePieces:
			return b[:0]
		default:
			return make([]byte, 0, hashPiece)
		}
	}
	return <-a.free
}

// stop ends the goroutine, if one runs, and gives its pieces back; the
// hash then holds everything written.
func (a *asyncHasher) stop() {
	if a.ch == nil {
		return
	}
	if len(a.buf) > 0 {
		a.ch <- a.buf
	}
	a.buf = nil
	left := len(a.ch)
	close(a.ch)
	a.await(left)
	a.ch = nil
	for range a.pieces {
		select {
		case b := <-a.free:
			select {
			case freePieces <- b:
			default: // enough kept
			}
		default:
		}
	}
	a.pieces = 0
}

// pieceHashTime is about the time a piece takes to hash (64 KiB at 1 GB/s;
// SHA-256 runs at 1.5 GB/s on the machines measured).
const pieceHashTime = 64 * time.Microsecond

// await waits for the goroutine to hash the left pieces queued and the one
// it holds. Parking at once would add the time the scheduler takes to wake
// this goroutine's core when the hash is done (about 0.1 ms on the
// machines measured, a sixth of a 1 MiB read), so it first yields the
// processor in a loop for about as long as the pieces take, then parks.
func (a *asyncHasher) await(left int) {
	deadline := time.Now().Add(time.Duration(left+1) * pieceHashTime)
	for time.Now().Before(deadline) {
		select {
		case <-a.done:
			return
		default:
			runtime.Gosched()
		}
	}
	<-a.done
}

// Sum returns the hash of everything written.
func (a *asyncHasher) Sum() Hash {
	a.stop()
	return hashOf(a.h)
}

// storedDecoders pools the decoders of stored blobs: a decoder is costly to
// start, and most bundles are small.
var storedDecoders sync.Pool

func getStoredDecoder() (*zstd.Decoder, error) {
	if d, ok := storedDecoders.Get().(*zstd.Decoder); ok {
		return d, nil
	}
	return newZstdDecoder(nil, MaxCanonicalSize)
}

func putStoredDecoder(d *zstd.Decoder) {
	if d.Reset(nil) == nil {
		storedDecoders.Put(d)
	}
}
