package canonjson

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"slices"
	"unicode/utf16"
	"unicode/utf8"
)

// Decoder reads JSON text from a stream and appends canonical forms of its
// values. Callers that need to see structure (the bundle package reads the
// top of a bundle itself) mix PeekKind, ReadDelim, ReadName, AppendValue and
// AppendObject.
//
// It scans bytes in a buffer of its own, refilled from the reader between
// tokens: a token (a string, a number, a literal) is kept whole in the
// buffer while it is read, so the buffer grows only to the longest token,
// never to a whole value. Canonical bytes are appended as the tokens are
// read; an object whose members arrive out of order is reordered in place
// when it closes.
type Decoder struct {
	r    io.Reader // nil when buf holds the whole input
	buf  []byte    // input; buf[pos:] is unread
	pos  int
	base int64 // input offset of buf[0]
	eof  bool  // the reader has no more
	rerr error // the reader's error other than io.EOF
	err  error // the first error, returned by every later call
	// scanSkip counts the values read token by token, without a scan,
	// after a value scanned was not taken.
	scanSkip int

	maxOut int
	frames []frame // containers opened by ReadDelim

	scratch  []byte     // reorder buffer for objects
	unquoted []byte     // unescaped string buffer
	members  [][]member // per depth, reused
	names    [][]byte   // reorder's sort keys, reused
	idx      []int      // reorder's permutation, reused
}

// frame is a container opened by ReadDelim.
type frame struct {
	object    bool
	n         int  // elements or members read
	afterName bool // an object's name is read, its value is next
	sepRead   bool // the comma before the next element is read
	names     map[string]bool
}

// member locates one object member in the output buffer.
type member struct {
	start   int    // offset of the name's opening quote
	nameEnd int    // offset just past the name's closing quote
	end     int    // offset just past the value
	key     []byte // the unescaped name, set only when the input name has escapes
}

// Buffer sizes of a Decoder reading a stream: the first read, and the size
// it grows to while the stream goes on (larger reads, fewer calls).
const (
	firstRead = 64 << 10
	maxRead   = 1 << 20
)

// NewDecoder returns a Decoder reading from r.
func NewDecoder(r io.Reader) *Decoder {
	return &Decoder{r: r, maxOut: math.MaxInt}
}

// newBytesDecoder returns a Decoder over src, which it reads in place.
func newBytesDecoder(src []byte) *Decoder {
	return &Decoder{buf: src, eof: true, maxOut: math.MaxInt}
}

// SetMaxOutput makes AppendValue and AppendObject fail with ErrTooLarge as
// soon as the buffer they append to would pass n bytes: each append is
// checked before it is made, from a running count (the buffer's length), and
// a buffer the Decoder grows is never given room beyond n bytes. A string
// longer than the room left is refused while it is read, before the rest of
// it is. So refusing output over the limit reads and holds no more than
// output at the limit.
func (d *Decoder) SetMaxOutput(n int64) {
	if n > 0 && n < math.MaxInt {
		d.maxOut = int(n)
	}
}

// room returns dst with room for n more bytes, or ErrTooLarge when they
// would take it past the output limit. It grows dst itself, never past the
// limit, so that append's own growth (a quarter more for a large slice)
// never allocates beyond it.
func (d *Decoder) room(dst []byte, n int) ([]byte, error) {
	if n > d.maxOut-len(dst) {
		return dst, ErrTooLarge
	}
	if n <= cap(dst)-len(dst) {
		return dst, nil
	}
	return GrowAtMost(dst, n, d.maxOut), nil
}

// GrowAtMost returns dst with room for n more bytes (len(dst)+n should be
// at most limit), its capacity doubled but never past limit. Doubling,
// where append grows a large slice by a quarter: a buffer of unknown size
// grown to hundreds of MiB leaves behind copies of about its own size in
// all, not four times it, and the limit caps the last step.
func GrowAtMost(dst []byte, n, limit int) []byte {
	grown := min(max(2*cap(dst), len(dst)+n), max(limit, len(dst)+n))
	out := make([]byte, len(dst), grown)
	copy(out, dst)
	return out
}

// InputOffset is the number of input bytes read so far.
func (d *Decoder) InputOffset() int64 { return d.base + int64(d.pos) }

