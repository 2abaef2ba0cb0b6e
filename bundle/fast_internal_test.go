package bundle

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/klauspost/compress/zstd"

	"github.com/pyrula/caseworker/bundle/bundletest"
)

var fastGolden = []string{"workflow", "agent", "inputs_only"}

// The fast path takes the canonical golden bundles, plain and compressed.
func TestReadFastTakesCanonical(t *testing.T) {
	for _, name := range fastGolden {
		canon, err := os.ReadFile(filepath.Join("testdata", name+".canonical.json"))
		if err != nil {
			t.Fatal(err)
		}
		canon = bytes.TrimRight(canon, "\n")
		if _, ok := readCanonicalFast(canon, Options{}, nil); !ok {
			t.Errorf("%s: the fast path refused the canonical bytes", name)
		}
		for _, in := range [][]byte{canon, zstdOf(canon)} {
			c, err := Read(bytes.NewReader(in), Options{})
			if err != nil || !bytes.Equal(c.Bytes(), canon) {
				t.Fatalf("%s: %v", name, err)
			}
			// The fast path keeps the input as the canonical buffer: the
			// plain input is not copied.
			if c.encoding == EncodingPlain && &c.buf[0] == &in[0] {
				t.Fatalf("%s: canonical bytes alias the caller's input", name)
			}
		}
	}
}

var testEncoder, _ = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))

var testDecoder, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))

func zstdOf(b []byte) []byte { return testEncoder.EncodeAll(b, nil) }

