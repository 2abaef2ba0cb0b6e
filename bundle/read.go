package bundle

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"

	"github.com/pyrula/caseworker/canonjson"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
)

// Canonical is a validated bundle held in canonical form, with its hash.
// Its bytes live in one buffer; Segments lists the pieces in canonical
// order, so that results sorted at read time need no second copy.
type Canonical struct {
	hash     Hash
	size     int64
	manifest Manifest
	summary  Summary
	encoding Encoding

	// The canonical bytes are head, then the results (one region of buf, or
	// each result's region in sorted order, comma-separated), then tail.
	buf     []byte
	head    [][]byte
	region  []byte       // results in order already, or nil
	results []resultSpan // sorted, when region is nil

	blob pieces // the zstd blob, when Read made it (Options.Compress)

	// whole, when not nil, is the canonical bytes in one slice of the
	// heap (an input read as it was, canonical already): Decode aliases
	// it instead of copying.
	whole []byte
	// decoded, when set, is the results decoded as Read checked them
	// (Options.Decode), aliasing whole; the first Decode takes them.
	decoded atomic.Pointer[[]Result]

	// spill, when not nil, holds buf (Options.SpillDir): every segment
	// read from it is counted, so that its pages are handed back as they
	// are read.
	spill *spill
	// blobAside says that the hash and the blob are made on a goroutine of
	// their own (writeAside) and set, or asideErr, when hashed is closed.
	blobAside bool
	asideErr  error

	// hashed, when not nil, is closed once hash is set by the goroutine
	// that hashes the canonical bytes (Hash waits for it).
	hashed chan struct{}
}

var (
	comma = []byte(",")
	tail  = []byte("]}")
)

// segments yields the canonical bytes in order, as slices of the buffer.
// With a spill, long slices come in pieces, each counted in it as it is
// yielded.
func (c *Canonical) segments() iter.Seq[[]byte] {
	if c.spill == nil {
		return c.rawSegments()
	}
	return func(yield func([]byte) bool) {
		for s := range c.rawSegments() {
			// A result read alone maps the pages around it too.
			weight := 0
			if len(s) < faultAround {
				weight = faultAround
			}
			for len(s) > spillPiece {
				if !yield(s[:spillPiece]) {
					return
				}
				c.spill.touch(spillPiece)
				s = s[spillPiece:]
			}
			if !yield(s) {
				return
			}
			c.spill.touch(max(len(s), weight))
		}
	}
}

// rawSegments is segments without counting anything in a spill.
func (c *Canonical) rawSegments() iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for _, s := range c.head {
			if !yield(s) {
				return
			}
		}
		if c.region != nil {
			if !yield(c.region) {
				return
			}
		} else {
			for i, e := range c.results {
				if i > 0 && !yield(comma) {
					return
				}
				if !yield(c.buf[e.start:e.end]) {
					return
				}
			}
		}
		yield(tail)
	}
}

// Hash returns the bundle's name.
func (c *Canonical) Hash() Hash {
	if c.hashed != nil {
		<-c.hashed
	}
	return c.hash
}

// hashSegments hashes the canonical bytes.
func hashSegments(c *Canonical) Hash {
	h := newHasher()
	for s := range c.segments() {
		h.Write(s)
	}
	return hashOf(h)
}

// Size returns the length of the canonical bytes.
func (c *Canonical) Size() int64 { return c.size }

// Manifest returns the decoded manifest.
func (c *Canonical) Manifest() Manifest { return c.manifest }

// Summary returns the manifest_summary printed by save and import.
func (c *Canonical) Summary() Summary { return c.summary }

// Encoding says how the input Read was given was encoded.
func (c *Canonical) Encoding() Encoding { return c.encoding }

