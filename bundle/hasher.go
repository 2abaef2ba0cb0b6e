package bundle

import (
	"hash"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// hashChunk is the size of the pieces asyncHasher hands to its goroutine;
// the first piece of every stream is hashed in line, so small bundles start
// no goroutine and allocate nothing.
const hashChunk = 256 << 10

// asyncHasher hashes what is written to it on its own goroutine, so that a
// verified read hashes one piece while the next is decompressed.
type asyncHasher struct {
	h     hash.Hash
	total int64
	buf   []byte
	ch    chan []byte
	free  chan []byte
	done  chan struct{}
	bufs  int
}

func newAsyncHasher() *asyncHasher { return &asyncHasher{h: newHasher()} }

// Write copies p for hashing; it never fails.
func (a *asyncHasher) Write(p []byte) {
	if a.ch == nil && a.total+int64(len(p)) <= hashChunk {
		a.total += int64(len(p))
		a.h.Write(p)
		return
	}
	if a.ch == nil {
		a.ch = make(chan []byte, 4)
		a.free = make(chan []byte, 5)
		a.done = make(chan struct{})
		a.buf = a.get()
		go func() {
			defer close(a.done)
			for b := range a.ch {
				a.h.Write(b)
				a.free <- b[:0]
			}
		}()
	}
	a.total += int64(len(p))
	for len(p) > 0 {
		n := copy(a.buf[len(a.buf):cap(a.buf)], p)
		a.buf, p = a.buf[:len(a.buf)+n], p[n:]
		if len(a.buf) == cap(a.buf) {
			a.ch <- a.buf
			a.buf = a.get()
		}
	}
}

// get returns an empty piece: a free one, a new one while there are fewer
// than five, else the next one the goroutine frees.
func (a *asyncHasher) get() []byte {
	select {
	case b := <-a.free:
		return b
	default:
	}
	if a.bufs < 5 {
		a.bufs++
		return make([]byte, 0, hashChunk)
	}
	return <-a.free
}

// stop ends the goroutine, if one runs; the hash then holds everything
// written.
func (a *asyncHasher) stop() {
	if a.ch == nil {
		return
	}
	if len(a.buf) > 0 {
		a.ch <- a.buf
		a.buf = nil
	}
	close(a.ch)
	<-a.done
	a.ch = nil
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