// fill reads more input, dropping the bytes before keep, and reports how
// far the bytes that stay moved down (offsets into buf past keep shrink by
// shift) and whether new bytes arrived.
func (d *Decoder) fill(keep int) (shift int, ok bool) {
	if d.eof || d.rerr != nil {
		return 0, false
	}
	if keep > 0 {
		n := copy(d.buf, d.buf[keep:])
		d.buf = d.buf[:n]
		d.base += int64(keep)
		d.pos -= keep
	}
	size := cap(d.buf)
	if size < maxRead && d.base >= int64(size) {
		size *= 2 // a long stream: larger reads
	}
	size = max(size, firstRead)
	for size-len(d.buf) < firstRead/2 {
		size *= 2 // a token longer than the buffer
	}
	if size != cap(d.buf) {
		d.buf = append(make([]byte, 0, size), d.buf...)
	}
	for {
		n, err := d.r.Read(d.buf[len(d.buf):cap(d.buf)])
		d.buf = d.buf[:len(d.buf)+n]
		switch {
		case err == io.EOF:
			d.eof = true
		case err != nil:
			d.rerr = err
		}
		if n > 0 {
			return keep, true
		}
		if err != nil {
			return keep, false
		}
	}
}

// endErr is the error for input that ended in the middle of a value: the
// reader's own error when it had one, as it is (so that a caller's limit or
// decompression error keeps its type), else ErrInvalid.
func (d *Decoder) endErr() error {
	if d.rerr != nil {
		return d.rerr
	}
	return fmt.Errorf("%w: unexpected end of input", ErrInvalid)
}

// syntaxErr is the error for an unexpected byte at the current position.
func (d *Decoder) syntaxErr(what string) error {
	return fmt.Errorf("%w: %s at byte %d, found %q", ErrInvalid, what, d.InputOffset(), d.buf[d.pos])
}

// isSpace marks JSON's white space.
var isSpace = [256]bool{' ': true, '\t': true, '\n': true, '\r': true}

// skipSpace moves past white space and returns the next byte, or 0 with
// ok false at the end of the input.
func (d *Decoder) skipSpace() (c byte, ok bool) {
	for {
		buf := d.buf
		i := d.pos
		for i < len(buf) && isSpace[buf[i]] {
			i++
		}
		d.pos = i
		if i < len(buf) {
			return buf[i], true
		}
		if _, more := d.fill(d.pos); !more {
			return 0, false
		}
	}
}

// fail records err as the decoder's error and returns it.
func (d *Decoder) fail(err error) error {
	if d.err == nil {
		d.err = err
	}
	return err
}

// next moves to the start of the next token inside the innermost container
// opened by ReadDelim, past a comma after an element, and returns its first
// byte.
func (d *Decoder) next() (byte, error) {
	if d.err != nil {
		return 0, d.err
	}
	c, ok := d.skipSpace()
	if !ok {
		return 0, d.fail(d.endErr())
	}
	if len(d.frames) == 0 {
		return c, nil
	}
	f := &d.frames[len(d.frames)-1]
	closer := byte(']')
	if f.object {
		closer = '}'
	}
	switch {
	case f.afterName || f.n == 0:
		return c, nil
	case f.sepRead:
		if c == closer {
			return 0, d.fail(d.syntaxErr("a value after a comma expected"))
		}
		return c, nil
	case c == ',':
		d.pos++
		f.sepRead = true
		if c, ok = d.skipSpace(); !ok {
			return 0, d.fail(d.endErr())
		}
		if c == closer {
			return 0, d.fail(d.syntaxErr("a value after a comma expected"))
		}
		return c, nil
	case c == closer:
		return c, nil
	}
	return 0, d.fail(d.syntaxErr("',' or '" + string(closer) + "' expected"))
}

// kindOf maps a token's first byte to its kind.
func kindOf(c byte) byte {
	switch c {
	case '{', '}', '[', ']', '"', 'n', 't', 'f':
		return c
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return '0'
	}
	return 0
}

// PeekKind returns the kind of the next token: '{', '}', '[', ']', '"',
// '0', 'n', 't', 'f', or 0 at the end of input or on error.
func (d *Decoder) PeekKind() byte {
	c, err := d.next()
	if err != nil {
		return 0
	}
	return kindOf(c)
}

// itemDone counts a value read in the innermost open container.
func (d *Decoder) itemDone() {
	if len(d.frames) > 0 {
		f := &d.frames[len(d.frames)-1]
		f.n++
		f.afterName, f.sepRead = false, false
	}
}

