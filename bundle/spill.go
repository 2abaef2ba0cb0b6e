package bundle

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
)

// spill holds the canonical bytes of a large bundle being imported in an
// unlinked temporary file mapped into memory (Options.SpillDir), instead of
// in the Go heap. Read appends to the mapping as it would to a buffer; the
// pages it writes and reads back are handed back to the kernel every
// releaseEvery bytes (MADV_DONTNEED: a shared file mapping's pages stay in
// the file, and the next touch maps them again from the page cache). The
// one pass that reads the results in their sorted order, scattered over
// the file, reads the file instead (writeAside, sortInFile), so that it
// maps no page at all. The process's resident memory then holds a few MiB of the
// bundle at a time rather than all of it; the page cache holds the rest,
// which the kernel writes back and reclaims under memory pressure.
//
// A spill is unmapped and its file closed when the last of the reader, the
// Canonical and the pipeline that hold it is collected: the mapping lives
// as long as any slice of it can be in use.
type spill struct {
	mem     []byte   // the whole mapping: len and cap are its size
	f       *os.File // the mapped file, for pread
	mapping spillMapping

	// used is how far the bytes go (the reader's length), so that a release
	// covers only pages that may have been touched.
	used atomic.Int64
	// touched counts the bytes written or read since the last release.
	touched atomic.Int64
	// populated is how far the mapping's pages were mapped writable ahead
	// of the writer (wrote); -1 when the kernel cannot.
	populated atomic.Int64
}

// spillFrom is the expected canonical size from which Read spills (with
// Options.SpillDir set): under it the buffer stays in the heap, where it
// costs less than a file.
const spillFrom = 16 << 20

// releaseEvery is how many bytes are written to or read from a spill
// between two releases of its pages: about the most of it a process holds
// resident at once, per goroutine reading it.
const releaseEvery = 8 << 20

// faultAround is how much of a file mapping a read fault maps at once
// (Linux's default fault_around_bytes): a read of a few bytes somewhere in
// the mapping is counted as this much.
const faultAround = 64 << 10

// spillPiece is the longest slice of a spill that segments yields at once,
// and the size of writeAside's pieces.
const spillPiece = 1 << 20

// spillMapping is what a spill's cleanup releases, once: Canonical.Release
// may have released it before.
type spillMapping struct {
	mem  []byte
	f    *os.File
	once *sync.Once
}

// release unmaps the mapping and closes the file, the first time.
func (m spillMapping) release() {
	m.once.Do(func() {
		unmap(m.mem)
		m.f.Close()
	})
}

// openSpill maps a new spill of size bytes in a temporary file of dir,
// unlinked at once (nothing is left behind if the process dies), its
// blocks reserved (mapTemp).
func openSpill(dir string, size int64) (*spill, error) {
	mem, f, err := mapTemp(dir, size)
	if err != nil {
		return nil, err
	}
	m := spillMapping{mem: mem, f: f, once: new(sync.Once)}
	s := &spill{mem: mem, f: f, mapping: m}
	runtime.AddCleanup(s, spillMapping.release, m)
	return s, nil
}

// wrote records that the writer's bytes now go up to n, and counts the new
// ones. Its next populateAhead bytes are mapped writable in one call
// (populate) once it is within half of that of the pages mapped so: the
// writer then takes no page fault per page.
func (s *spill) wrote(n int) {
	prev := int(s.used.Swap(int64(n)))
	s.touch(n - prev)
	if p := s.populated.Load(); p >= 0 && int64(n)+populateAhead/2 > p {
		from := max(p, int64(n)) &^ (pageSize - 1)
		to := min(int64(n)+populateAhead, int64(len(s.mem)))
		if from < to && !populate(s.mem[from:to]) {
			s.populated.Store(-1)
			return
		}
		s.populated.Store(to)
	}
}

// populateAhead is how far ahead of the writer wrote maps a spill's pages.
const populateAhead = 4 << 20

// pageSize is the unit of the mapping.
const pageSize = 4096

// touch records n bytes written to or read from the mapping and, every
// releaseEvery bytes, hands its pages back to the kernel. A nil spill
// does nothing.
func (s *spill) touch(n int) {
	if s == nil {
		return
	}
	if s.touched.Add(int64(n)) < releaseEvery {
		return
	}
	s.touched.Store(0)
	// The page the writer is in stays.
	release(s.mem[:min(int64(len(s.mem)), s.used.Load())&^(pageSize-1)])
}