// WriteTo writes the canonical bytes to w.
func (c *Canonical) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for s := range c.segments() {
		m, err := w.Write(s)
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Bytes returns the canonical bytes as one new slice.
func (c *Canonical) Bytes() []byte {
	buf := bytes.NewBuffer(make([]byte, 0, c.size))
	c.WriteTo(buf)
	return buf.Bytes()
}

// Decode returns the whole bundle in Go types. Its raw values and most of
// its strings share memory with c's bytes (or with one copy of them, made
// once): callers must not write to the raw values.
func (c *Canonical) Decode() (*Bundle, error) {
	var b Bundle
	if results := c.decoded.Swap(nil); results != nil && decodeHead(c, &b) == nil {
		b.Results = *results
		return &b, nil
	}
	b = Bundle{}
	// The raw values alias the canonical bytes: c's own when they lie in
	// one slice of the heap (never written to again), else one copy.
	buf := c.whole
	if buf == nil {
		buf = c.Bytes()
	}
	if decodeTrusted(buf, &b, c.summary.HistoryCount, c.summary.ResultCount) == nil {
		return &b, nil
	}
	b = Bundle{}
	if decodeCanonical(buf, &b) == nil {
		return &b, nil
	}
	b = Bundle{}
	if err := json.Unmarshal(c.Bytes(), &b); err != nil {
		return nil, corrupt("decode", err)
	}
	return &b, nil
}

// Encode canonicalises and validates a bundle built in Go types, and
// compresses it (as Options.Compress). Nil slices and raw values are written
// as empty arrays and objects. The raw values (history events, results,
// inputs) are written as they are and canonicalised by Read, in canonical
// order, so that hashing and compression run beside canonicalisation.
func Encode(b *Bundle) (*Canonical, error) {
	manifest, err := ManifestJSON(b.Manifest)
	if err != nil {
		return nil, err
	}
	results := slices.Clone(b.Results)
	slices.SortFunc(results, func(x, y Result) int {
		return cmp.Or(cmp.Compare(x.Kind, y.Kind), cmp.Compare(x.Key, y.Key))
	})
	size := len(manifest) + 64
	for _, h := range b.History {
		size += len(h) + 1
	}
	for _, r := range results {
		size += len(r.Key) + len(r.Kind) + len(r.Input) + len(r.Result) + len(r.Error) + 128
	}
	buf := make([]byte, 0, size)
	buf = append(buf, `{"history":[`...)
	for i, h := range b.History {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, h...)
	}
	buf = append(buf, `],"manifest":`...)
	buf = append(buf, manifest...)
	buf = append(buf, `,"results":[`...)
	for i, r := range results {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = AppendResult(buf, r)
	}
	buf = append(buf, `]}`...)
	// The raw values are seldom canonical already: the general path at once.
	return Read(bytes.NewReader(buf), Options{SizeHint: int64(len(buf)), Compress: true, general: true})
}

// ManifestJSON is manifest m as JSON, as Encode writes it: an absent
// list, recorded_config or inputs is written empty ([] or {}).
func ManifestJSON(m Manifest) ([]byte, error) {
	if m.Capture.Missing == nil {
		m.Capture.Missing = []json.RawMessage{}
	}
	if m.Registration.Tools == nil {
		m.Registration.Tools = []Tool{}
	}
	if m.Registration.Steps == nil {
		m.Registration.Steps = []Step{}
	}
	if len(m.RecordedConfig) == 0 {
		m.RecordedConfig = json.RawMessage("{}")
	}
	if len(m.Inputs) == 0 {
		m.Inputs = json.RawMessage("{}")
	}
	raw, err := json.Marshal(&m)
	if err != nil {
		return nil, fmt.Errorf("bundle: encode manifest: %w", err)
	}
	return raw, nil
}

// AppendResult appends result r to dst as the JSON object of a bundle's
// results (its values as they are, not canonicalised): what Encode writes
// of it, and what a writer of EncodeStream writes.
func AppendResult(dst []byte, r Result) []byte {
	dst = append(dst, '{')
	if r.Error != nil {
		dst = append(dst, `"error":`...)
		dst = append(dst, r.Error...)
		dst = append(dst, ',')
	}
	dst = append(dst, `"fingerprint":`...)
	dst = canonjson.AppendQuoted(dst, []byte(r.Fingerprint))
	if r.Input != nil {
		dst = append(dst, `,"input":`...)
		dst = append(dst, r.Input...)
	}
	dst = append(dst, `,"key":`...)
	dst = canonjson.AppendQuoted(dst, []byte(r.Key))
	dst = append(dst, `,"kind":`...)
	dst = canonjson.AppendQuoted(dst, []byte(r.Kind))
	if r.Result != nil {
		dst = append(dst, `,"result":`...)
		dst = append(dst, r.Result...)
	}
	if r.StartSeq > 0 {
		dst = append(dst, `,"start_seq":`...)
		dst = strconv.AppendInt(dst, r.StartSeq, 10)
	}
	return append(dst, '}')
}

