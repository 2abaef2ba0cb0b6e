package bundle

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"

	"github.com/klauspost/compress/zstd"

	"github.com/pyrula/caseworker/canonjson"
)

// canonicalHead is how canonical bundle bytes begin.
const canonicalHead = `{"history":[`

// readWhole is Read's fast path for input that is canonical already: a
// blob a store or an export wrote (a zstd frame), or the plain canonical
// JSON of `case export --json` and of Python tooling. Such input is read
// whole into memory and checked in place by a canonjson.Scanner: no
// tokens, no second buffer, the canonical bytes are the input's. It
// applies only when the input starts as canonical bytes do; anything the
// Scanner refuses on the way (white space, a key out of order, an escape
// written another way, an error) goes to the general path over the bytes
// already read, which gives the canonical form or the reason for refusing.
// done is false when the fast path did not apply and nothing was consumed
// but what br buffers.
//
// Input over the limit is read no further than the limit and a little
// more (overRead): when the canonical pieces at its start are over the
// limit already, it is refused there (bundle_too_large), as the general
// path would refuse it, without a second pass over those bytes.
func readWhole(br *bufio.Reader, length int64, opts Options) (c *Canonical, err error, done bool) {
	head, _ := br.Peek(len(canonicalHead))
	limit := opts.maxCanonical()
	var enc Encoding
	readLimit := limit
	switch {
	case bytes.HasPrefix(head, zstdMagic):
		// The compressed blob is read whole: it is far smaller than what it
		// decompresses to.
		enc = EncodingZstd
	case string(head) == canonicalHead:
		enc, readLimit = EncodingPlain, limit+overRead(limit)
	default:
		return nil, nil, false
	}
	if length > limit && enc == EncodingZstd {
		return nil, nil, false
	}
	// A large plain input is read, and a large blob decompressed, into a
	// spill (Options.SpillDir) instead of the heap.
	var sp *spill
	if opts.SpillDir != "" && expectedSize(br, enc, length) >= cmp.Or(opts.spillAt, spillFrom) {
		sp, _ = openSpill(opts.SpillDir, limit+overRead(limit)+1)
		// raw and src may be its bytes: it must outlive the general path
		// over them too.
		defer runtime.KeepAlive(sp)
	}
	var raw []byte
	var complete bool
	if enc == EncodingPlain && sp != nil {
		raw, complete, err = sp.readAtMost(br, readLimit)
	} else {
		raw, complete, err = readAtMost(br, length, readLimit)
	}
	if err != nil {
		return nil, fmt.Errorf("bundle: read: %w", err), true
	}
	general := opts
	general.general = true
	rest := func() (*Canonical, error, bool) {
		// The general path, over the bytes read and what follows them.
		c, err := Read(io.MultiReader(bytes.NewReader(raw), br), general)
		return c, err, true
	}
	src := raw
	switch {
	case enc == EncodingZstd && !complete:
		return rest()
	case enc == EncodingZstd && sp != nil:
		if src, err = sp.decompressAtMost(raw, limit+overRead(limit)); err != nil {
			return rest()
		}
	case enc == EncodingZstd:
		if c, tried, ok := readFed(raw, limit, opts); tried {
			if !ok {
				return rest()
			}
			c.encoding = enc
			return c, nil, true
		}
		if src, err = decompressAtMost(raw, limit, limit+overRead(limit)); err != nil {
			return rest()
		}
	}
	if int64(len(src)) > limit {
		if int64(canonicalPrefix(src)) > limit {
			return nil, classify(canonjson.ErrTooLarge, opts), true
		}
		src = nil
		return rest()
	}
	if c, ok := readCanonicalFast(src, opts, sp); ok {
		c.encoding = enc
		return c, nil, true
	}
	src = nil
	return rest()
}

// contentSize returns the decompressed size a zstd blob's frame header
// states, when it states one.
func contentSize(blob []byte) (int64, bool) {
	var h zstd.Header
	if h.Decode(blob) != nil || !h.HasFCS || h.FrameContentSize > math.MaxInt32 {
		return 0, false
	}
	return int64(h.FrameContentSize), true
}