// ReadDelim reads the next token, which must be the delimiter want ('{',
// '}', '[' or ']').
func (d *Decoder) ReadDelim(want byte) error {
	c, err := d.next()
	if err != nil {
		return err
	}
	if c != want {
		return d.fail(fmt.Errorf("%w: expected %q at byte %d, found %q", ErrInvalid, want, d.InputOffset(), c))
	}
	switch want {
	case '{', '[':
		if len(d.frames) > 0 && d.frames[len(d.frames)-1].object && !d.frames[len(d.frames)-1].afterName {
			return d.fail(d.syntaxErr("a name expected"))
		}
		if len(d.frames)+1 > MaxDepth {
			return d.fail(d.depthErr())
		}
		d.pos++
		d.frames = append(d.frames, frame{object: want == '{'})
	default:
		if len(d.frames) == 0 || d.frames[len(d.frames)-1].object != (want == '}') {
			return d.fail(d.syntaxErr("unexpected closing delimiter"))
		}
		d.pos++
		d.frames = d.frames[:len(d.frames)-1]
		d.itemDone()
	}
	return nil
}

// ReadName reads an object member name and returns it unescaped, with the
// colon after it. The returned slice is valid until the next call on d.
func (d *Decoder) ReadName() ([]byte, error) {
	c, err := d.next()
	if err != nil {
		return nil, err
	}
	if len(d.frames) == 0 || !d.frames[len(d.frames)-1].object || d.frames[len(d.frames)-1].afterName || c != '"' {
		return nil, d.fail(fmt.Errorf("%w: expected a name at byte %d", ErrInvalid, d.InputOffset()))
	}
	start, end, escaped, err := d.scanString(math.MaxInt)
	if err != nil {
		return nil, d.fail(err)
	}
	// The name is copied: reading on to the colon may refill buf.
	if escaped {
		d.unquoted, err = Unquote(d.unquoted[:0], d.buf[start:end])
	} else {
		d.unquoted = append(d.unquoted[:0], d.buf[start+1:end-1]...)
	}
	if err != nil {
		return nil, d.fail(err)
	}
	if c, ok := d.skipSpace(); !ok {
		return nil, d.fail(d.endErr())
	} else if c != ':' {
		return nil, d.fail(d.syntaxErr("':' expected"))
	}
	d.pos++
	f := &d.frames[len(d.frames)-1]
	if f.names[string(d.unquoted)] {
		return nil, d.fail(fmt.Errorf("%w: duplicate object key %q", ErrInvalid, truncateName(d.unquoted)))
	}
	if f.names == nil {
		f.names = map[string]bool{}
	}
	f.names[string(d.unquoted)] = true
	f.afterName = true
	return d.unquoted, nil
}

// CheckEOF returns an error unless only whitespace remains in the input.
func (d *Decoder) CheckEOF() error {
	if d.err != nil {
		return d.err
	}
	if _, ok := d.skipSpace(); ok {
		return d.fail(fmt.Errorf("%w: unexpected data after the top-level value at byte %d", ErrInvalid, d.InputOffset()))
	}
	if d.rerr != nil {
		return d.fail(d.rerr)
	}
	if len(d.frames) > 0 {
		return d.fail(d.endErr())
	}
	return nil
}

// AppendValue reads the next complete value and appends its canonical form
// to dst. On error the returned slice is dst as it was given.
func (d *Decoder) AppendValue(dst []byte) ([]byte, error) {
	return d.appendTop(dst, false, nil)
}

// AppendObject reads the next value, which must be an object, and appends
// its canonical form to dst, calling visit (when not nil) with each member's
// unescaped name and canonical value before the members are sorted. The
// slices passed to visit are valid only during the call.
func (d *Decoder) AppendObject(dst []byte, visit func(name, value []byte) error) ([]byte, error) {
	return d.appendTop(dst, true, visit)
}

func (d *Decoder) appendTop(dst []byte, object bool, visit func(name, value []byte) error) ([]byte, error) {
	c, err := d.next()
	if err != nil {
		return dst, err
	}
	if len(d.frames) > 0 && d.frames[len(d.frames)-1].object && !d.frames[len(d.frames)-1].afterName {
		return dst, d.fail(fmt.Errorf("%w: expected a name at byte %d", ErrInvalid, d.InputOffset()))
	}
	if object && c != '{' {
		return dst, d.fail(fmt.Errorf("%w: expected an object at byte %d", ErrInvalid, d.InputOffset()))
	}
	n := len(dst)
	var out []byte
	switch end, ok := d.scanned(dst); {
	case ok:
		out, err = d.appendScanned(dst, end, visit)
	case object:
		out, err = d.object(dst, len(d.frames), visit)
	default:
		out, err = d.value(dst, len(d.frames))
	}
	if err != nil {
		return dst[:n], d.fail(err)
	}
	d.itemDone()
	return out, nil
}