// EncodeStream is Encode of a bundle that write writes as JSON, its members
// and results in any order (as Read accepts them), so that the bundle is
// never held whole: write runs on its own goroutine while EncodeStream
// canonicalises, checks, hashes and compresses what it writes, as Read
// does (opts.SpillDir keeps a large bundle's canonical bytes out of the
// heap). write's error is returned as it is; once the read fails, write's
// writes fail, and the read's error is returned.
func EncodeStream(write func(w io.Writer) error, opts Options) (*Canonical, error) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		bw := streamWriters.Get().(*bufio.Writer)
		bw.Reset(pw)
		err := write(bw)
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err) // nil: the reader sees EOF
		bw.Reset(nil)
		streamWriters.Put(bw)
		done <- err
	}()
	opts.Compress, opts.general = true, true
	c, err := Read(pr, opts)
	pr.CloseWithError(errEncodeStopped) // ends a write still under way
	if werr := <-done; werr != nil && !errors.Is(werr, errEncodeStopped) {
		return nil, werr
	}
	return c, err
}

// streamWriters recycles EncodeStream's buffered writers (*bufio.Writer
// of 64 KiB): a worker encodes a bundle for every case run it captures.
var streamWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 64<<10) }}

// errEncodeStopped fails the writes of EncodeStream's writer once the read
// has stopped.
var errEncodeStopped = errors.New("bundle: the encoding stopped")

// Read reads a bundle in any accepted encoding (a zstd frame, a gzip stream or
// plain JSON with an optional UTF-8 byte-order mark, told apart by their first
// bytes), validates it and returns its canonical form. Errors carry reason
// codes: bundle_corrupt (undecodable or malformed), format_unsupported
// (unknown format or kind), bundle_too_large (over the limit). An error of r
// itself is returned wrapped, without a code.
func Read(r io.Reader, opts Options) (*Canonical, error) {
	length := lengthOf(r)
	if !opts.general {
		br := bufio.NewReaderSize(r, 64<<10)
		if c, err, done := readWhole(br, length, opts); done {
			return c, err
		}
		r = br
	}
	in, err := decodeInput(r, opts.maxInput())
	if err != nil {
		return nil, classify(err, opts)
	}
	defer in.close()
	hint := cmp.Or(opts.SizeHint, in.hint)
	if hint == 0 && in.encoding == EncodingPlain {
		// Canonical bytes drop the whitespace; allow a little for strings
		// and numbers that grow (100000.0 for 1E5).
		hint = int64(float64(length)*min(in.dense+0.02, 1)) + 4096
	}
	split := opts.split
	if split == 0 && hint >= parallelFrom && runtime.GOMAXPROCS(0) > 1 {
		split = chunkBytes
	}
	c, err := readCanonical(in, opts.maxCanonical(), hint, opts.Compress, split, opts.SpillDir, cmp.Or(opts.spillAt, spillFrom))
	if err != nil {
		return nil, classify(err, opts)
	}
	c.encoding = in.encoding
	// Without the pipeline (input out of canonical order) the blob is not
	// made here: WriteBlob and Blob compress as they write, straight into
	// the store, which never holds the whole blob in memory.
	return c, nil
}

// lengthOf returns the number of bytes left in r when r can tell it
// cheaply (a bytes or strings reader, a regular file), else 0.
func lengthOf(r io.Reader) int64 {
	switch v := r.(type) {
	case interface{ Len() int }:
		return int64(v.Len())
	case interface{ Stat() (fs.FileInfo, error) }:
		if st, err := v.Stat(); err == nil && st.Mode().IsRegular() {
			return st.Size()
		}
	}
	return 0
}

// classify turns the errors met while reading into reason codes.
func classify(err error, opts Options) error {
	var (
		re  *readError
		lim *errLimit
	)
	switch {
	case messages.AsError(err) != nil:
		return err
	case errors.As(err, &re):
		return fmt.Errorf("bundle: read: %w", re.err)
	case errors.As(err, &lim), errors.Is(err, zstd.ErrWindowSizeExceeded), errors.Is(err, zstd.ErrDecoderSizeExceeded):
		return messages.Errorf(messages.BundleTooLarge,
			"the decompressed input is over %d bytes", opts.maxInput())
	case errors.Is(err, canonjson.ErrTooLarge):
		return messages.Errorf(messages.BundleTooLarge,
			"the canonical bundle is over %d bytes (%d MiB)", opts.maxCanonical(), opts.maxCanonical()>>20)
	case errors.Is(err, canonjson.ErrInvalid):
		return corrupt("not valid JSON", err)
	}
	return corrupt("cannot decompress", err)
}

// resultEntry locates one results element in the buffer, with its kind
// (an index in reader.kindNames) and its decoded key (in reader.keys):
// 20 bytes and no pointers, for the many results of a large bundle.
type resultEntry struct {
	start, end     uint32 // the buffer never passes MaxCanonicalSize (+ slack)
	keyOff, keyLen uint32
	kind           uint32
}