// readFed reads a blob of at least feedFrom bytes (as its frame header
// states, and at most limit) while it is decompressed on a second core
// (tried): readCanonicalFast of the bytes as they come. ok is false on
// anything unexpected; the general path then gives the verdict.
func readFed(blob []byte, limit int64, opts Options) (c *Canonical, tried, ok bool) {
	size, known := contentSize(blob)
	if !known || size < cmp.Or(opts.feedAt, feedFrom) || size > limit {
		return nil, false, false
	}
	f := startFeed(blob, size, cmp.Or(opts.feedStep, feedPiece))
	if f == nil {
		return nil, false, false
	}
	c, ok = readCanonicalFed(f, opts)
	f.close()
	feedTaken(ok)
	return c, true, ok
}

// readCanonicalFed is readCanonicalFast of the bytes f decompresses,
// checked as they come; f hashes them once they are all there.
func readCanonicalFed(f *feed, opts Options) (*Canonical, bool) {
	f.wait(1) // buf is made
	r := newFastReader(f.buf, opts.maxCanonical())
	r.feed, r.srcHash = f, f.hash
	if opts.Decode {
		r.decoded = &resultDecoder{ok: true}
	}
	if !r.scanFast(nil) {
		return nil, false
	}
	c, err := r.finish()
	// Every byte was there for the checks, but the frame may still go on
	// past its stated size (f failed after them).
	if err != nil || int64(len(f.buf)) != c.size || !f.ok() {
		return nil, false
	}
	r.keepWhole(c)
	return c, true
}

// keepWhole makes r.buf, the canonical bytes themselves, c's buffer, with
// the results decoded as they were checked (Options.Decode).
func (r *reader) keepWhole(c *Canonical) {
	c.whole = r.buf
	if d := r.decoded; d != nil && d.ok {
		if d.results == nil {
			d.results = []Result{}
		}
		c.decoded.Store(&d.results)
	}
}

// overRead is how much input past the limit the fast path reads of an
// input over it, so that the canonical pieces at its start can pass the
// limit (a piece cut by the end of what was read does not count).
func overRead(limit int64) int64 { return min(max(limit/64, 64<<10), 4<<20) }

// readAtMost reads r to its end when it holds at most limit bytes
// (complete), else the first limit+1 bytes. length, when known, sizes the
// buffer. Without it the input is read in pieces, put together once at the
// end: a buffer grown as it fills would leave a copy of every size behind
// it (as much as the input again, or more), and its last step would
// allocate more than the input.
func readAtMost(r io.Reader, length, limit int64) (data []byte, complete bool, err error) {
	var pieces [][]byte
	size, total := int64(64<<10), int64(0)
	if length > 0 {
		size = length + 1 // one more to see the end without growing
	}
	for {
		piece, eof, err := fill(make([]byte, 0, min(size, limit+1-total)), r)
		if err != nil {
			return nil, false, err
		}
		total += int64(len(piece))
		pieces = append(pieces, piece)
		if eof || total > limit {
			if len(pieces) > 1 {
				piece = bytes.Join(pieces, nil)
			}
			return piece, eof && total <= limit, nil
		}
		size = min(2*size, 8<<20)
	}
}

// fill reads r into buf until buf is full or r ends (eof).
func fill(buf []byte, r io.Reader) (_ []byte, eof bool, err error) {
	for len(buf) < cap(buf) {
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case errors.Is(err, io.EOF):
			return buf, true, nil
		case err != nil:
			return nil, false, err
		}
	}
	return buf, false, nil
}