// scanned reports whether the value at the current position is canonical
// and whole in the buffer (a Scanner takes it, counting the depth of the
// containers around it, and it ends before the buffer does or the input
// has ended), and fits the output limit after dst; end is where it ends in
// buf. appendScanned then copies it, in about a quarter of the time of the
// tokens. Canonical text is what a Decoder mostly reads (bundles and journal
// records written by this package); anything else is read token by token
// as before.
func (d *Decoder) scanned(dst []byte) (end int, ok bool) {
	if d.scanSkip > 0 {
		d.scanSkip--
		return 0, false
	}
	s := Scanner{src: d.buf, pos: d.pos, depth: len(d.frames)}
	if !s.value(nil) || (s.pos == len(d.buf) && !d.eof) {
		// Text that is not canonical (indented, keys out of order)
		// seldom has canonical values next, and a value cut by the end
		// of the bytes read is rare: the next few are not scanned, so
		// that such text costs little more than before.
		d.scanSkip = scanSkipAfterMiss
		return 0, false
	}
	return s.pos, s.pos-d.pos <= d.maxOut-len(dst)
}

// scanSkipAfterMiss is how many values a Decoder reads without a scan after
// a value scanned did not take.
const scanSkipAfterMiss = 8

// appendScanned appends the value from the current position to end, which
// scanned found canonical, and calls visit (when not nil; the value is an
// object) with its members, as object does: their names (canonical names
// have no escapes) and values, which are already canonical.
func (d *Decoder) appendScanned(dst []byte, end int, visit func(name, value []byte) error) ([]byte, error) {
	v := d.buf[d.pos:end]
	if visit != nil {
		s := Scanner{src: v}
		if _, err := s.Object(visit); err != nil {
			return dst, err // visit's: the text is the one scanned
		}
	}
	dst, err := d.room(dst, len(v)) // fits: scanned checked
	if err != nil {
		return dst, err
	}
	d.pos = end
	return append(dst, v...), nil
}

// value appends the canonical form of the value at the current position;
// depth is the number of containers around it.
func (d *Decoder) value(dst []byte, depth int) ([]byte, error) {
	if d.pos >= len(d.buf) {
		if _, ok := d.skipSpace(); !ok {
			return dst, d.endErr()
		}
	}
	switch c := d.buf[d.pos]; c {
	case '{':
		return d.object(dst, depth, nil)
	case '[':
		return d.array(dst, depth)
	case '"':
		return d.appendString(dst)
	case 't':
		return d.literal(dst, "true")
	case 'f':
		return d.literal(dst, "false")
	case 'n':
		return d.literal(dst, "null")
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return d.number(dst)
	}
	return dst, d.syntaxErr("a value expected")
}

// literal appends true, false or null.
func (d *Decoder) literal(dst []byte, lit string) ([]byte, error) {
	for len(d.buf)-d.pos < len(lit) {
		if _, ok := d.fill(d.pos); !ok {
			break
		}
	}
	end := min(d.pos+len(lit), len(d.buf))
	if string(d.buf[d.pos:end]) != lit[:end-d.pos] {
		return dst, d.syntaxErr("a value expected")
	}
	if end-d.pos < len(lit) {
		return dst, d.endErr()
	}
	d.pos = end
	dst, err := d.room(dst, len(lit))
	if err != nil {
		return dst, err
	}
	return append(dst, lit...), nil
}

func (d *Decoder) depthErr() error {
	return fmt.Errorf("%w: nesting deeper than %d levels at byte %d", ErrInvalid, MaxDepth, d.InputOffset())
}

// open reads the opening bracket of an array or object at the current
// position, one level deeper than depth, and the white space after it. It
// appends the bracket and, when the container is empty, its closer too
// (then done is set).
func (d *Decoder) open(dst []byte, depth int, closer byte) (out []byte, done bool, err error) {
	if depth > MaxDepth {
		return dst, false, d.depthErr()
	}
	dst, err = d.room(dst, 1)
	if err != nil {
		return dst, false, err
	}
	dst = append(dst, d.buf[d.pos])
	d.pos++
	c, ok := d.skipSpace()
	if !ok {
		return dst, false, d.endErr()
	}
	if c == closer {
		d.pos++
		if dst, err = d.room(dst, 1); err != nil {
			return dst, false, err
		}
		return append(dst, closer), true, nil
	}
	return dst, false, nil
}

