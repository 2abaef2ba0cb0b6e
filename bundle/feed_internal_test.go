package bundle

import (
	"bytes"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/pyrula/caseworker/bundle/bundletest"
	"github.com/pyrula/caseworker/messages"
)

// fedReads counts the reads the feed gave (a test hook).
var fedReads atomic.Int64

func init() {
	feedTaken = func(ok bool) {
		if ok {
			fedReads.Add(1)
		}
	}
}

// blobOf compresses b as WriteBlob does: one frame that states its size.
func blobOf(t *testing.T, b []byte) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderCRC(true))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}

// canonicalOf is the general path's canonical bundle of input.
func canonicalOf(t *testing.T, input []byte) *Canonical {
	t.Helper()
	c, err := Read(bytes.NewReader(input), Options{general: true})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A blob of a large canonical bundle is checked while it is decompressed
// and gives the bytes, hash and decoded results the general path gives:
// with results that fit the pieces it asks for, and with one longer than
// a piece (checked again once all is there).
func TestReadFed(t *testing.T) {
	long := strings.Repeat("x", 3*feedPiece)
	for name, input := range map[string][]byte{
		"generated":   bundletest.Generate(3<<20, 7),
		"long result": bytes.Replace(bundletest.Generate(2<<20, 8), []byte(`lorem ipsum`), []byte(long), 1),
	} {
		t.Run(name, func(t *testing.T) {
			want := canonicalOf(t, input)
			if want.Size() < feedFrom {
				t.Fatalf("the bundle is %d bytes, under %d", want.Size(), feedFrom)
			}
			before := fedReads.Load()
			got, err := Read(bytes.NewReader(blobOf(t, want.Bytes())), Options{Decode: true})
			if err != nil {
				t.Fatal(err)
			}
			if fedReads.Load() != before+1 {
				t.Fatal("the feed did not give the bundle")
			}
			if !bytes.Equal(got.Bytes(), want.Bytes()) || got.Hash() != want.Hash() || got.Hash() != HashBytes(want.Bytes()) {
				t.Fatalf("hash %s, want %s (bytes equal: %v)", got.Hash(), want.Hash(), bytes.Equal(got.Bytes(), want.Bytes()))
			}
			b, err := got.Decode()
			if err != nil {
				t.Fatal(err)
			}
			w, err := want.Decode()
			if err != nil {
				t.Fatal(err)
			}
			if len(b.Results) != len(w.Results) || len(b.Results) == 0 {
				t.Fatalf("%d results decoded, want %d", len(b.Results), len(w.Results))
			}
			for i := range b.Results {
				if b.Results[i].Key != w.Results[i].Key || !bytes.Equal(b.Results[i].Result, w.Results[i].Result) {
					t.Fatalf("result %d: %s, want %s", i, b.Results[i].Key, w.Results[i].Key)
				}
			}
		})
	}
}

// What the feed does not accept goes to the general path, which gives its
// verdict: a bundle that is valid but not canonical is read (canonicalised),
// a bundle broken far from its start, or a frame cut short or damaged, is
// bundle_corrupt.
func TestReadFedRefusals(t *testing.T) {
	want := canonicalOf(t, bundletest.Generate(3<<20, 9))
	canon := want.Bytes()

	// Valid, not canonical: a space before the last result's closing bracket.
	loose := bytes.Clone(canon)
	end := bytes.LastIndex(loose, []byte(`]}`))
	loose = append(append(loose[:end:end], ' '), canon[end:]...)
	if got, err := Read(bytes.NewReader(blobOf(t, loose)), Options{Decode: true}); err != nil || got.Hash() != want.Hash() {
		t.Fatalf("a non-canonical bundle: %v (hash %v, want %s)", err, got, want.Hash())
	}

	// Broken near its end: a result's key is no longer a string.
	broken := bytes.Clone(canon)
	at := bytes.LastIndex(broken, []byte(`"key":"`))
	broken[at+6] = '7'
	_, err := Read(bytes.NewReader(blobOf(t, broken)), Options{Decode: true})
	wantCorrupt(t, "a broken bundle", err)

	blob := blobOf(t, canon)
	// A second frame after the one that states the bundle's size: all the
	// bytes the checks need are there, but the blob goes on (a space, which
	// the general path reads as white space after the bundle).
	two := append(bytes.Clone(blob), blobOf(t, []byte(" "))...)
	before := fedReads.Load()
	if got, err := Read(bytes.NewReader(two), Options{Decode: true}); err != nil || got.Hash() != want.Hash() || fedReads.Load() != before {
		t.Fatalf("two frames: %v (fed %d reads)", err, fedReads.Load()-before)
	}
	_, err = Read(bytes.NewReader(blob[:len(blob)*3/4]), Options{Decode: true})
	wantCorrupt(t, "a frame cut short", err)
	damaged := bytes.Clone(blob)
	damaged[len(damaged)/2] ^= 0xff
	_, err = Read(bytes.NewReader(damaged), Options{Decode: true})
	wantCorrupt(t, "a damaged frame", err)
}

func wantCorrupt(t *testing.T, what string, err error) {
	t.Helper()
	if code, _ := messages.CodeOf(err); code != messages.BundleCorrupt {
		t.Errorf("%s: %v, want bundle_corrupt", what, err)
	}
}