// resultSpan is where a result's canonical bytes are in the buffer: all a
// Canonical keeps of its results once they are sorted and checked (a fifth
// of a resultEntry, and no key strings).
type resultSpan struct{ start, end uint32 }

// reader holds the state of one Read.
type reader struct {
	dec *canonjson.Decoder
	buf []byte

	manifest       map[string][]byte // member name → canonical value (inputs excluded)
	inputsSeen     bool
	inputsIsObject bool
	inputs         []byte
	manStart       int
	manEnd         int

	histStart, histEnd int
	history            []historyEntry
	calls              []historyCall // history's call:start and call:done events

	results          []resultEntry
	keys             []byte   // the results' decoded keys, one after another
	kindNames        []string // the results' distinct kinds
	kindIDs          map[string]uint32
	resStart, resEnd int
	resultsSorted    bool
	kinds            kindTable

	maxCanonical int64
	topSeen      map[string]bool

	// pipe, while not nil, hashes and compresses the canonical bytes as
	// they are finished: sent is how far into buf it has been given,
	// stage which top-level key comes next in canonical order.
	pipe *pipeline
	// srcHash, when set, gives the hash of buf as it was read: the fast
	// path's input is the canonical bytes themselves.
	srcHash <-chan Hash
	// feed, when set, is the blob that buf is decompressed from while it
	// is checked (scanFast sees only what is decompressed: ahead, retry).
	feed  *feed
	sent  int
	stage int

	// split, when set, is about how many input bytes of a long array's
	// elements one goroutine canonicalises at a time (readParallel).
	split int

	// spillDir, when set, is where the buffer moves to a spill once the
	// bundle is expected to reach spillAt bytes; spill is that spill.
	spillDir string
	spillAt  int
	spill    *spill
	// compress is Options.Compress.
	compress bool
	// decoded, when set, decodes the results as the fast path checks
	// them (Options.Decode).
	decoded *resultDecoder
}

// canonicalTop is the order of top-level keys in canonical bytes, with what
// precedes each one's elements.
var canonicalTop = []struct{ key, prefix string }{
	{"history", `{"history":[`},
	{"manifest", `],"manifest":`},
	{"results", `,"results":[`},
}

// streamKey tells the pipeline that top-level key begins; a key out of
// canonical order stops it.
func (r *reader) streamKey(key string) {
	if r.pipe == nil {
		return
	}
	if r.stage >= len(canonicalTop) || canonicalTop[r.stage].key != key {
		r.stopStream()
		return
	}
	r.pipe.send([]byte(canonicalTop[r.stage].prefix))
	r.stage++
	r.sent = len(r.buf)
}

// startSpill moves the buffer to a spill of r.spillDir, if set and the
// spill can be made (else the buffer stays in the heap). The spill is as
// large as the buffer may grow, so the buffer never moves again.
func (r *reader) startSpill() {
	if r.spillDir == "" || r.spill != nil {
		return
	}
	s, err := openSpill(r.spillDir, r.maxBuf())
	if err != nil {
		r.spillDir = "" // the heap, then
		return
	}
	r.buf = s.mem[:copy(s.mem, r.buf)]
	r.spill = s
	s.wrote(len(r.buf))
}

// stream hands finished bytes to the pipeline, in pieces of flushEvery
// unless all is set, and counts them in the spill.
func (r *reader) stream(all bool) {
	if r.spill == nil && r.spillDir != "" && len(r.buf) >= r.spillAt {
		r.startSpill()
	}
	if r.spill != nil {
		r.spill.wrote(len(r.buf))
	}
	if r.pipe == nil || (!all && len(r.buf)-r.sent < flushEvery) {
		return
	}
	r.pipe.send(r.buf[r.sent:len(r.buf):len(r.buf)])
	r.sent = len(r.buf)
}

// stopStream abandons the pipeline.
func (r *reader) stopStream() {
	if r.pipe != nil {
		r.pipe.abort()
		r.pipe = nil
	}
}

// historyEntry is what validation needs of one history event.
type historyEntry struct {
	runSeq    int64
	runSeqErr error
	hasRunSeq bool
	hasKind   bool
	kindOK    bool // a non-empty string
	terminal  bool
}

// historyCall locates a call:start or call:done event of history.
type historyCall struct {
	index int32     // in history
	start uint32    // where its canonical bytes begin in the buffer
	ev    callEvent // call:start or call:done
}

