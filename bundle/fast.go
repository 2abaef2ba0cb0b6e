package bundle

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"

	"github.com/pyrula/caseworker/bundle/canonjson"
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
func readWhole(br *bufio.Reader, length int64, opts Options) (c *Canonical, err error, done bool) {
	head, _ := br.Peek(len(canonicalHead))
	var enc Encoding
	var limit int64
	switch {
	case bytes.HasPrefix(head, zstdMagic):
		// The compressed blob is read whole: it is far smaller than what it
		// decompresses to.
		enc, limit = EncodingZstd, opts.maxCanonical()
	case string(head) == canonicalHead:
		enc, limit = EncodingPlain, opts.maxCanonical()
	default:
		return nil, nil, false
	}
	if length > limit {
		return nil, nil, false
	}
	raw, complete, err := readAtMost(br, length, limit)
	if err != nil {
		return nil, fmt.Errorf("bundle: read: %w", err), true
	}
	general := opts
	general.general = true
	if !complete {
		// Too large for the fast path: the general path reads on.
		c, err := Read(io.MultiReader(bytes.NewReader(raw), br), general)
		return c, err, true
	}
	src := raw
	if enc == EncodingZstd {
		src, err = decompressAll(raw, opts.maxCanonical())
		if err != nil {
			c, err := Read(bytes.NewReader(raw), general)
			return c, err, true
		}
	}
	if c, ok := readCanonicalFast(src, opts); ok {
		c.encoding = enc
		return c, nil, true
	}
	src = nil
	c, err = Read(bytes.NewReader(raw), general)
	return c, err, true
}

// readAtMost reads r to its end when it holds at most limit bytes
// (complete), else the first limit+1 bytes. length, when known, sizes the
// buffer.
func readAtMost(r io.Reader, length, limit int64) (data []byte, complete bool, err error) {
	size := 64 << 10
	if length > 0 {
		size = int(length) + 1 // one more to see the end without growing
	}
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return buf, false, nil
		}
		switch {
		case errors.Is(err, io.EOF):
			return buf, true, nil
		case err != nil:
			return nil, false, err
		}
	}
}

// decompressAll decompresses a whole zstd blob with a pooled decoder, the
// output sized from the frame header.
func decompressAll(blob []byte, limit int64) ([]byte, error) {
	var dst []byte
	var h zstd.Header
	if h.Decode(blob) == nil {
		switch {
		case h.HasFCS && h.FrameContentSize <= uint64(limit):
			dst = make([]byte, 0, h.FrameContentSize)
		case !h.HasFCS:
			if bound, ok := frameBound(blob, h); ok && bound <= limit {
				dst = make([]byte, 0, bound)
			}
		}
	}
	dec, err := getStoredDecoder()
	if err != nil {
		return nil, err
	}
	defer putStoredDecoder(dec)
	out, err := dec.DecodeAll(blob, dst)
	if err != nil {
		return nil, err
	}
	if int64(len(out)) > limit {
		return nil, canonjson.ErrTooLarge
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

// readCanonicalFast reads src, which starts with canonicalHead, as
// canonical bundle bytes: history, manifest and results in that order,
// results sorted, every value canonical. It validates them as the general
// path does and uses src itself as the canonical buffer. ok is false on
// anything unexpected, including every error: the general path then gives
// the verdict.
// hashAsideFrom is the input size from which the fast path hashes on a
// second goroutine (below it, starting one costs more than it saves).
const hashAsideFrom = 256 << 10

func readCanonicalFast(src []byte, opts Options) (c *Canonical, ok bool) {
	maxCanonical := opts.maxCanonical()
	if int64(len(src)) > maxCanonical {
		return nil, false
	}
	s := canonjson.NewScanner(src)
	if !s.Skip(canonicalHead) {
		return nil, false
	}
	r := &reader{
		buf:          src,
		maxCanonical: maxCanonical,
		topSeen:      map[string]bool{"history": true, "manifest": true, "results": true},
		manifest:     map[string][]byte{},
	}
	if len(src) >= hashAsideFrom {
		// Accepted, src is the canonical bytes as they are: hash them on a
		// second core while they are checked (finish takes the result).
		sum := make(chan Hash, 1)
		go func() { sum <- HashBytes(src) }()
		r.srcHash = sum
	}
	r.histStart = s.Pos()
	var hv historyVisitor
	hvisit := hv.member
	for i := 0; s.Peek() != ']'; i++ {
		if (i > 0 && !s.Skip(",")) || s.Peek() != '{' {
			return nil, false
		}
		start := s.Pos()
		hv = historyVisitor{}
		if _, err := s.Object(hvisit); err != nil {
			return nil, false
		}
		r.addHistory(start, &hv)
	}
	r.histEnd = s.Pos()
	if !s.Skip(`],"manifest":`) {
		return nil, false
	}
	r.manStart = s.Pos()
	if _, err := s.Object(r.manifestMember); err != nil {
		return nil, false
	}
	r.manEnd = s.Pos()
	if !s.Skip(`,"results":[`) {
		return nil, false
	}
	r.resStart = s.Pos()
	r.resultsSorted = true
	rv := resultVisitor{kinds: &r.kinds, keys: &r.keys}
	rvisit := rv.member
	for i := 0; s.Peek() != ']'; i++ {
		if (i > 0 && !s.Skip(",")) || s.Peek() != '{' {
			return nil, false
		}
		start := s.Pos()
		rv.f = resultFields{}
		if _, err := s.Object(rvisit); err != nil {
			return nil, false
		}
		if r.addResult(start, s.Pos(), &rv.f) != nil || !r.resultsSorted {
			return nil, false
		}
	}
	r.resEnd = s.Pos()
	if !s.Skip(`]}`) || s.Pos() != len(src) {
		return nil, false
	}
	c, err := r.finish()
	if err != nil {
		return nil, false
	}
	// The blob is not made here: WriteBlob and Blob compress as they write.
	return c, true
}