func (d *Decoder) array(dst []byte, depth int) ([]byte, error) {
	depth++
	dst, done, err := d.open(dst, depth, ']')
	if done || err != nil {
		return dst, err
	}
	var (
		c  byte
		ok bool
	)
	for {
		if dst, err = d.value(dst, depth); err != nil {
			return dst, err
		}
		if len(dst) > d.maxOut {
			return dst, ErrTooLarge
		}
		if c, ok = d.skipSpace(); !ok {
			return dst, d.endErr()
		}
		if dst, err = d.room(dst, 1); err != nil {
			return dst, err
		}
		switch c {
		case ',':
			d.pos++
			dst = append(dst, ',')
			if _, ok = d.skipSpace(); !ok {
				return dst, d.endErr()
			}
		case ']':
			d.pos++
			return append(dst, ']'), nil
		default:
			return dst, d.syntaxErr("',' or ']' expected")
		}
	}
}

func (d *Decoder) object(dst []byte, depth int, visit func(name, value []byte) error) ([]byte, error) {
	depth++
	dst, done, err := d.open(dst, depth, '}')
	if done || err != nil {
		return dst, err
	}
	for len(d.members) <= depth {
		d.members = append(d.members, nil)
	}
	ms := d.members[depth][:0]
	sorted := true
	c, ok := d.buf[d.pos], true // open stopped at this byte
	for {
		if c != '"' {
			return dst, d.syntaxErr("a name expected")
		}
		m := member{start: len(dst)}
		var escaped bool
		if dst, escaped, err = d.appendName(dst); err != nil {
			return dst, err
		}
		m.nameEnd = len(dst)
		if escaped {
			m.key = bytes.Clone(d.unquoted)
		}
		if c, ok = d.skipSpace(); !ok {
			return dst, d.endErr()
		}
		if c != ':' {
			return dst, d.syntaxErr("':' expected")
		}
		d.pos++
		if _, ok = d.skipSpace(); !ok {
			return dst, d.endErr()
		}
		if dst, err = d.room(dst, 1); err != nil {
			return dst, err
		}
		dst = append(dst, ':')
		valueStart := len(dst)
		if dst, err = d.value(dst, depth); err != nil {
			return dst, err
		}
		m.end = len(dst)
		if visit != nil {
			if err := visit(m.name(dst), dst[valueStart:m.end]); err != nil {
				return dst, err
			}
		}
		if len(ms) > 0 && bytes.Compare(ms[len(ms)-1].name(dst), m.name(dst)) >= 0 {
			sorted = false
		}
		ms = append(ms, m)
		if len(dst) > d.maxOut {
			return dst, ErrTooLarge
		}
		if c, ok = d.skipSpace(); !ok {
			return dst, d.endErr()
		}
		if c == '}' {
			d.pos++
			break
		}
		if c != ',' {
			return dst, d.syntaxErr("',' or '}' expected")
		}
		d.pos++
		if dst, err = d.room(dst, 1); err != nil {
			return dst, err
		}
		dst = append(dst, ',')
		if c, ok = d.skipSpace(); !ok {
			return dst, d.endErr()
		}
	}
	d.members[depth] = ms[:0]
	if !sorted {
		if err := d.reorder(dst, ms); err != nil {
			return dst, err
		}
	}
	if dst, err = d.room(dst, 1); err != nil {
		return dst, err
	}
	return append(dst, '}'), nil
}

// name returns the member's unescaped name.
func (m *member) name(buf []byte) []byte {
	if m.key != nil {
		return m.key
	}
	return buf[m.start+1 : m.nameEnd-1]
}

// reorder rewrites in sorted order the members ms of the object written
// at the end of buf (the length of its body does not change), and refuses
// two members of one name, as Python would keep only the last.
func (d *Decoder) reorder(buf []byte, ms []member) error {
	names := d.names[:0]
	idx := d.idx[:0]
	for i := range ms {
		names = append(names, ms[i].name(buf))
		idx = append(idx, i)
	}
	d.names, d.idx = names, idx
	sortIndexes(idx, names)
	for i := 1; i < len(idx); i++ {
		if bytes.Equal(names[idx[i-1]], names[idx[i]]) {
			return fmt.Errorf("%w: duplicate object key %q", ErrInvalid, truncateName(names[idx[i]]))
		}
	}
	// Members already in their place at either end stay where they are
	// (often a long last value): only the span between is rewritten.
	lo, hi := 0, len(idx)
	for lo < hi && idx[lo] == lo {
		lo++
	}
	for hi > lo && idx[hi-1] == hi-1 {
		hi--
	}
	if lo == hi {
		return nil
	}
	from := ms[lo].start
	d.scratch = append(d.scratch[:0], buf[from:ms[hi-1].end]...)
	w := from
	for i := lo; i < hi; i++ {
		if i > lo {
			buf[w] = ','
			w++
		}
		m := ms[idx[i]]
		w += copy(buf[w:], d.scratch[m.start-from:m.end-from])
	}
	return nil
}