// FuzzReadFast: Read with the fast path gives exactly what the general
// path gives for the same input (plain and in a zstd frame): the same
// canonical bytes, hash, summary, manifest and encoding, or the same error.
//
//	go test -run '^$' -fuzz FuzzReadFast -fuzztime 60s ./bundle/
func FuzzReadFast(f *testing.F) {
	for _, name := range fastGolden {
		for _, form := range []string{".canonical.json", ".input.json"} {
			b, err := os.ReadFile(filepath.Join("testdata", name+form))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(bytes.TrimRight(b, "\n"))
		}
	}
	f.Add([]byte(`{"history":[],"manifest":{},"results":[]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		opts := Options{MaxCanonicalSize: 1 << 20, MaxInputSize: 4 << 20}
		general := opts
		general.general = true
		// The fast path spilled from the first byte (plain input read, a
		// blob decompressed, into the spill) gives the same.
		spilled := opts
		spilled.SpillDir, spilled.spillAt, spilled.Compress = t.TempDir(), 1, true
		// A blob checked while it is decompressed, 7 bytes at a time.
		fed := opts
		fed.feedAt, fed.feedStep, fed.Decode = 1, 7, true
		for _, src := range [][]byte{in, zstdOf(in)} {
			want, wantErr := Read(bytes.NewReader(src), general)
			for _, o := range []Options{opts, spilled, fed} {
				got, gotErr := Read(bytes.NewReader(src), o)
				if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
					t.Fatalf("fast path (spill %q) error %v, general path error %v", o.SpillDir, gotErr, wantErr)
				}
				if gotErr != nil {
					continue
				}
				if !bytes.Equal(got.Bytes(), want.Bytes()) || got.Hash() != want.Hash() || got.Size() != want.Size() ||
					got.Encoding() != want.Encoding() || !reflect.DeepEqual(got.Summary(), want.Summary()) ||
					!reflect.DeepEqual(got.Manifest(), want.Manifest()) {
					t.Fatalf("fast path (spill %q) differs:\n%s\n%s", o.SpillDir, got.Bytes(), want.Bytes())
				}
				var blob bytes.Buffer
				if err := got.WriteBlob(&blob); err != nil {
					t.Fatal(err)
				}
				if back, err := testDecoder.DecodeAll(blob.Bytes(), nil); err != nil || !bytes.Equal(back, want.Bytes()) {
					t.Fatalf("fast path (spill %q): the blob does not decompress to the canonical bytes (%v)", o.SpillDir, err)
				}
			}
		}
		runtime.GC() // the spills are unmapped and their files closed once collected
	})
}

// TestReadFastHashesAside: a canonical input large enough to be hashed on a
// second goroutine gets the hash the general path gives, and the fast path
// took it.
func TestReadFastHashesAside(t *testing.T) {
	g, err := Read(bytes.NewReader(bundletest.Generate(2*hashAsideFrom, 3)), Options{general: true})
	if err != nil {
		t.Fatal(err)
	}
	canon := g.Bytes()
	if len(canon) < hashAsideFrom {
		t.Fatalf("the test bundle is %d bytes, under %d", len(canon), hashAsideFrom)
	}
	fast, ok := readCanonicalFast(canon, Options{}, nil)
	if !ok || fast.Hash() != g.Hash() || fast.Hash() != HashBytes(canon) {
		t.Fatalf("fast path: ok %v, hash %s, want %s", ok, fast.Hash(), g.Hash())
	}
}

// A frame written as a stream does not say its size: decompressAtMost sizes
// its output from the block headers, an upper bound within one block, and
// still gives the bytes back exactly (compressed, raw and RLE blocks, an
// empty frame).
func TestDecompressStreamFrame(t *testing.T) {
	random := make([]byte, 300<<10)
	for i := range random {
		random[i] = byte(i*7919 ^ i>>3*131)
	}
	text := bytes.Repeat([]byte(`{"id":1,"items":["a","b"],"status":"shipped"},`), 20000)
	for name, in := range map[string][]byte{
		"text":   text,
		"random": random,
		"zeros":  make([]byte, 1<<20),
		"mixed":  append(append(append([]byte{}, text[:200<<10]...), make([]byte, 300<<10)...), random...),
		"empty":  {},
	} {
		var blob bytes.Buffer
		enc, err := zstd.NewWriter(&blob, zstd.WithEncoderConcurrency(1))
		if err != nil {
			t.Fatal(err)
		}
		enc.Write(in)
		if err := enc.Close(); err != nil {
			t.Fatal(err)
		}
		var h zstd.Header
		if err := h.Decode(blob.Bytes()); err != nil || h.HasFCS {
			t.Fatalf("%s: the stream encoder wrote a size (%v)", name, err)
		}
		bound, ok := frameBound(blob.Bytes(), h)
		if len(in) > 0 && (!ok || bound < int64(len(in)) || bound > int64(len(in))+128<<10) {
			t.Fatalf("%s: bound %d (ok %v) for %d bytes", name, bound, ok, len(in))
		}
		out, err := decompressAtMost(blob.Bytes(), int64(len(in))+1<<20, int64(len(in))+2<<20)
		if err != nil || !bytes.Equal(out, in) {
			t.Fatalf("%s: %v (%d bytes of %d)", name, err, len(out), len(in))
		}
		if _, ok := frameBound(blob.Bytes()[:blob.Len()-5], h); ok && len(in) > 0 {
			t.Fatalf("%s: a cut frame has a bound", name)
		}
	}
}

// counted hides the length of what it reads, as a pipe does.
type counted struct{ r *bytes.Reader }

func (c counted) Read(p []byte) (int, error) { return c.r.Read(p) }

// A canonical input over the limit is refused by the fast path from the
// whole pieces at its start (canonicalPrefix) with the verdict the general
// path gives: bundle_too_large when the limit is passed before anything
// wrong, bundle_corrupt when something wrong comes first, whether the
// input's length is known or not, plain or in a zstd frame.
func TestReadFastOverLimitAgrees(t *testing.T) {
	g, err := Read(bytes.NewReader(bundletest.Generate(1<<20, 4)), Options{general: true})
	if err != nil {
		t.Fatal(err)
	}
	canon := g.Bytes()
	const limit = 256 << 10
	// at returns canon with the element around offset off broken: its
	// first '{' (after off) becomes '['.
	at := func(off int) []byte {
		b := bytes.Clone(canon)
		i := off + bytes.IndexByte(b[off:], '{')
		b[i] = '['
		return b
	}
	// outOfOrder swaps two results near the end: results out of order,
	// which the fast path leaves to the general path.
	outOfOrder := func() []byte {
		b := bytes.Clone(canon)
		i := bytes.LastIndex(b, []byte(`,{"fingerprint"`))
		j := bytes.LastIndex(b[:i], []byte(`,{"fingerprint"`))
		k := bytes.LastIndex(b[:j], []byte(`,{"fingerprint"`))
		return append(append(append(append([]byte{}, b[:k]...), b[j:i]...), b[k:j]...), b[i:]...)
	}
	for name, in := range map[string][]byte{
		"canonical":            canon,
		"broken before":        at(limit / 2),
		"broken after":         at(limit + 64<<10),
		"broken far after":     at(len(canon) - 4096),
		"results out of order": outOfOrder(),
	} {
		opts := Options{MaxCanonicalSize: limit}
		general := opts
		general.general = true
		spilled := opts
		spilled.SpillDir, spilled.spillAt = t.TempDir(), 1
		fed := opts
		fed.feedAt, fed.feedStep = 1, 4096
		for _, src := range [][]byte{in, zstdOf(in)} {
			_, want := Read(bytes.NewReader(src), general)
			for _, o := range []Options{opts, spilled, fed} {
				for _, r := range []io.Reader{bytes.NewReader(src), counted{bytes.NewReader(src)}} {
					_, got := Read(r, o)
					if got == nil || want == nil || got.Error() != want.Error() {
						t.Errorf("%s (%T, spill %q): fast path %v, general path %v", name, r, o.SpillDir, got, want)
					}
				}
			}
		}
	}
}

// TestDecodeAliasesCanonicalInput: a canonical input read as it is
// decodes without a copy (its raw values are slices of the input) to the
// bundle the general path decodes from its own copy; a bundle read by the
// general path, out of canonical order, still decodes from a copy.
func TestDecodeAliasesCanonicalInput(t *testing.T) {
	in := bundletest.Generate(64<<10, 5)
	g, err := Read(bytes.NewReader(in), Options{general: true})
	if err != nil {
		t.Fatal(err)
	}
	canon := g.Bytes()
	fast, err := Read(bytes.NewReader(canon), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := g.Decode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := fast.Decode()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatal("the bundle decoded in place differs from the general path's")
	}
	within := func(raw []byte, buf []byte) bool {
		if len(raw) == 0 || len(buf) == 0 {
			return false
		}
		start, end := uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&buf[len(buf)-1]))
		p := uintptr(unsafe.Pointer(&raw[0]))
		return p >= start && p <= end
	}
	if len(got.Results) == 0 || !within(got.Results[0].Result, fast.buf) {
		t.Fatal("a canonical input read in place was copied to decode")
	}
	if within(want.Results[0].Result, g.buf) {
		t.Fatal("the general path's decode aliases its buffer")
	}
}

// TestReadDecodes: with Options.Decode the fast path decodes the results
// as it checks them, and Decode takes them (once) to give what the general
// path decodes; a result with a member Decode does not expect, or a
// spilled bundle, is decoded from the bytes instead, to the same bundle.
func TestReadDecodes(t *testing.T) {
	g, err := Read(bytes.NewReader(bundletest.Generate(64<<10, 5)), Options{general: true})
	if err != nil {
		t.Fatal(err)
	}
	canon := g.Bytes()
	want, err := g.Decode()
	if err != nil {
		t.Fatal(err)
	}
	odd := bytes.Replace(canon, []byte(`{"fingerprint":`), []byte(`{"extra":1,"fingerprint":`), 1)
	wantOdd, err := Read(bytes.NewReader(odd), Options{general: true})
	if err != nil {
		t.Fatal(err)
	}
	wantOddB, err := wantOdd.Decode()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		in      []byte
		opts    Options
		decoded bool
		want    *Bundle
	}{
		{"canonical", canon, Options{Decode: true}, true, want},
		{"compressed", zstdOf(canon), Options{Decode: true}, true, want},
		{"without Decode", canon, Options{}, false, want},
		{"an unexpected member", odd, Options{Decode: true}, false, wantOddB},
		{"spilled", canon, Options{Decode: true, SpillDir: t.TempDir(), spillAt: 1}, false, want},
	} {
		c, err := Read(bytes.NewReader(tc.in), tc.opts)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := c.decoded.Load() != nil; got != tc.decoded {
			t.Fatalf("%s: results decoded as read: %v, want %v", tc.name, got, tc.decoded)
		}
		for i := range 2 {
			got, err := c.Decode()
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("%s: Decode %d: %v, or the bundle differs from the general path's", tc.name, i, err)
			}
		}
		if c.decoded.Load() != nil {
			t.Fatalf("%s: Decode left the decoded results behind", tc.name)
		}
	}
}

// TestReadDecodesSizesBySmallFirst: a small first result before large ones
// sizes the decoded results' slice by the bundle's bytes, not by its own
// size: the slice never takes more than half the bundle's size.
func TestReadDecodesSizesBySmallFirst(t *testing.T) {
	fork := int64(0)
	b := &Bundle{Manifest: Manifest{Format: Format, Kind: KindWorkflow, TargetName: "t", CodeVersion: "v1",
		ForkAfterSeq: &fork, Inputs: []byte(`{}`), Registration: Registration{}, Source: Source{RunID: "r"}}}
	fp := strings.Repeat("0", 64)
	b.Results = append(b.Results, Result{Key: "0", Kind: "interrupt", Fingerprint: fp, Result: []byte(`1`)})
	large := []byte(`"` + strings.Repeat("x", 4096) + `"`)
	for i := range 200 {
		b.Results = append(b.Results, Result{Key: fmt.Sprint(i), Kind: "model", Fingerprint: fp, Result: large})
	}
	enc, err := Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Read(bytes.NewReader(enc.Bytes()), Options{Decode: true})
	if err != nil {
		t.Fatal(err)
	}
	results := c.decoded.Load()
	if results == nil || len(*results) != 201 {
		t.Fatal("the results were not decoded as read")
	}
	if slots := int64(cap(*results)) * int64(unsafe.Sizeof(Result{})); slots > c.Size()/2 {
		t.Fatalf("%d result slots (%d bytes) for a bundle of %d bytes", cap(*results), slots, c.Size())
	}
}
