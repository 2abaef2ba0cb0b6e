package bundle

// Limits of docs/bundle-format.md.
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
	// Compress makes Read also compress the bundle into its zstd blob, on a
	// second goroutine while it reads, when the input is in canonical order
	// (saves and imports set it; WriteBlob and Blob then use that blob).
	// Otherwise WriteBlob and Blob compress as they write.
	Compress bool
	// SpillDir, when set, is a directory where Read keeps the canonical
	// bytes of a bundle from 16 MiB in an unlinked temporary file mapped
	// into memory, whose pages it hands back to the kernel as it goes, so
	// that the process's resident memory stays well under the bundle's
	// size (imports set it). The file reserves room for the largest
	// bundle accepted (MaxCanonicalSize) while Read's Canonical lives; when
	// it cannot be made or reserved, on a tmpfs, or off Linux, the bytes
	// stay in memory.
	SpillDir string
	// Decode makes Read also decode the results as it checks them, when
	// the input is canonical as it is and kept in memory: Canonical.Decode
	// then takes them instead of reading the bytes a second time. Case
	// runs set it; what only stores, copies or summarises a bundle need not
	// (the decoded results take memory until Decode takes them).
	Decode bool

	// general skips the fast path for canonical input (Encode's input is
	// seldom canonical, and the fast path would hold a second copy of it).
	general bool
	// spillAt, when set, is the size from which Read spills (spillFrom
	// otherwise): tests spill tiny bundles.
	spillAt int64
	// split, when set, makes Read canonicalise long arrays on several
	// goroutines in runs of about split bytes whatever the bundle's size
	// (tests of the parallel read use tiny runs).
	split int
	// feedAt and feedStep, when set, are the blob size from which Read
	// checks a blob while it is decompressed and the pieces it asks for
	// (feedFrom and feedPiece otherwise): tests feed tiny bundles in tiny
	// pieces.
	feedAt   int64
	feedStep int
}

// maxCanonical is the canonical size limit; it never passes 2 GiB, so that
// offsets into the buffer fit in 32 bits.
func (o Options) maxCanonical() int64 {
	if o.MaxCanonicalSize > 0 {
		return min(o.MaxCanonicalSize, 2<<30)
	}
	return MaxCanonicalSize
}

func (o Options) maxInput() int64 {
	if o.MaxInputSize > 0 {
		return o.MaxInputSize
	}
	return MaxInputSize
}
