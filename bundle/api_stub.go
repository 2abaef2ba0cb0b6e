package bundle

import (
	"encoding/json"
	"errors"
	"io"
)

// Limits of DESIGN.md §4.
const (
	// MaxCanonicalSize is the largest canonical bundle accepted at save and
	// import, and the most a stored blob may decompress to.
	MaxCanonicalSize int64 = 512 << 20
	// MaxInputSize bounds the decompressed bytes read from an imported file
	// (an indented export is larger than its canonical form).
	MaxInputSize int64 = 2 << 30
)

// Options tune Read; zero fields take the defaults.
type Options struct {
	// MaxCanonicalSize overrides the 512 MiB limit (tests use small limits).
	MaxCanonicalSize int64
	// MaxInputSize overrides the decompressed input limit.
	MaxInputSize int64
	// SizeHint is the expected canonical size, used to size buffers.
	SizeHint int64
}

// Canonical is a validated bundle held in canonical form, with its hash.
type Canonical struct {
	hash     Hash
	size     int64
	manifest Manifest
	summary  Summary
	segments [][]byte
}

var errTODO = errors.New("bundle: not implemented yet")

// Read reads a bundle in any accepted encoding (a zstd frame, a gzip stream or
// plain JSON with an optional UTF-8 byte-order mark, told apart by their first
// bytes), validates it and returns its canonical form. Errors carry reason
// codes: bundle_corrupt (undecodable or malformed), format_unsupported
// (unknown format or kind), bundle_too_large (over the limit).
func Read(r io.Reader, opts Options) (*Canonical, error) { return nil, errTODO }

// Encode canonicalises and validates a bundle built in Go types.
func Encode(b *Bundle) (*Canonical, error) {
	raw, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	_ = raw
	return nil, errTODO
}

// Hash returns the bundle's name.
func (c *Canonical) Hash() Hash { return c.hash }

// Size returns the length of the canonical bytes.
func (c *Canonical) Size() int64 { return c.size }

// Manifest returns the decoded manifest.
func (c *Canonical) Manifest() Manifest { return c.manifest }

// Summary returns the manifest_summary printed by save and import.
func (c *Canonical) Summary() Summary { return c.summary }

// WriteTo writes the canonical bytes to w.
func (c *Canonical) WriteTo(w io.Writer) (int64, error) { return 0, errTODO }

// WriteBlob writes the zstd blob of the canonical bytes to w.
func (c *Canonical) WriteBlob(w io.Writer) error { return errTODO }

// Blob returns a reader of the zstd blob, compressed as it is read.
func (c *Canonical) Blob() io.ReadCloser { return nil }

// WriteIndented writes the readable form (indented by two spaces, sorted
// keys, a final newline) that Read turns back into the same hash.
func (c *Canonical) WriteIndented(w io.Writer) error { return errTODO }

// Decode returns the whole bundle in Go types (for show).
func (c *Canonical) Decode() (*Bundle, error) { return nil, errTODO }

// NewVerifyingReader returns the canonical bytes of a stored zstd blob,
// decompressing as it is read. It refuses more than MaxCanonicalSize bytes and,
// at the end, reports bundle_corrupt instead of io.EOF when the bytes do not
// hash to want (or the blob does not decompress). Read it to the end before
// trusting anything it returned.
func NewVerifyingReader(blob io.Reader, want Hash) io.ReadCloser { return nil }