// decompressAtMost decompresses a zstd blob: all of it when it is at most
// limit bytes, else its first bytes, more than limit and at most max+1. The
// output is sized from the frame header (the content size, or a bound
// from the block headers): a blob within the limit is decompressed in one
// call by a pooled decoder, a larger one (or one of unknown size) as a
// stream that stops past max.
func decompressAtMost(blob []byte, limit, max int64) ([]byte, error) {
	var h zstd.Header
	size := int64(-1) // the decompressed size or a bound of it, when known
	if h.Decode(blob) == nil {
		switch {
		case h.HasFCS:
			size = int64(min(h.FrameContentSize, uint64(max)+1))
		default:
			if bound, ok := frameBound(blob, h); ok {
				size = min(bound, max+1)
			}
		}
	}
	if size > limit || size < 0 {
		dec, err := newZstdDecoder(bytes.NewReader(blob), max)
		if err != nil {
			return nil, err
		}
		defer dec.Close()
		out, _, err := readAtMost(dec, size, max)
		return out, err
	}
	dst := make([]byte, 0, size)
	dec, err := getStoredDecoder()
	if err != nil {
		return nil, err
	}
	defer putStoredDecoder(dec)
	out, err := dec.DecodeAll(blob, dst)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// frameBound returns an upper bound of the decompressed size of a frame
// whose header does not say it (a frame written as a stream), from its
// block headers: a raw or RLE block says its size, a compressed one holds
// at most one block of 128 KiB (or the window, when smaller). A stream
// encoder fills its blocks, so the bound is close, and the decoder writes
// into one buffer instead of growing it block by block. ok is false when
// the blocks do not add up; the decoder then gives its own verdict.
func frameBound(blob []byte, h zstd.Header) (bound int64, ok bool) {
	const maxBlock = 128 << 10
	block := int64(maxBlock)
	if h.WindowSize > 0 && h.WindowSize < maxBlock {
		block = int64(h.WindowSize)
	}
	for pos := h.HeaderSize; pos+3 <= len(blob); {
		head := int(blob[pos]) | int(blob[pos+1])<<8 | int(blob[pos+2])<<16
		last, kind, size := head&1 == 1, head>>1&3, head>>3
		pos += 3
		switch kind {
		case 0: // raw
			bound += int64(size)
			pos += size
		case 1: // RLE: one byte repeated size times
			bound += int64(size)
			pos++
		case 2: // compressed
			bound += block
			pos += size
		default:
			return 0, false
		}
		if last {
			return bound, pos <= len(blob)
		}
	}
	return 0, false
}

// hashAsideFrom is the input size from which the fast path hashes on a
// second goroutine (below it, starting one costs more than it saves).
const hashAsideFrom = 256 << 10

// readCanonicalFast reads src, which starts with canonicalHead, as
// canonical bundle bytes: history, manifest and results in that order,
// results sorted, every value canonical. It validates them as the general
// path does and uses src itself as the canonical buffer. ok is false on
// anything unexpected, including every error: the general path then gives
// the verdict.
func readCanonicalFast(src []byte, opts Options, sp *spill) (c *Canonical, ok bool) {
	maxCanonical := opts.maxCanonical()
	if int64(len(src)) > maxCanonical || !bytes.HasPrefix(src, []byte(canonicalHead)) {
		return nil, false
	}
	r := newFastReader(src, maxCanonical)
	r.spill = sp
	if opts.Decode && sp == nil {
		r.decoded = &resultDecoder{ok: true}
	}
	if len(src) >= hashAsideFrom {
		// Accepted, src is the canonical bytes as they are: hash them on a
		// second core while they are checked (finish takes the result).
		sum := make(chan Hash, 1)
		go func() {
			if sp == nil {
				sum <- HashBytes(src)
				return
			}
			// Spilled: in pieces, each counted, so that its pages are
			// handed back as they are hashed.
			h := newHasher()
			for rest := src; len(rest) > 0; {
				n := min(len(rest), spillPiece)
				h.Write(rest[:n])
				sp.touch(n)
				rest = rest[n:]
			}
			sum <- hashOf(h)
		}()
		r.srcHash = sum
	}
	if !r.scanFast(nil) {
		return nil, false
	}
	c, err := r.finish()
	if err != nil {
		return nil, false
	}
	if sp == nil && int64(len(src)) == c.size {
		r.keepWhole(c)
	}
	// The blob is not made here: WriteBlob and Blob compress as they write.
	return c, true
}

// canonicalPrefix returns the length of the longest start of src (the
// first bytes of a longer input) made of whole pieces (the head, history
// events, the manifest, results) that are canonical, in canonical order and
// valid as the general path checks them while it reads: the canonical
// bytes of the whole input hold every one of those pieces as they are, so
// they are at least that long, and the general path, reading the same
// pieces first, would find nothing wrong before passing that length.
func canonicalPrefix(src []byte) int {
	progress := 0
	newFastReader(src, int64(len(src))).scanFast(&progress)
	return progress
}

// newFastReader returns a reader of src in place.
func newFastReader(src []byte, maxCanonical int64) *reader {
	return &reader{
		buf:          src,
		maxCanonical: maxCanonical,
		topSeen:      map[string]bool{"history": true, "manifest": true, "results": true},
		manifest:     map[string][]byte{},
	}
}

// scanFast checks r.buf as canonical bundle bytes in place (see
// readCanonicalFast) and reports whether they are. progress, when not
// nil, is set to the offset past each whole piece found canonical and
// valid (see canonicalPrefix).
func (r *reader) scanFast(progress *int) bool {
	s := canonjson.NewScanner(r.buf)
	if r.feed != nil {
		s.Reset(r.buf[:0], 0) // what is decompressed: ahead
	}
	counted := 0 // how far the bytes scanned have been counted in a spill
	done := func() {
		if progress != nil {
			*progress = s.Pos()
		}
		if r.spill != nil {
			r.spill.touch(s.Pos() - counted)
			counted = s.Pos()
		}
	}
	// Each piece below is checked again from its start when it failed only
	// for lack of decompressed bytes (retry). elements checks the elements
	// of an array, up to its ']', with element (given its index).
	elements := func(element func(i int) bool) bool {
		for i := 0; ; i++ {
			r.ahead(s)
			if s.Peek() == ']' {
				return true
			}
			if at := s.Pos(); !element(i) && !(r.retry(s, at) && element(i)) {
				return false
			}
			done()
		}
	}
	r.ahead(s)
	if !s.Skip(canonicalHead) {
		return false
	}
	done()
	r.histStart = s.Pos()
	var hv historyVisitor
	hvisit := hv.member
	event := func(i int) bool {
		if (i > 0 && !s.Skip(",")) || s.Peek() != '{' {
			return false
		}
		start := s.Pos()
		hv = historyVisitor{}
		if _, err := s.Object(hvisit); err != nil {
			return false
		}
		r.addHistory(start, &hv)
		return true
	}
	if !elements(event) {
		return false
	}
	r.histEnd = s.Pos()
	manifest := func() bool {
		if !s.Skip(`],"manifest":`) {
			return false
		}
		r.manStart = s.Pos()
		if _, err := s.Object(r.manifestMember); err != nil {
			return false
		}
		r.manEnd = s.Pos()
		return s.Skip(`,"results":[`)
	}
	if at := s.Pos(); !manifest() && !(r.retry(s, at) && manifest()) {
		return false
	}
	done()
	r.resStart = s.Pos()
	r.resultsSorted = true
	rv := resultVisitor{kinds: &r.kinds, keys: &r.keys}
	rvisit := rv.member
	if d := r.decoded; d != nil {
		// Decoded as they are checked (Options.Decode).
		rvisit = func(name, value []byte) error {
			d.member(name, value)
			return rv.member(name, value)
		}
	}
	result := func(i int) bool {
		if (i > 0 && !s.Skip(",")) || s.Peek() != '{' {
			return false
		}
		start, keys := s.Pos(), len(r.keys)
		rv.f = resultFields{}
		if _, err := s.Object(rvisit); err != nil {
			r.keys = r.keys[:keys] // a retry decodes its key again
			if r.decoded != nil {
				r.decoded.r = Result{}
			}
			return false
		}
		if r.addResult(start, s.Pos(), &rv.f) != nil || !r.resultsSorted {
			return false
		}
		if r.decoded != nil {
			r.decoded.end(s.Pos()-start, len(r.buf)-s.Pos())
		}
		return true
	}
	if !elements(result) {
		return false
	}
	r.resEnd = s.Pos()
	r.ahead(s)
	if !s.Skip(`]}`) || s.Pos() != len(r.buf) {
		return false
	}
	done()
	return true
}

// expectedSize returns the canonical size a plain input or a blob will
// have, as far as it can tell at once: the length of a plain file, the
// content size in a blob's frame header; 0 when it cannot tell.
func expectedSize(br *bufio.Reader, enc Encoding, length int64) int64 {
	if enc == EncodingPlain {
		return length
	}
	head, _ := br.Peek(zstd.HeaderMaxSize)
	var h zstd.Header
	if h.Decode(head) == nil && h.HasFCS {
		return int64(min(h.FrameContentSize, 1<<62))
	}
	return 0
}