// truncateName shortens a name for an error message.
func truncateName(name []byte) string {
	if len(name) > 40 {
		return string(name[:40]) + "…"
	}
	return string(name)
}

// sortIndexes sorts idx by names[idx[i]] in byte order (code-point order
// for UTF-8).
func sortIndexes(idx []int, names [][]byte) {
	// Insertion sort for the common small object.
	if len(idx) < 12 {
		for i := 1; i < len(idx); i++ {
			for j := i; j > 0 && bytes.Compare(names[idx[j-1]], names[idx[j]]) > 0; j-- {
				idx[j-1], idx[j] = idx[j], idx[j-1]
			}
		}
		return
	}
	slices.SortFunc(idx, func(a, b int) int { return bytes.Compare(names[a], names[b]) })
}

// scanString finds the string token at the current position (an opening
// quote), keeping it whole in buf: its bytes are buf[start:end], quotes
// included, and d.pos is past it. It checks that the string holds no raw
// control character and is valid UTF-8; escapes are checked by unquote.
// A string whose canonical form is sure to be longer than room bytes is
// refused with ErrTooLarge before more of it is read: its canonical form
// has at least one byte for every byte read but the escapes, which give
// one byte at least (\uXXXX: six bytes read, one byte at least).
func (d *Decoder) scanString(room int) (start, end int, escaped bool, err error) {
	start = d.pos
	i := start + 1
	high := false
	shrink := 0 // bytes read that the canonical form may not keep
	for {
		buf := d.buf
		i = skipPlain(buf, i)
		if i >= len(buf) || buf[i] == '\\' && i+1 >= len(buf) {
			// The buffer ends inside the string, or inside an escape: read
			// more, keeping the string, unless it is too long already
			// (its quotes and what was read of it).
			if 2+i-(start+1)-shrink > room {
				return 0, 0, false, ErrTooLarge
			}
			shift, ok := d.fill(start)
			if !ok {
				return 0, 0, false, d.endErr()
			}
			start -= shift
			i -= shift
			continue
		}
		switch c := buf[i]; {
		case c == '"':
			if high && !utf8.Valid(buf[start+1:i]) {
				return 0, 0, false, fmt.Errorf("%w: string at byte %d is not valid UTF-8", ErrInvalid, d.base+int64(start))
			}
			d.pos = i + 1
			return start, i + 1, escaped, nil
		case c == '\\':
			escaped = true
			shrink++
			if buf[i+1] == 'u' {
				shrink += 4 // the four hex digits, read as plain bytes
			}
			i += 2 // the escaped byte may be a quote; unquote checks it
		case c < 0x20:
			d.pos = i
			return 0, 0, false, fmt.Errorf("%w: control character %#02x in a string at byte %d", ErrInvalid, c, d.InputOffset())
		default:
			high = true
			i++
		}
	}
}

// appendString appends the canonical form of the string at the current
// position.
func (d *Decoder) appendString(dst []byte) ([]byte, error) {
	dst, _, err := d.appendName(dst)
	return dst, err
}

// appendName appends the canonical form of the string at the current
// position and reports whether the input had escapes (then d.unquoted
// holds the unescaped value).
func (d *Decoder) appendName(dst []byte) ([]byte, bool, error) {
	start, end, escaped, err := d.scanString(d.maxOut - len(dst))
	if err != nil {
		return dst, false, err
	}
	raw := d.buf[start:end]
	if !escaped {
		// No escapes, no control characters, valid UTF-8: canonical as it is.
		if dst, err = d.room(dst, len(raw)); err != nil {
			return dst, false, err
		}
		return append(dst, raw...), false, nil
	}
	if d.unquoted, err = Unquote(d.unquoted[:0], raw); err != nil {
		return dst, false, err
	}
	// The canonical form is never longer than the input's (an escape
	// becomes as short or shorter); its exact length only near the limit.
	n := len(raw)
	if n > d.maxOut-len(dst) {
		n = quotedLen(d.unquoted)
	}
	if dst, err = d.room(dst, n); err != nil {
		return dst, false, err
	}
	return AppendQuoted(dst, d.unquoted), true, nil
}

// quotedLen is the length of AppendQuoted's output for s.
func quotedLen(s []byte) int {
	n := 2 + len(s)
	for _, c := range s {
		switch {
		case c >= 0x20 && c != '"' && c != '\\':
		case c == '"', c == '\\', c == '\n', c == '\r', c == '\t', c == '\b', c == '\f':
			n++
		default:
			n += 5
		}
	}
	return n
}

