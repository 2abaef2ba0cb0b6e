package bundle

import (
	"bytes"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/pyrula/caseworker/messages"
)

// newZstdEncoder returns the encoder of large stored and exported blobs:
// the default level, frame checksum on, and one frame whose sections of
// 2 MiB are compressed on every core at once (each section's matches may
// reach into the one before). The window is 512 KiB: JSON repeats itself
// at short range (keys, the shape of results), so the blob of a 132 MB
// bundle comes out no larger than with the default 8 MiB, and the sections
// in flight stay small (peak RSS of an import unchanged; larger windows
// make larger sections: 8 MiB ones added 0.3× the bundle's size).
func newZstdEncoder(w io.Writer) (*zstd.Encoder, error) {
	return zstd.NewWriter(w,
		zstd.WithEncoderLevel(zstd.SpeedDefault),
		zstd.WithEncoderCRC(true),
		zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)),
		zstd.WithConcurrentBlocks(true),
		zstd.WithWindowSize(512<<10),
	)
}

// smallBlob is the size under which a blob is compressed in one call by a
// shared encoder: starting a streaming encoder costs more than compressing
// a small bundle.
const smallBlob = 4 << 20

var (
	sharedEncoderOnce sync.Once
	sharedEncoder     *zstd.Encoder
)

// WriteBlob writes the zstd blob of the canonical bytes to w: one frame
// whose header carries the content size.
func (c *Canonical) WriteBlob(w io.Writer) error {
	if c.blobAside {
		<-c.hashed
		if c.asideErr != nil {
			return c.asideErr
		}
	}
	if c.blob != nil {
		_, err := c.blob.WriteTo(w)
		return err
	}
	if c.size <= smallBlob {
		sharedEncoderOnce.Do(func() {
			sharedEncoder, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault),
				zstd.WithEncoderCRC(true), zstd.WithEncoderConcurrency(1))
		})
		_, err := w.Write(sharedEncoder.EncodeAll(c.Bytes(), nil))
		return err
	}
	enc, err := newZstdEncoder(nil)
	if err != nil {
		return fmt.Errorf("bundle: compress: %w", err)
	}
	enc.ResetContentSize(w, c.size)
	if _, err := c.WriteTo(enc); err != nil {
		enc.Close()
		return fmt.Errorf("bundle: compress: %w", err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("bundle: compress: %w", err)
	}
	return nil
}

// Blob returns a reader of the zstd blob, compressed as it is read. Closing
// it early stops the compression.
func (c *Canonical) Blob() io.ReadCloser {
	if !c.blobAside && c.blob != nil {
		return io.NopCloser(c.blob.reader())
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(c.WriteBlob(pw)) }()
	return pr
}

// verifyingReader decompresses a stored blob and hashes what it returns.
type verifyingReader struct {
	blob  io.Reader
	dec   *zstd.Decoder
	h     *asyncHasher
	want  Hash
	n     int64
	limit int64
	err   error // sticky
}

// NewVerifyingReader returns the canonical bytes of a stored zstd blob,
// decompressing as it is read. It refuses more than MaxCanonicalSize bytes and,
// at the end, reports bundle_corrupt instead of io.EOF when the bytes do not
// hash to want (or the blob does not decompress). Read it to the end before
// trusting anything it returned. An error of blob itself is returned as it
// is, without a code.
func NewVerifyingReader(blob io.Reader, want Hash) io.ReadCloser {
	return &verifyingReader{blob: blob, h: newAsyncHasher(), want: want, limit: MaxCanonicalSize}
}

func (v *verifyingReader) start() error {
	var head [zstd.HeaderMaxSize]byte
	n, err := io.ReadFull(v.blob, head[:])
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return err
	}
	if !bytes.HasPrefix(head[:n], zstdMagic) {
		return messages.Errorf(messages.BundleCorrupt, "bundle %s: stored bytes are not a zstd frame (re-export it)", v.want.Short())
	}
	// A long bundle's hasher starts now, so that its goroutine runs by the
	// time the first piece is decompressed (waking the other core takes
	// about as long as decompressing that piece).
	var h zstd.Header
	if h.Decode(head[:n]) == nil && h.HasFCS && h.FrameContentSize > hashInline {
		v.h.start()
	}
	dec, err := getStoredDecoder()
	if err != nil {
		return fmt.Errorf("bundle: decompress: %w", err)
	}
	if err := dec.Reset(io.MultiReader(bytes.NewReader(head[:n]), sourceReader{v.blob})); err != nil {
		putStoredDecoder(dec)
		return messages.Errorf(messages.BundleCorrupt, "bundle %s does not decompress: %w", v.want.Short(), err)
	}
	v.dec = dec
	return nil
}

