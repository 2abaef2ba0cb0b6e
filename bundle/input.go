package bundle

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/pyrula/caseworker/messages"
)

// Encoding is how an input file is encoded, told apart by its first bytes.
type Encoding string

// The encodings Read accepts.
const (
	EncodingZstd  Encoding = "zstd"
	EncodingGzip  Encoding = "gzip"
	EncodingPlain Encoding = "json"
)

var (
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
	gzipMagic = []byte{0x1f, 0x8b}
	utf8BOM   = []byte{0xef, 0xbb, 0xbf}
)

// readError marks an error of the caller's reader (an I/O error, not a
// property of the bytes), so that it is not mistaken for corruption.
type readError struct{ err error }

func (e *readError) Error() string { return e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// inputReaders recycles the buffered readers of decodeInput
// (*bufio.Reader of 32 KiB): a worker reads a bundle for every case run.
var inputReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 32<<10) }}

type sourceReader struct{ r io.Reader }

func (s sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		err = &readError{err}
	}
	return n, err
}

// errLimit is returned by limitReader past its limit.
type errLimit struct{ limit int64 }

func (e *errLimit) Error() string { return fmt.Sprintf("more than %d bytes", e.limit) }

// limitReader fails with *errLimit instead of stopping quietly at the limit.
type limitReader struct {
	r     io.Reader
	left  int64
	limit int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		// Read one byte more to tell "exactly at the limit" from "past it".
		var one [1]byte
		n, err := l.r.Read(one[:])
		if n > 0 {
			return 0, &errLimit{l.limit}
		}
		return 0, err
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// decodedInput is an input file's decompressed JSON text.
type decodedInput struct {
	io.Reader
	encoding Encoding
	hint     int64   // decompressed size, when the frame header says it
	dense    float64 // plain JSON: the share of a sample that is not whitespace
	close    func()
}

// newZstdDecoder returns the bounded decoder of docs/bundle-format.md: concurrency 1,
// memory capped at the limit, frame checksums checked (the default). The
// caller still wraps its output in a limit.
func newZstdDecoder(r io.Reader, limit int64) (*zstd.Decoder, error) {
	return zstd.NewReader(r,
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxMemory(uint64(limit)+1),
	)
}

// decodeInput detects the encoding of r by its first bytes and returns the
// decompressed text, limited to limit bytes.
func decodeInput(r io.Reader, limit int64) (*decodedInput, error) {
	br := inputReaders.Get().(*bufio.Reader)
	br.Reset(sourceReader{r})
	head, err := br.Peek(4)
	if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
		return nil, err
	}
	in := &decodedInput{close: func() {}}
	defer func() {
		// Once the input is closed nothing reads br: it is reused.
		inner := in.close
		in.close = func() {
			inner()
			br.Reset(nil)
			inputReaders.Put(br)
		}
	}()
	switch {
	case bytes.HasPrefix(head, zstdMagic):
		in.encoding = EncodingZstd
		if h, err := zstdHeaderSize(br); err == nil {
			in.hint = h
		}
		zr, err := newZstdDecoder(br, limit)
		if err != nil {
			return nil, corrupt("cannot start decompression", err)
		}
		in.Reader, in.close = zr, zr.Close
	case bytes.HasPrefix(head, gzipMagic):
		in.encoding = EncodingGzip
		gr, err := gzip.NewReader(br)
		if err != nil {
			if re := (*readError)(nil); errors.As(err, &re) {
				return nil, err
			}
			return nil, corrupt("not a valid gzip stream", err)
		}
		in.Reader, in.close = gr, func() { gr.Close() }
	default:
		in.encoding = EncodingPlain
		if bytes.HasPrefix(head, utf8BOM[:min(len(head), 3)]) && len(head) >= 3 {
			br.Discard(3)
		}
		sample, _ := br.Peek(br.Size())
		in.dense = density(sample)
		in.Reader = br
	}
	in.Reader = &limitReader{r: in.Reader, left: limit, limit: limit}
	return in, nil
}

// density returns the share of b that is not whitespace between JSON
// tokens: about the share of a plain-JSON input that its canonical form keeps
// (an indented export is about two-thirds dense).
func density(b []byte) float64 {
	if len(b) == 0 {
		return 1
	}
	ws := 0
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\n' || c == '\t' || c == '\r':
			ws++
		}
	}
	return float64(len(b)-ws) / float64(len(b))
}

// zstdHeaderSize reads the frame content size from a zstd frame header, if
// the header has one.
func zstdHeaderSize(br *bufio.Reader) (int64, error) {
	b, err := br.Peek(18)
	if err != nil && len(b) < 6 {
		return 0, errors.New("short header")
	}
	var h zstd.Header
	if err := h.Decode(b); err != nil {
		return 0, err
	}
	if !h.HasFCS {
		return 0, errors.New("no content size")
	}
	return int64(h.FrameContentSize), nil
}

// corrupt returns a bundle_corrupt error.
func corrupt(what string, err error) error {
	if err != nil {
		return messages.Errorf(messages.BundleCorrupt, "%s: %w", what, err)
	}
	return messages.Errorf(messages.BundleCorrupt, "%s", what)
}