// Unquote appends the value of the JSON string raw (quotes included, no
// raw control characters, valid UTF-8: a string a Decoder or Scanner has
// read) to dst. It refuses an unknown escape and a surrogate escape that
// is not half of a pair.
func Unquote(dst, raw []byte) ([]byte, error) {
	s := raw[1 : len(raw)-1]
	for {
		i := bytes.IndexByte(s, '\\')
		if i < 0 {
			return append(dst, s...), nil
		}
		dst = append(dst, s[:i]...)
		s = s[i:]
		if len(s) < 2 {
			return dst, fmt.Errorf("%w: unfinished escape in a string", ErrInvalid)
		}
		switch s[1] {
		case '"', '\\', '/':
			dst = append(dst, s[1])
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(s[2:])
			if !ok {
				return dst, fmt.Errorf("%w: invalid \\u escape in a string", ErrInvalid)
			}
			n := 6
			if utf16.IsSurrogate(r) {
				lo, ok := rune(0), false
				if len(s) >= 12 && s[6] == '\\' && s[7] == 'u' {
					lo, ok = hex4(s[8:])
				}
				r = utf16.DecodeRune(r, lo)
				if !ok || r == utf8.RuneError {
					return dst, fmt.Errorf("%w: lone surrogate escape in a string", ErrInvalid)
				}
				n = 12
			}
			dst = utf8.AppendRune(dst, r)
			s = s[n:]
			continue
		default:
			return dst, fmt.Errorf("%w: invalid escape \\%c in a string", ErrInvalid, s[1])
		}
		s = s[2:]
	}
}

