package bundle_test

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/messages"
)

// FuzzRead: malformed input never panics and always yields a reason code;
// what is accepted round-trips through every form with the same hash.
//
//	go test -run '^$' -fuzz FuzzRead -fuzztime 60s ./bundle/
func FuzzRead(f *testing.F) {
	for _, name := range goldenCases {
		for _, form := range []string{".input.json", ".canonical.json", ".indented.json"} {
			b, err := os.ReadFile(filepath.Join("testdata", name+form))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
		b, err := os.ReadFile(filepath.Join("testdata", name+".input.json"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(fuzzGzip(f, b)) // the other encodings of an import
		f.Add(fuzzZstd(f, b))
	}
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd, 0, 0, 0})
	f.Add([]byte{0x1f, 0x8b, 8, 0})
	f.Add([]byte("\xef\xbb\xbf{}"))
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := bundle.Read(bytes.NewReader(in), bundle.Options{MaxCanonicalSize: 1 << 20, MaxInputSize: 4 << 20})
		if err != nil {
			if _, ok := messages.CodeOf(err); !ok {
				t.Fatalf("error without a reason code: %v", err)
			}
			return
		}
		canon := c.Bytes()
		if bundle.HashBytes(canon) != c.Hash() {
			t.Fatal("hash is not the SHA-256 of the canonical bytes")
		}
		// Decode's fast path gives what encoding/json gives.
		fast, err := c.Decode()
		var ref bundle.Bundle
		if refErr := json.Unmarshal(canon, &ref); (err == nil) != (refErr == nil) {
			t.Fatalf("Decode error %v, encoding/json error %v", err, refErr)
		} else if err == nil && !reflect.DeepEqual(*fast, ref) {
			t.Fatalf("Decode differs from encoding/json:\n%+v\n%+v", *fast, ref)
		}
		// Decoded as it is read (Options.Decode), the same.
		dc, err := bundle.Read(bytes.NewReader(in), bundle.Options{MaxCanonicalSize: 1 << 20, MaxInputSize: 4 << 20, Decode: true})
		if err != nil {
			t.Fatalf("Read with Decode: %v", err)
		}
		if decoded, err := dc.Decode(); (err == nil) != (fast != nil) || err == nil && !reflect.DeepEqual(decoded, fast) {
			t.Fatalf("Decode of a Read with Decode: %v, or it differs from Decode", err)
		}
		// Canonical bytes are a fixed point.
		again, err := bundle.Read(bytes.NewReader(canon), bundle.Options{})
		if err != nil {
			t.Fatalf("canonical bytes do not read back: %v", err)
		}
		if !bytes.Equal(again.Bytes(), canon) {
			t.Fatalf("not a fixed point:\n%s\n%s", canon, again.Bytes())
		}
		// The blob and the indented form give the same hash back.
		var blob, ind bytes.Buffer
		if err := c.WriteBlob(&blob); err != nil {
			t.Fatal(err)
		}
		if err := bundle.Verify(bytes.NewReader(blob.Bytes()), c.Hash()); err != nil {
			t.Fatalf("blob does not verify: %v", err)
		}
		if err := c.WriteIndented(&ind); err != nil {
			t.Fatal(err)
		}
		fromInd, err := bundle.Read(bytes.NewReader(ind.Bytes()), bundle.Options{})
		if err != nil || fromInd.Hash() != c.Hash() {
			t.Fatalf("indented form reads back as %v, %v", fromInd, err)
		}
	})
}

// FuzzVerify: a stored blob with arbitrary bytes never panics and never
// verifies unless it is the bundle.
func FuzzVerify(f *testing.F) {
	b, err := os.ReadFile(filepath.Join("testdata", "workflow.canonical.json"))
	if err != nil {
		f.Fatal(err)
	}
	c, err := bundle.Read(bytes.NewReader(b), bundle.Options{})
	if err != nil {
		f.Fatal(err)
	}
	var blob bytes.Buffer
	c.WriteBlob(&blob)
	f.Add(blob.Bytes())
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd})
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := io.ReadAll(bundle.NewVerifyingReader(bytes.NewReader(in), c.Hash()))
		// WriteTo (what io.Copy uses) gives the same verdict as Read.
		var viaWriteTo bytes.Buffer
		_, errWriteTo := bundle.NewVerifyingReader(bytes.NewReader(in), c.Hash()).(io.WriterTo).WriteTo(&viaWriteTo)
		if (err == nil) != (errWriteTo == nil) {
			t.Fatalf("Read: %v, WriteTo: %v", err, errWriteTo)
		}
		if err == nil && !bytes.Equal(viaWriteTo.Bytes(), got) {
			t.Fatal("WriteTo wrote other bytes than Read returned")
		}
		if errWriteTo != nil {
			if code, ok := messages.CodeOf(errWriteTo); !ok || code != messages.BundleCorrupt {
				t.Fatalf("WriteTo error %v, want bundle_corrupt", errWriteTo)
			}
		}
		if err == nil {
			// Only a frame of the real bundle's bytes verifies.
			if !bytes.Equal(got, b) {
				t.Fatal("verified bytes that are not the bundle")
			}
			return
		}
		if code, ok := messages.CodeOf(err); !ok || code != messages.BundleCorrupt {
			t.Fatalf("error %v, want bundle_corrupt", err)
		}
	})
}
