package bundle_test

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/messages"
)

// FuzzReadEncodings: an import reads the same whatever its encoding: the
// JSON text as plain JSON (after an optional BOM), gzipped and in a zstd
// frame gives the same bundle (hash) or the same reason code, and the
// encoding is reported.
//
//	go test -run '^$' -fuzz FuzzReadEncodings -fuzztime 30s ./bundle/
func FuzzReadEncodings(f *testing.F) {
	for _, name := range goldenCases {
		b, err := os.ReadFile(filepath.Join("testdata", name+".input.json"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("\xef\xbb\xbf{}"))
	f.Add([]byte(`{"format":"pyrula.case-bundle/v1"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, text []byte) {
		if bytes.HasPrefix(text, []byte{0x28, 0xb5, 0x2f, 0xfd}) || bytes.HasPrefix(text, []byte{0x1f, 0x8b}) {
			return // read as compressed, not as JSON text
		}
		opts := bundle.Options{MaxCanonicalSize: 1 << 20, MaxInputSize: 4 << 20}
		plain, plainErr := bundle.Read(bytes.NewReader(text), opts)
		text = bytes.TrimPrefix(text, []byte("\xef\xbb\xbf")) // a BOM is for plain JSON only
		for enc, in := range map[bundle.Encoding][]byte{bundle.EncodingGzip: fuzzGzip(t, text), bundle.EncodingZstd: fuzzZstd(t, text)} {
			c, err := bundle.Read(bytes.NewReader(in), opts)
			switch {
			case (err == nil) != (plainErr == nil):
				t.Fatalf("plain JSON: %v; %s: %v", plainErr, enc, err)
			case err != nil:
				pc, _ := messages.CodeOf(plainErr)
				if code, ok := messages.CodeOf(err); !ok || code != pc {
					t.Fatalf("plain JSON: %v; %s: %v", plainErr, enc, err)
				}
			case c.Hash() != plain.Hash() || c.Encoding() != enc || plain.Encoding() != bundle.EncodingPlain:
				t.Fatalf("plain JSON: %s (%s); %s: %s (%s)", plain.Hash(), plain.Encoding(), enc, c.Hash(), c.Encoding())
			}
		}
	})
}

func fuzzGzip(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// fuzzZstd is b in one zstd frame with its content size and checksum, as
// export writes.
func fuzzZstd(t testing.TB, b []byte) []byte {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}
