package bundle

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/pyrula/caseworker/canonjson"
)

// Checking a large blob's bytes while it is decompressed: a goroutine of
// its own decompresses the frame into one buffer of its stated size, piece
// by piece, then hashes it, while the fast path checks what is there
// (scanFast waits when it catches up). Read still returns only once every
// byte is decompressed, checked and hashed, as before.

const (
	// feedFrom is the decompressed size from which Read decompresses a
	// blob on a second goroutine while it checks it (below it, the
	// hand-offs cost more than they save).
	feedFrom = 1 << 20
	// feedPiece is how much the decompressing goroutine hands over at a
	// time, and how far ahead of its position the check asks for.
	feedPiece = 128 << 10
)

// feedTaken is called when a read took the feed, ok when the feed gave the
// bundle (a test's hook).
var feedTaken = func(ok bool) {}

// errFeedSize is the decompression's error when the frame does not hold
// the size its header states.
var errFeedSize = errors.New("bundle: the frame does not hold the content size its header states")

// feed is a blob being decompressed into buf.
type feed struct {
	buf  []byte    // made by run; read it once wait has returned
	step int       // how much the goroutine hands over at a time (feedPiece)
	hash chan Hash // the hash of buf once all of it is decompressed; closed

	got atomic.Int64 // n, read without the lock

	mu     sync.Mutex
	more   *sync.Cond
	n      int  // bytes of buf decompressed so far
	ended  bool // the goroutine is done: n == len(buf), or failed
	failed bool
	stop   bool // the reader gave up: decompress no more
	done   chan struct{}
}

// startFeed starts decompressing blob, whose frame states its content
// size, into a buffer of that size, step bytes at a time. It returns nil
// when there is no second core to do it on.
func startFeed(blob []byte, size int64, step int) *feed {
	if runtime.GOMAXPROCS(0) < 2 {
		return nil
	}
	f := &feed{step: step, hash: make(chan Hash, 1), done: make(chan struct{})}
	f.more = sync.NewCond(&f.mu)
	go f.run(blob, size)
	return f
}

// run decompresses blob into buf, which it makes (the zeroing of a large
// buffer takes time too): the reader takes buf once wait returns.
func (f *feed) run(blob []byte, size int64) {
	defer close(f.done)
	f.buf = make([]byte, size)
	err := f.decompress(blob)
	f.mu.Lock()
	f.ended, f.failed = true, err != nil
	f.more.Broadcast()
	f.mu.Unlock()
	if err == nil {
		f.hash <- HashBytes(f.buf)
	}
	close(f.hash) // a failed feed gives the zero Hash: see ok
}

// ok says, once the hash is taken, that buf is the whole frame.
func (f *feed) ok() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ended && !f.failed
}

func (f *feed) decompress(blob []byte) error {
	dec, err := getStoredDecoder() // its buffers reused, as DecodeAll's
	if err != nil {
		return err
	}
	defer putStoredDecoder(dec)
	if err := dec.Reset(bytes.NewReader(blob)); err != nil {
		return err
	}
	for n := 0; n < len(f.buf); {
		m, err := io.ReadFull(dec, f.buf[n:min(n+f.step, len(f.buf))])
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				return errFeedSize
			}
			return err
		}
		n += m
		f.got.Store(int64(n))
		f.mu.Lock()
		f.n = n
		stop := f.stop
		f.more.Broadcast()
		f.mu.Unlock()
		if stop {
			return errors.New("bundle: stopped")
		}
	}
	// The frame ends there (its checksum is checked at its end).
	var one [1]byte
	switch m, err := dec.Read(one[:]); {
	case m > 0:
		return errFeedSize
	case err != nil && !errors.Is(err, io.EOF):
		return err
	}
	return nil
}

// wait returns how many bytes of buf are decompressed once at least want
// are (or the decompression ended short of it).
func (f *feed) wait(want int) int {
	if n := int(f.got.Load()); n >= want {
		return n
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.n < want && !f.ended {
		f.more.Wait()
	}
	return f.n
}

// close stops the decompression if it still runs and waits for its
// goroutine to end.
func (f *feed) close() {
	f.mu.Lock()
	f.stop = true
	f.mu.Unlock()
	<-f.done
}

// ahead gives s, when r reads a feed, the decompressed bytes from its
// position to a piece further on (to the end for the last).
func (r *reader) ahead(s *canonjson.Scanner) {
	if r.feed == nil || s.Len() == len(r.buf) {
		return
	}
	if want := min(s.Pos()+r.feed.step, len(r.buf)); s.Len() < want {
		// No further than want, so that a piece longer than a step is
		// always checked again, whatever the goroutine's pace.
		s.Reset(r.buf[:min(r.feed.wait(want), want)], s.Pos())
	}
}

// retry says, after a piece that starts at start did not check, whether to
// check it again: when r reads a feed and s did not see all of it, it gives
// s the whole buffer (once it is all decompressed) at start. A piece longer
// than what ahead asked for ends where the bytes did, which is no verdict.
func (r *reader) retry(s *canonjson.Scanner, start int) bool {
	if r.feed == nil || s.Len() == len(r.buf) {
		return false
	}
	if r.feed.wait(len(r.buf)) < len(r.buf) {
		return false // the decompression failed: the general path says why
	}
	s.Reset(r.buf, start)
	return true
}