// resultFields is what validation and sorting need of one result.
type resultFields struct {
	kind                string
	keyOff, keyLen      uint32 // the decoded key, in the visitor's keys
	kindOK, keyOK       bool
	fingerprintOK       bool
	hasResult, hasError bool
	startSeqBad         bool // a start_seq that is not an integer ≥ 1
}

func readCanonical(in io.Reader, maxCanonical, hint int64, compress bool, split int, spillDir string, spillAt int64) (*Canonical, error) {
	r := &reader{
		dec:          canonjson.NewDecoder(in),
		maxCanonical: maxCanonical,
		topSeen:      map[string]bool{},
		manifest:     map[string][]byte{},
		spillDir:     spillDir,
		spillAt:      int(spillAt),
		compress:     compress,
	}
	r.dec.SetMaxOutput(r.maxBuf())
	if hint >= spillAt {
		r.startSpill()
	}
	if hint > 0 && r.spill == nil {
		r.buf = make([]byte, 0, min(hint+hint/64+4096, r.maxBuf()))
	}
	// A bundle expected over the limit is likely refused: nothing is
	// compressed for it on the way.
	if compress && hint > smallBlob && hint <= maxCanonical {
		r.pipe = startPipeline(r.spill)
	}
	r.split = split
	defer r.stopStream()
	if err := r.readTop(); err != nil {
		return nil, err
	}
	return r.finish()
}

func (r *reader) readTop() error {
	if r.dec.PeekKind() != '{' {
		if _, err := r.dec.AppendValue(nil); err != nil {
			return err
		}
		return corrupt("a bundle is a JSON object with manifest, history and results", nil)
	}
	if err := r.dec.ReadDelim('{'); err != nil {
		return err
	}
	for r.dec.PeekKind() != '}' {
		name, err := r.dec.ReadName()
		if err != nil {
			return err
		}
		key := string(name)
		r.topSeen[key] = true
		r.streamKey(key)
		switch key {
		case "manifest":
			err = r.readManifest()
		case "history":
			err = r.readArray("history", r.readHistoryEvent, &r.histStart, &r.histEnd)
		case "results":
			r.resultsSorted = true
			err = r.readArray("results", r.readResult, &r.resStart, &r.resEnd)
		default:
			return corrupt(fmt.Sprintf("unknown top-level key %q (format 1 has manifest, history and results)", truncate(key, 40)), nil)
		}
		if err != nil {
			return err
		}
	}
	if err := r.dec.ReadDelim('}'); err != nil {
		return err
	}
	if r.stage != len(canonicalTop) {
		r.stopStream()
	}
	return r.dec.CheckEOF()
}

func (r *reader) readManifest() error {
	if r.dec.PeekKind() != '{' {
		return r.wrongType("manifest", "an object")
	}
	r.manStart = len(r.buf)
	var err error
	r.buf, err = r.dec.AppendObject(r.buf, r.manifestMember)
	r.manEnd = len(r.buf)
	r.stream(true)
	return err
}

// manifestMember keeps one member of the manifest.
func (r *reader) manifestMember(name, value []byte) error {
	if string(name) == "inputs" {
		r.inputsSeen = true
		r.inputsIsObject = value[0] == '{'
		r.inputs = bytes.Clone(value)
		return nil
	}
	r.manifest[string(name)] = bytes.Clone(value)
	return nil
}

// readArray reads the array under a top-level key, calling element for each
// element; the elements are appended to the buffer separated by commas,
// without brackets, between *start and *end.
func (r *reader) readArray(what string, element func() error, start, end *int) error {
	if r.dec.PeekKind() != '[' {
		return r.wrongType(what, "an array")
	}
	if err := r.dec.ReadDelim('['); err != nil {
		return err
	}
	*start = len(r.buf)
	i := 0
	if r.split > 0 {
		var err error
		if i, err = r.readParallel(what); err != nil {
			return err
		}
	}
	for ; r.dec.PeekKind() != ']'; i++ {
		if i > 0 {
			if err := r.room(1); err != nil {
				return err
			}
			r.buf = append(r.buf, ',')
		}
		if r.dec.PeekKind() != '{' {
			return r.wrongType(fmt.Sprintf("%s[%d]", what, i), "an object")
		}
		if err := element(); err != nil {
			return err
		}
		r.stream(false)
	}
	*end = len(r.buf)
	r.stream(true)
	return r.dec.ReadDelim(']')
}

