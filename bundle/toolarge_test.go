package bundle_test

import (
	"bytes"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/bundle/bundletest"
	"github.com/pyrula/caseworker/messages"
)

// counting counts the bytes read through it; it hides the length of what it
// reads, as a pipe does.
type counting struct {
	r io.Reader
	n int64
}

func (c *counting) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// sized is counting with the length known, as a file's or a bytes.Reader's.
type sized struct {
	counting
	size int
}

func (s *sized) Len() int { return s.size - int(s.n) }

// withLongString returns a bundle whose inputs hold a string of n bytes.
func withLongString(n int) []byte {
	b := bundletest.Generate(4<<10, 1)
	const inputs = `"inputs":{"n":1}`
	if !bytes.Contains(b, []byte(inputs)) {
		panic("bundletest.Generate writes no " + inputs)
	}
	return bytes.Replace(b, []byte(inputs), []byte(`"inputs":{"n":1,"s":"`+strings.Repeat("x", n)+`"}`), 1)
}

// zstdStream writes b as a zstd stream: a frame that does not say its
// size. Its window is under the limit of TestTooLargeRefusedEarly, as a
// decoder holds a window of its own (8 MiB by default).
func zstdStream(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf, zstd.WithWindowSize(512<<10))
	if err != nil {
		t.Fatal(err)
	}
	enc.Write(b)
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestTooLargeRefusedEarly: a bundle over the canonical limit is refused
// from a running count of its canonical bytes as soon as they pass the
// limit, in every encoding and along every path of Read (the general path,
// on several goroutines for a large input, the fast path of canonical
// input, and a zstd blob read whole): the input is read no further than
// about the limit, and about as much memory is allocated as for a bundle
// at the limit, whatever the input's size (16 times the limit here, a long
// string 16 times the limit among them: the decoder keeps a token whole
// while it reads it). Not parallel: it measures the allocations of the
// process.
func TestTooLargeRefusedEarly(t *testing.T) {
	const (
		limit = 1 << 20
		big   = 16 << 20
		// The most read: the limit, what the fast path reads past it, the
		// runs canonicalised ahead, the decoders' buffers (1 MiB at most).
		mostRead = 4 * limit
		// The most allocated: the canonical buffer and the raw bytes of the
		// fast path (the limit each), the runs ahead and their output, the
		// decoders' buffers and state, which do not grow with the input.
		mostAlloc = 12 * limit
	)
	generated := bundletest.Generate(big, 9)
	read := func(b []byte) *bundle.Canonical {
		t.Helper()
		c, err := bundle.Read(bytes.NewReader(b), bundle.Options{MaxCanonicalSize: 2 * big})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	canonical := read(generated)
	long := read(withLongString(big))
	// A zstd blob is read whole (it is far smaller than the limit) and
	// decompressed: one the fast path takes.
	small := read(bundletest.Generate(6*limit, 9))
	var blob bytes.Buffer
	if err := small.WriteBlob(&blob); err != nil {
		t.Fatal(err)
	}
	var longBlob bytes.Buffer
	if err := long.WriteBlob(&longBlob); err != nil {
		t.Fatal(err)
	}
	if blob.Len() >= limit || longBlob.Len() >= limit {
		t.Fatalf("the zstd blobs are %d and %d bytes, not under %d", blob.Len(), longBlob.Len(), limit)
	}
	forms := []struct {
		name       string
		in         []byte
		compressed bool
	}{
		{"json", generated, false},
		{"canonical", canonical.Bytes(), false},
		{"json long string", withLongString(big), false},
		{"canonical long string", long.Bytes(), false},
		{"zstd", blob.Bytes(), true},
		{"zstd long string", longBlob.Bytes(), true},
		{"zstd stream", zstdStream(t, small.Bytes()), true},
		{"zstd stream long string", zstdStream(t, long.Bytes()), true},
		{"gzip", gzipOf(t, generated), true},
		{"gzip long string", gzipOf(t, long.Bytes()), true},
	}
	for _, f := range forms {
		for _, withLen := range []bool{false, true} {
			name := f.name
			var r io.Reader
			c := &counting{r: bytes.NewReader(f.in)}
			r = c
			if withLen {
				name += " sized"
				s := &sized{counting: counting{r: bytes.NewReader(f.in)}, size: len(f.in)}
				r, c = s, &s.counting
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := bundle.Read(r, bundle.Options{MaxCanonicalSize: limit})
			runtime.ReadMemStats(&after)
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%s: read %d of %d, allocated %d", name, c.n, len(f.in), alloc)
			if code, _ := messages.CodeOf(err); code != messages.BundleTooLarge {
				t.Errorf("%s: error %v, want bundle_too_large", name, err)
				continue
			}
			if !f.compressed && c.n > mostRead {
				t.Errorf("%s: read %d bytes of %d to refuse it over %d", name, c.n, len(f.in), limit)
			}
			if alloc > mostAlloc {
				t.Errorf("%s: allocated %d bytes to refuse an input of %d bytes over %d", name, alloc, len(f.in), limit)
			}
		}
	}
}

// TestTooLargeExact: the running count is the canonical size exactly, on
// every path: a bundle of n canonical bytes is read with a limit of n and
// refused with n-1, large enough to be read on several goroutines and
// compressed while it is read.
func TestTooLargeExact(t *testing.T) {
	t.Parallel()
	generated := bundletest.Generate(9<<20, 3)
	c, err := bundle.Read(bytes.NewReader(generated), bundle.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var blob bytes.Buffer
	if err := c.WriteBlob(&blob); err != nil {
		t.Fatal(err)
	}
	size := c.Size()
	for name, in := range map[string][]byte{
		"json":        generated,
		"canonical":   c.Bytes(),
		"zstd":        blob.Bytes(),
		"zstd stream": zstdStream(t, c.Bytes()),
		"gzip":        gzipOf(t, generated),
	} {
		for _, withLen := range []bool{false, true} {
			for _, compress := range []bool{false, true} {
				read := func(limit int64) (*bundle.Canonical, error) {
					var r io.Reader = &counting{r: bytes.NewReader(in)}
					if withLen {
						r = bytes.NewReader(in)
					}
					return bundle.Read(r, bundle.Options{MaxCanonicalSize: limit, Compress: compress})
				}
				got, err := read(size)
				if err != nil || got.Hash() != c.Hash() {
					t.Fatalf("%s (length known %v, compress %v): at the limit: %v", name, withLen, compress, err)
				}
				_, err = read(size - 1)
				if code, _ := messages.CodeOf(err); code != messages.BundleTooLarge {
					t.Fatalf("%s (length known %v, compress %v): one byte over the limit: %v", name, withLen, compress, err)
				}
			}
		}
	}
}