// offset returns where b, a slice of the mapping, begins in it; ok is
// false for a slice of other memory.
func (s *spill) offset(b []byte) (off int64, ok bool) {
	if len(b) == 0 {
		return 0, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(s.mem)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p < base || p+uintptr(len(b)) > base+uintptr(len(s.mem)) {
		return 0, false
	}
	return int64(p - base), true
}

// Release hands back at once what c holds outside the Go heap, the
// mapping and the temporary file of a spilled bundle (Options.SpillDir),
// which are otherwise handed back when c is collected: the file reserves
// room for the largest bundle, and a process that stores many large
// bundles (a worker's saves) should not leave that to the collector. It
// waits for the hash and blob made aside; c must not be used after it. A
// Canonical held in memory has nothing to release.
func (c *Canonical) Release() {
	if c == nil || c.spill == nil {
		return
	}
	if c.hashed != nil {
		<-c.hashed
	}
	c.spill.mapping.release()
}

// writeAside makes the hash and the zstd blob of c, a spilled bundle, in
// one pass over its canonical bytes: they are read from the spill's file
// (pread, so no page of the mapping becomes resident; results out of order
// through the buckets of sortInFile, else one pread each), copied into
// pieces of spillPiece bytes, hashed here and compressed on every core
// meanwhile. The blob is held in memory
// (the compressed size, a fraction of the bundle's).
func (c *Canonical) writeAside() (Hash, pieces, error) {
	var blob pieces
	enc, err := newZstdEncoder(nil)
	if err != nil {
		return "", nil, fmt.Errorf("bundle: compress: %w", err)
	}
	enc.ResetContentSize(&blob, c.size)
	const inFlight = 3
	full, free := make(chan []byte, inFlight), make(chan []byte, inFlight)
	for range inFlight {
		free <- make([]byte, 0, spillPiece)
	}
	compressed := make(chan error, 1)
	go func() {
		var err error
		for p := range full {
			if err == nil {
				_, err = enc.Write(p)
			}
			free <- p[:0]
		}
		if cerr := enc.Close(); err == nil {
			err = cerr
		}
		compressed <- err
	}()
	h := newHasher()
	piece := <-free
	flush := func() {
		h.Write(piece)
		full <- piece
		piece = <-free
	}
	var readErr error
	// emit copies seg into the pieces: from the file when it is a slice of
	// the mapping (pread), else from memory.
	emit := func(seg []byte) {
		off, inFile := c.spill.offset(seg)
		for len(seg) > 0 && readErr == nil {
			n := min(len(seg), cap(piece)-len(piece))
			dst := piece[len(piece) : len(piece)+n]
			if inFile {
				_, readErr = c.spill.f.ReadAt(dst, off)
				off += int64(n)
			} else {
				copy(dst, seg)
			}
			piece, seg = piece[:len(piece)+n], seg[n:]
			if len(piece) == cap(piece) {
				flush()
			}
		}
	}
	for _, seg := range c.head {
		emit(seg)
	}
	switch {
	case c.region != nil:
		emit(c.region)
	case !c.sortInFile(func(res []byte) {
		emit(res) // from memory: a bucket read back
	}, &readErr):
		for i, e := range c.results {
			if i > 0 {
				emit(comma)
			}
			emit(c.buf[e.start:e.end])
		}
	}
	emit(tail)
	h.Write(piece)
	full <- piece
	close(full)
	err = <-compressed
	switch {
	case readErr != nil:
		return "", nil, fmt.Errorf("bundle: read back: %w", readErr)
	case err != nil:
		return "", nil, fmt.Errorf("bundle: compress: %w", err)
	}
	return hashOf(h), blob, nil
}

// bucketBytes is the most bytes of results one bucket of sortInFile
// holds: what it reads back into memory at once.
const bucketBytes = 4 << 20

// stageBytes is the buffer of each bucket while sortInFile fills them.
const stageBytes = 32 << 10

// sortInFile yields c's results (out of order in its spill) in their
// sorted order with a comma between two, as rawSegments does, in two
// sequential passes over the file instead of one pread per result: the
// sorted results are cut into buckets of at most bucketBytes; the first
// pass reads the results in the order they lie in the file and appends
// each to its bucket, in the spill's file past the canonical bytes; the
// second reads each bucket back whole and yields its results in their
// order. It reports false, having yielded nothing, when the file has no
// room for the buckets (each result's bytes once more); a read or write
// error is set in *ioErr (and nothing more is yielded).
func (c *Canonical) sortInFile(yield func([]byte), ioErr *error) bool {
	sp := c.spill
	base, ok := sp.offset(c.buf)
	n := len(c.results)
	if !ok || n < 2 {
		return false
	}
	// bucket[k] is where bucket k begins in the file; the results of ranks
	// first[k] … first[k+1]-1 go there.
	area := (sp.used.Load() + pageSize - 1) &^ (pageSize - 1)
	var first []int
	var bucket []int64
	end, size := area, int64(0)
	for r, e := range c.results {
		l := int64(e.end - e.start)
		if r == 0 || size+l > bucketBytes {
			first, bucket, size = append(first, r), append(bucket, end), 0
		}
		size += l
		end += l
	}
	if end > int64(len(sp.mem)) {
		return false
	}
	first = append(first, n)
	// order: the ranks in the order their results lie in the file.
	order := make([]uint32, n)
	for r := range order {
		order[r] = uint32(r)
	}
	slices.SortFunc(order, func(a, b uint32) int { return cmp.Compare(c.results[a].start, c.results[b].start) })
	bucketOf := func(r int) int {
		k, _ := slices.BinarySearch(first, r+1)
		return k - 1
	}
	// pos[r]: where result r lies in its bucket.
	pos := make([]uint32, n)
	cursor := slices.Clone(bucket)
	stage := make([][]byte, len(bucket))
	write := func(k int, b []byte) {
		if *ioErr == nil {
			_, *ioErr = sp.f.WriteAt(b, cursor[k])
			cursor[k] += int64(len(b))
		}
	}
	var chunk []byte
	var chunkAt int64 = -1
	for _, r := range order {
		e := c.results[r]
		off, l := base+int64(e.start), int64(e.end-e.start)
		if chunkAt < 0 || off < chunkAt || off+l > chunkAt+int64(len(chunk)) {
			// The next stretch of the file, from this result on.
			chunk = slices.Grow(chunk[:0], int(max(l, spillPiece)))[:max(l, spillPiece)]
			m, err := sp.f.ReadAt(chunk, off)
			if m < int(l) {
				if err == nil {
					err = io.ErrUnexpectedEOF
				}
				*ioErr = err
				return true
			}
			chunk, chunkAt = chunk[:m], off
		}
		res := chunk[off-chunkAt : off-chunkAt+l]
		k := bucketOf(int(r))
		pos[r] = uint32(cursor[k] - bucket[k] + int64(len(stage[k])))
		if len(stage[k])+len(res) > stageBytes {
			write(k, stage[k])
			stage[k] = stage[k][:0]
		}
		if len(res) > stageBytes {
			write(k, res)
			continue
		}
		if stage[k] == nil {
			stage[k] = make([]byte, 0, stageBytes)
		}
		stage[k] = append(stage[k], res...)
	}
	for k := range stage {
		write(k, stage[k])
	}
	chunk, stage = nil, nil
	var back []byte
	for k := range bucket {
		if *ioErr != nil {
			return true
		}
		back = slices.Grow(back[:0], int(cursor[k]-bucket[k]))[:cursor[k]-bucket[k]]
		if _, err := sp.f.ReadAt(back, bucket[k]); err != nil {
			*ioErr = err
			return true
		}
		for r := first[k]; r < first[k+1]; r++ {
			if r > 0 {
				yield(comma)
			}
			e := c.results[r]
			yield(back[pos[r] : pos[r]+e.end-e.start])
		}
	}
	return true
}

// readAtMost reads r into the spill to its end when it holds at most limit
// bytes (complete), else its first limit+1 bytes, as readAtMost does into
// the heap, handing pages back as it goes.
func (s *spill) readAtMost(r io.Reader, limit int64) (data []byte, complete bool, err error) {
	end := min(limit+1, int64(len(s.mem)))
	n := 0
	for int64(n) < end {
		m, err := r.Read(s.mem[n:min(int64(n)+spillPiece, end)])
		n += m
		s.wrote(n)
		switch {
		case errors.Is(err, io.EOF):
			return s.mem[:n], int64(n) <= limit, nil
		case err != nil:
			return nil, false, err
		}
	}
	return s.mem[:n], false, nil
}

// decompressAtMost decompresses a zstd blob into the spill: all of it when
// it is at most max bytes, else its first bytes, more than max.
func (s *spill) decompressAtMost(blob []byte, max int64) ([]byte, error) {
	dec, err := newZstdDecoder(bytes.NewReader(blob), max)
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	out, _, err := s.readAtMost(dec, max)
	return out, err
}