// room makes room in the buffer for n more bytes, or returns
// canonjson.ErrTooLarge when they would take it past the limit: the
// running count of the canonical bytes refuses a bundle as soon as it
// passes the limit, and the buffer never grows beyond it.
func (r *reader) room(n int) error {
	if int64(len(r.buf))+int64(n) > r.maxBuf() {
		return canonjson.ErrTooLarge
	}
	if n > cap(r.buf)-len(r.buf) {
		r.buf = canonjson.GrowAtMost(r.buf, n, int(r.maxBuf()))
	}
	return nil
}

// frameSize is the length of what the canonical bytes hold beside the
// buffer's elements and manifest: {"history":[ ],"manifest": ,"results":[ ]}.
var frameSize = func() int64 {
	n := int64(len(tail))
	for _, t := range canonicalTop {
		n += int64(len(t.prefix))
	}
	return n
}()

// maxBuf is the most the buffer may hold: the limit less the frame, so
// that the running count of the buffer is the canonical size exactly.
func (r *reader) maxBuf() int64 { return max(r.maxCanonical-frameSize, 1) }

// wrongType reads the offending value (to report a syntax error first, if
// any) and returns bundle_corrupt.
func (r *reader) wrongType(what, want string) error {
	if _, err := r.dec.AppendValue(nil); err != nil {
		return err
	}
	return corrupt(fmt.Sprintf("%s is not %s", what, want), nil)
}

func (r *reader) readHistoryEvent() error {
	var v historyVisitor
	start := len(r.buf)
	var err error
	r.buf, err = r.dec.AppendObject(r.buf, v.member)
	if err == nil {
		r.addHistory(start, &v)
	}
	return err
}

// historyVisitor collects what validation needs of one history event from
// its members.
type historyVisitor struct {
	e    historyEntry
	call callEvent
}

func (v *historyVisitor) member(name, value []byte) error {
	switch string(name) {
	case "run_seq":
		v.e.hasRunSeq = true
		v.e.runSeq, v.e.runSeqErr = strconv.ParseInt(string(value), 10, 64)
	case "kind":
		v.e.hasKind = true
		// Canonical, so each kind is written one way only.
		switch string(value) {
		case `"` + string(runevent.CallStart) + `"`:
			v.call = callStart
		case `"` + string(runevent.CallDone) + `"`:
			v.call = callDone
		}
		kind, ok := stringValue(value)
		v.e.kindOK = ok && kind != ""
		v.e.terminal = runevent.Kind(kind).Terminal() // a history never holds one
	}
	return nil
}

// addHistory adds the event whose canonical bytes begin at start.
func (r *reader) addHistory(start int, v *historyVisitor) {
	if v.call != 0 {
		r.calls = append(r.calls, historyCall{index: int32(len(r.history)), start: uint32(start), ev: v.call})
	}
	r.history = append(r.history, v.e)
}

func (r *reader) readResult() error {
	v := resultVisitor{kinds: &r.kinds, keys: &r.keys}
	start := len(r.buf)
	var err error
	r.buf, err = r.dec.AppendObject(r.buf, v.member)
	if err != nil {
		return err
	}
	return r.addResult(start, len(r.buf), &v.f)
}

// resultVisitor collects what validation and sorting need of one result
// from its members.
type resultVisitor struct {
	kinds *kindTable
	keys  *[]byte // where decoded keys go
	f     resultFields
}

func (v *resultVisitor) member(name, value []byte) error {
	switch string(name) {
	case "kind":
		v.f.kind, v.f.kindOK = v.kinds.intern(value)
	case "key":
		var key []byte
		if key, v.f.keyOK = unquote(value); v.f.keyOK {
			v.f.keyOff, v.f.keyLen = uint32(len(*v.keys)), uint32(len(key))
			*v.keys = append(*v.keys, key...)
		}
	case "fingerprint":
		v.f.fingerprintOK = len(value) == 66 && value[0] == '"' && validHash(value[1:65])
	case "result":
		v.f.hasResult = true
	case "error":
		v.f.hasError = true
	case "start_seq":
		v.f.startSeqBad = !validStartSeq(value)
	}
	return nil
}

// validStartSeq says that a result's start_seq (canonical JSON) is an
// integer from 1 to 2^53-1.
func validStartSeq(v []byte) bool {
	if len(v) == 0 || len(v) > 16 || v[0] < '1' || v[0] > '9' {
		return false
	}
	n := int64(0)
	for _, c := range v {
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int64(c-'0')
	}
	return n < 1<<53
}