// Read implements io.Reader.
func (v *verifyingReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	if v.dec == nil {
		if err := v.start(); err != nil {
			v.err = err
			return 0, err
		}
	}
	n, err := v.dec.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if v.n > v.limit {
		v.err = messages.Errorf(messages.BundleCorrupt, "bundle %s decompresses to more than %d bytes", v.want.Short(), v.limit)
		return 0, v.err
	}
	switch {
	case err == io.EOF:
		v.err = v.end(nil)
		if v.err != io.EOF {
			return n, v.err
		}
	case err != nil:
		v.err = v.end(err)
		return n, v.err
	}
	return n, nil
}

// end is the verdict at the end of the stream, when the decoder stopped
// with err (nil at the end of the frame): io.EOF when the bytes hash to
// the bundle's name, else bundle_corrupt, or the blob's own read error.
func (v *verifyingReader) end(err error) error {
	if err == nil {
		got := v.h.Sum()
		if subtle.ConstantTimeCompare([]byte(got), []byte(v.want)) != 1 {
			return messages.Errorf(messages.BundleCorrupt, "bundle %s: stored bytes hash to %s (re-export it)", v.want.Short(), got.Short())
		}
		return io.EOF
	}
	var re *readError
	if errors.As(err, &re) {
		return fmt.Errorf("bundle %s: read: %w", v.want.Short(), re.err)
	}
	return messages.Errorf(messages.BundleCorrupt, "bundle %s does not decompress: %w", v.want.Short(), err)
}

// WriteTo implements io.WriterTo: the decoder writes each decompressed block
// straight to w (no copy through a caller's small buffer, which is what
// io.Copy to io.Discard would use) while the hasher's goroutine hashes the
// block before. Its errors are those Read would return; an error of w is
// returned as it is.
func (v *verifyingReader) WriteTo(w io.Writer) (int64, error) {
	if v.err != nil {
		if v.err == io.EOF {
			return 0, nil
		}
		return 0, v.err
	}
	if v.dec == nil {
		if err := v.start(); err != nil {
			v.err = err
			return 0, err
		}
	}
	tw := &verifyingWriter{v: v, w: w}
	n, err := v.dec.WriteTo(tw)
	if tw.err != nil {
		v.err = tw.err
		return n, tw.err
	}
	v.err = v.end(err)
	if v.err == io.EOF {
		return n, nil
	}
	return n, v.err
}

// verifyingWriter is what the decoder writes to in WriteTo: it counts
// against the limit, hands the block to the hasher and then to w.
type verifyingWriter struct {
	v   *verifyingReader
	w   io.Writer
	err error // the limit's or w's; it stops the decoder
}

func (t *verifyingWriter) Write(p []byte) (int, error) {
	v := t.v
	v.n += int64(len(p))
	if v.n > v.limit {
		t.err = messages.Errorf(messages.BundleCorrupt, "bundle %s decompresses to more than %d bytes", v.want.Short(), v.limit)
		return 0, t.err
	}
	v.h.Write(p)
	n, err := t.w.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		t.err = err
	}
	return n, err
}

// Close implements io.Closer; it releases the decoder (not the blob).
func (v *verifyingReader) Close() error {
	v.h.stop()
	if v.dec != nil {
		putStoredDecoder(v.dec)
		v.dec = nil
	}
	if v.err == nil {
		v.err = errors.New("bundle: read after close")
	}
	return nil
}

// Verify reads a stored blob to the end and checks that it is the bundle
// named want; it returns nil or the verifying reader's error.
func Verify(blob io.Reader, want Hash) error {
	r := NewVerifyingReader(blob, want)
	defer r.Close()
	_, err := io.Copy(io.Discard, r)
	return err
}

// pieces is a blob held in pieces of up to blobPiece bytes: it grows
// without copying what it holds (a bytes.Buffer doubles, and holds up to
// three times the blob at once while it grows).
type pieces [][]byte

// blobPiece is the size of a pieces' piece.
const blobPiece = 1 << 20

// Write appends p.
func (b *pieces) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if k := len(*b); k == 0 || len((*b)[k-1]) == cap((*b)[k-1]) {
			*b = append(*b, make([]byte, 0, blobPiece))
		}
		last := &(*b)[len(*b)-1]
		m := copy((*last)[len(*last):cap(*last)], p)
		*last, p = (*last)[:len(*last)+m], p[m:]
	}
	return n, nil
}

// WriteTo writes the pieces to w in order.
func (b pieces) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for _, p := range b {
		m, err := w.Write(p)
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// reader reads the pieces in order.
func (b pieces) reader() io.Reader {
	rs := make([]io.Reader, len(b))
	for i, p := range b {
		rs[i] = bytes.NewReader(p)
	}
	return io.MultiReader(rs...)
}