// hex4 decodes the four hex digits that h starts with.
func hex4(h []byte) (rune, bool) {
	if len(h) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range h[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// numberByte marks the bytes a JSON number is made of.
var numberByte = func() (t [256]bool) {
	for _, c := range []byte("0123456789+-.eE") {
		t[c] = true
	}
	return t
}()

// number appends the canonical form of the number at the current position.
func (d *Decoder) number(dst []byte) ([]byte, error) {
	start := d.pos
	i := start
	for {
		buf := d.buf
		for i < len(buf) && numberByte[buf[i]] {
			i++
		}
		if i < len(buf) {
			break
		}
		shift, ok := d.fill(start)
		start -= shift
		i -= shift
		if !ok {
			if d.rerr != nil {
				return dst, d.rerr
			}
			break
		}
	}
	raw := d.buf[start:i]
	intEnd, fracEnd, ok := numberSyntax(raw)
	if !ok {
		return dst, fmt.Errorf("%w: invalid number %.40q at byte %d", ErrInvalid, raw, d.base+int64(start))
	}
	d.pos = i
	if intEnd == len(raw) {
		digits := len(raw)
		if raw[0] == '-' {
			digits--
		}
		if digits > MaxIntDigits {
			return dst, fmt.Errorf("%w: integer of %d digits (more than %d)", ErrInvalid, digits, MaxIntDigits)
		}
		if len(raw) == 2 && raw[0] == '-' && raw[1] == '0' {
			raw = raw[1:]
		}
		var err error
		if dst, err = d.room(dst, len(raw)); err != nil {
			return dst, err
		}
		return append(dst, raw...), nil
	}
	if fracEnd == len(raw) && shortestFixed(raw[:intEnd], raw[intEnd+1:]) {
		var err error
		if dst, err = d.room(dst, len(raw)); err != nil {
			return dst, err
		}
		return append(dst, raw...), nil
	}
	if cap(dst)-len(dst) >= maxFloatLen && d.maxOut-len(dst) >= maxFloatLen {
		return appendFloatText(dst, raw)
	}
	// Near the end of the buffer or the limit: written aside to learn its
	// length.
	var tmp [maxFloatLen]byte
	f, err := appendFloatText(tmp[:0], raw)
	if err != nil {
		return dst, err
	}
	if dst, err = d.room(dst, len(f)); err != nil {
		return dst, err
	}
	return append(dst, f...), nil
}

// maxFloatLen bounds the length of a float AppendFloat writes
// ("-2.2250738585072014e-308" is 24 bytes).
const maxFloatLen = 32

// numberSyntax checks raw against JSON's number grammar,
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, and returns where the
// integer part and the fraction end (both len(raw) for an integer, fracEnd
// = intEnd without a fraction).
func numberSyntax(raw []byte) (intEnd, fracEnd int, ok bool) {
	i := 0
	if i < len(raw) && raw[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(raw) && raw[i] >= '0' && raw[i] <= '9' {
			i++
			n++
		}
		return n
	}
	switch {
	case i < len(raw) && raw[i] == '0':
		i++
	case i < len(raw) && raw[i] >= '1' && raw[i] <= '9':
		digits()
	default:
		return 0, 0, false
	}
	intEnd = i
	if i < len(raw) && raw[i] == '.' {
		i++
		if digits() == 0 {
			return 0, 0, false
		}
	}
	fracEnd = i
	if i < len(raw) && (raw[i] == 'e' || raw[i] == 'E') {
		i++
		if i < len(raw) && (raw[i] == '+' || raw[i] == '-') {
			i++
		}
		if digits() == 0 {
			return 0, 0, false
		}
	}
	return intEnd, fracEnd, i == len(raw)
}

// Elements is a run of whole elements of an array, as RawElements copied
// them from the input: their text as it is (commas and white space
// included), to be read by a Decoder of their own, on another goroutine.
type Elements struct {
	Raw    []byte // the elements' text, from the first's first byte to the last's last
	Offset int64  // the input offset of Raw[0]
	N      int    // how many elements Raw holds
	depth  int    // containers around them
}

// Decoder returns a Decoder that reads the elements one by one with
// PeekKind, AppendValue and AppendObject, as the Decoder that copied them
// would have: the same canonical bytes, and the same errors at the same
// input offsets.
func (e Elements) Decoder() *Decoder {
	d := newBytesDecoder(e.Raw)
	d.base = e.Offset
	d.frames = make([]frame, e.depth) // the innermost: the array, at its start
	return d
}

// RawElements copies from the input whole elements of the array being
// read (the innermost container ReadDelim opened must be an array) into
// dst, up to about max bytes of them, checking nothing but where each one
// ends: it is the splitting step of reading a long array on several
// goroutines. It returns no elements (N == 0) at the array's end, and
// whenever it cannot tell an element's end without reading it properly
// (an element that is not an object or an array, nesting deeper than
// MaxDepth, input it doubts): the caller then reads on one element at a
// time.
func (d *Decoder) RawElements(dst []byte, max int) Elements {
	none := Elements{Raw: dst[:0]}
	c, err := d.next()
	if err != nil || len(d.frames) == 0 || d.frames[len(d.frames)-1].object || (c != '{' && c != '[') {
		return none
	}
	start := d.pos
	end := start // past the last whole element
	n := 0
	for {
		i := end
		if n > 0 {
			// Past white space and the comma to the next element's start.
			for i < len(d.buf) && isSpace[d.buf[i]] {
				i++
			}
			if i < len(d.buf) && d.buf[i] != ',' {
				break // the array's end, or something to read properly
			}
			i++
			for i < len(d.buf) && isSpace[d.buf[i]] {
				i++
			}
			if i < len(d.buf) && d.buf[i] != '{' && d.buf[i] != '[' {
				break
			}
		}
		e := -1
		if i < len(d.buf) {
			e = containerEnd(d.buf[i:], MaxDepth-len(d.frames))
		}
		if e == -2 {
			break
		}
		if e == -1 {
			// The buffer ends first: read more, keeping the run, and look
			// at this element again.
			shift, ok := d.fill(start)
			start -= shift
			end -= shift
			if !ok {
				break
			}
			continue
		}
		end = i + e
		n++
		if end-start >= max {
			break
		}
	}
	if n == 0 {
		return none
	}
	out := Elements{Raw: append(dst[:0], d.buf[start:end]...), Offset: d.base + int64(start), N: n, depth: len(d.frames)}
	d.pos = end
	f := &d.frames[len(d.frames)-1]
	f.n += n
	f.sepRead = false
	return out
}

// structural marks the bytes containerEnd stops at outside strings.
var structural = [256]bool{'"': true, '{': true, '}': true, '[': true, ']': true}

// containerEnd returns the length of the object or array that b starts
// with, found by counting brackets outside strings: -1 when b ends first,
// -2 when the nesting passes maxDepth.
func containerEnd(b []byte, maxDepth int) int {
	depth := 0
	i := 0
	for {
		for i < len(b) && !structural[b[i]] {
			i++
		}
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case '"':
			// The closing quote: the first one after an even number of
			// backslashes.
			j := i + 1
			for {
				k := bytes.IndexByte(b[j:], '"')
				if k < 0 {
					return -1
				}
				j += k
				odd := false
				for m := j - 1; m > i && b[m] == '\\'; m-- {
					odd = !odd
				}
				if !odd {
					break
				}
				j++
			}
			i = j + 1
		case '{', '[':
			if depth++; depth > maxDepth {
				return -2
			}
			i++
		default: // '}', ']'
			if depth--; depth == 0 {
				return i + 1
			}
			i++
		}
	}
}