// addResult validates the result whose canonical bytes are
// buf[start:end] and adds it.
func (r *reader) addResult(start, end int, f *resultFields) error {
	i := len(r.results)
	where := func() string { return fmt.Sprintf("results[%d]", i) }
	switch {
	case !f.kindOK || f.kind == "":
		return corrupt(where()+": kind is missing or not a non-empty string", nil)
	case !f.keyOK:
		return corrupt(where()+": key is missing or not a string", nil)
	case !f.fingerprintOK:
		return corrupt(where()+": fingerprint is missing or not 64 lowercase hex characters", nil)
	case f.hasResult == f.hasError:
		return corrupt(where()+": a result has exactly one of result and error", nil)
	case f.startSeqBad:
		return corrupt(where()+": start_seq is not an integer of 1 or more", nil)
	}
	e := resultEntry{start: uint32(start), end: uint32(end), keyOff: f.keyOff, keyLen: f.keyLen, kind: r.kindID(f.kind)}
	if i == 0 && end < len(r.buf) {
		// The first result of a bundle read whole sizes the lists for as
		// many more of its size as the rest of the buffer holds, but for
		// no more than one per 256 bytes (as resultDecoder.end does), so
		// that they do not grow (and copy) as a long run's results are read.
		more := (len(r.buf) - end) / max(end-start+1, 256)
		r.results = slices.Grow(r.results, 1+more)
		r.keys = slices.Grow(r.keys, more*int(f.keyLen))
	}
	if i > 0 && r.compareResults(r.results[i-1], e) >= 0 {
		r.resultsSorted = false
		r.stopStream()
	}
	r.results = append(r.results, e)
	return nil
}

// kindTable maps a canonical kind to its decoded string, so that the
// results of one kind share one string.
type kindTable map[string]string

// intern decodes a result's kind, sharing one string per distinct kind.
func (t *kindTable) intern(v []byte) (string, bool) {
	if k, ok := (*t)[string(v)]; ok {
		return k, true
	}
	k, ok := stringValue(v)
	if !ok {
		return "", false
	}
	if *t == nil {
		*t = kindTable{}
	}
	(*t)[string(v)] = k
	return k, true
}

// kindID returns the index of a result kind in r.kindNames.
func (r *reader) kindID(kind string) uint32 {
	if id, ok := r.kindIDs[kind]; ok {
		return id
	}
	if r.kindIDs == nil {
		r.kindIDs = map[string]uint32{}
	}
	id := uint32(len(r.kindNames))
	r.kindNames = append(r.kindNames, kind)
	r.kindIDs[kind] = id
	return id
}

// keyOf returns a result's decoded key.
func (r *reader) keyOf(e resultEntry) []byte { return r.keys[e.keyOff : e.keyOff+e.keyLen] }

// compareResults orders results by kind, then key (code points, which is
// the order of their UTF-8 bytes).
func (r *reader) compareResults(a, b resultEntry) int {
	return compareEntries(r.keys, r.kindNames, a, b)
}

// compareEntries is compareResults over the reader's keys and kind names.
func compareEntries(keys []byte, kindNames []string, a, b resultEntry) int {
	if a.kind != b.kind {
		return cmp.Compare(kindNames[a.kind], kindNames[b.kind])
	}
	return bytes.Compare(keys[a.keyOff:a.keyOff+a.keyLen], keys[b.keyOff:b.keyOff+b.keyLen])
}

// stringValue decodes a canonical JSON string value.
func stringValue(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return string(v[1 : len(v)-1]), true
	}
	s, err := canonjson.Unquote(nil, v)
	if err != nil {
		return "", false
	}
	return string(s), true
}

// finish validates what was read and assembles the canonical segments.
func (r *reader) finish() (*Canonical, error) {
	for _, k := range []string{"manifest", "history", "results"} {
		if !r.topSeen[k] {
			return nil, corrupt(fmt.Sprintf("the bundle has no %s", k), nil)
		}
	}
	man, err := r.decodeManifest()
	if err != nil {
		return nil, err
	}
	if err := r.validateHistory(man.ForkAfterSeq); err != nil {
		return nil, err
	}
	if man.ForkAfterSeq == nil && len(r.results) > 0 {
		return nil, corrupt("results must be empty when fork_after_seq is null", nil)
	}
	// A long history's calls are indexed while the results are sorted.
	calls := make(chan *callIndex, 1)
	if len(r.calls) >= asideFrom {
		go func() { calls <- r.indexCalls() }()
	} else {
		calls <- r.indexCalls()
	}
	c := r.assemble()
	if c.region == nil {
		c.results = make([]resultSpan, len(r.results))
		for i, e := range r.results {
			c.results[i] = resultSpan{e.start, e.end}
		}
	}
	for s := range c.rawSegments() {
		c.size += int64(len(s))
	}
	switch {
	case r.pipe == nil && r.srcHash == nil && r.spill != nil && r.compress && c.size <= r.maxCanonical:
		// A spilled bundle whose results came out of order: hashed and
		// compressed in one pass meanwhile, reading the file rather than
		// the mapping.
		done := make(chan struct{})
		c.hashed, c.blobAside = done, true
		go func() {
			c.hash, c.blob, c.asideErr = c.writeAside()
			close(done)
		}()
	case r.pipe == nil && r.srcHash == nil && c.size >= hashAsideFrom && c.size <= r.maxCanonical:
		// Hashed on a second goroutine while the checks below run and,
		// after Read returns, while the blob is compressed: Hash waits.
		done := make(chan struct{})
		c.hashed = done
		go func() {
			c.hash = hashSegments(c)
			close(done)
		}()
	}
	if err := r.checkDuplicates(); err != nil {
		return nil, err
	}
	if err := r.checkCalls(<-calls); err != nil {
		return nil, err
	}
	if c.size > r.maxCanonical {
		return nil, canonjson.ErrTooLarge
	}
	switch p := r.pipe; {
	case p != nil:
		p.send(tail)
		p.close()
		r.pipe = nil
		if p.err != nil {
			return nil, fmt.Errorf("bundle: compress: %w", p.err)
		}
		c.hash, c.blob = p.hash, p.blob
	case r.srcHash != nil:
		c.hash = <-r.srcHash // the input, hashed while it was read
	case c.hashed == nil:
		c.hash = hashSegments(c)
	}
	c.manifest = *man
	c.summary = Summary{
		Format:       man.Format,
		Kind:         man.Kind,
		TargetName:   man.TargetName,
		ForkAfterSeq: man.ForkAfterSeq,
		Capture:      man.Capture,
		ResultCount:  len(r.results),
		HistoryCount: len(r.history),
	}
	return c, nil
}

// assemble lays out the canonical bytes:
// {"history":[…],"manifest":{…},"results":[…]} with results sorted by
// (kind, key), as pieces of the buffer.
func (r *reader) assemble() *Canonical {
	c := &Canonical{
		buf:   r.buf,
		spill: r.spill,
		head: [][]byte{
			[]byte(`{"history":[`), r.buf[r.histStart:r.histEnd],
			[]byte(`],"manifest":`), r.buf[r.manStart:r.manEnd],
			[]byte(`,"results":[`),
		},
	}
	if r.resultsSorted {
		c.region = r.buf[r.resStart:r.resEnd]
	} else {
		r.sortResults()
	}
	return c
}

// asideFrom is the number of results, or of history calls, from which
// finish sorts the results on two goroutines and indexes the calls on a
// third: below it, starting them costs more than it saves.
const asideFrom = 1 << 14

// sortResults sorts the results by kind and key: when there are many, each
// half on a goroutine of its own, then one merge.
func (r *reader) sortResults() {
	// The keys and names as locals: the comparison runs millions of times.
	keys, names := r.keys, r.kindNames
	compare := func(a, b resultEntry) int { return compareEntries(keys, names, a, b) }
	rs := r.results
	if len(rs) < asideFrom || runtime.GOMAXPROCS(0) < 2 {
		slices.SortFunc(rs, compare)
		return
	}
	a, b := rs[:len(rs)/2], rs[len(rs)/2:]
	done := make(chan struct{})
	go func() {
		slices.SortFunc(a, compare)
		close(done)
	}()
	slices.SortFunc(b, compare)
	<-done
	merged := make([]resultEntry, 0, len(rs))
	for len(a) > 0 && len(b) > 0 {
		if compare(b[0], a[0]) < 0 {
			merged, b = append(merged, b[0]), b[1:]
		} else {
			merged, a = append(merged, a[0]), a[1:]
		}
	}
	r.results = append(append(merged, a...), b...)
}

// checkDuplicates refuses two results with the same (kind, key); results
// are sorted by now.
func (r *reader) checkDuplicates() error {
	for i := 1; i < len(r.results); i++ {
		if e := r.results[i]; r.compareResults(r.results[i-1], e) == 0 {
			return corrupt(fmt.Sprintf("two results for %s:%s", r.kindNames[e.kind], truncate(string(r.keyOf(e)), 80)), nil)
		}
	}
	return nil
}
