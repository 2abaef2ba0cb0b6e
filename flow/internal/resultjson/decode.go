// Package resultjson decodes a call's result, canonical JSON, into a Go
// value as encoding/json's Unmarshal does, about three times faster, for
// the types results usually have: booleans, strings, numbers, structs
// without embedded fields, slices, string-keyed maps, pointers, any and
// json.RawMessage. For any other type (one with its own UnmarshalJSON or
// UnmarshalText, a field tagged ,string, an array, a []byte, …) and for any
// input it does not expect (white space, a value of the wrong kind, a number
// out of range, a name given twice), Decode reports false and the caller
// decodes with encoding/json instead: it never gives a value encoding/json
// would not.
package resultjson

import (
	"encoding"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/pyrula/caseworker/canonjson"
)

// Decode sets *dst, which must hold its type's zero value, from data, one
// JSON value without white space (canonical JSON). It reports false when
// the type or the data is outside what it decodes, a value encoding/json
// would refuse included; *dst is then partly set and must be dropped.
func Decode[T any](data []byte, dst *T) bool {
	dec := decoderOf(reflect.TypeFor[T]())
	if dec == nil {
		return false
	}
	s := scanners.Get().(*scanner) // a decodeFunc's scanner escapes
	*s = scanner{data: data}
	ok := dec(s, unsafe.Pointer(dst)) && s.pos == len(data)
	*s = scanner{}
	scanners.Put(s)
	return ok
}

// scanners are Decode's scanners, reused: a long run decodes one result per
// call.
var scanners = sync.Pool{New: func() any { return new(scanner) }}

// decodeFunc decodes the value at s's position into the value of its type
// at p (holding the zero value) and reports whether it could. The common
// kinds are written through typed pointers (a string as a *string, a field
// at its offset), not through reflect.Value's checks; slices and maps are
// made with reflect.
type decodeFunc func(s *scanner, p unsafe.Pointer) bool

// decoders caches each type's decodeFunc; nil for a type Decode leaves to
// encoding/json.
var decoders sync.Map // reflect.Type → decodeFunc

func decoderOf(t reflect.Type) decodeFunc {
	if d, ok := decoders.Load(t); ok {
		return d.(decodeFunc)
	}
	b := builder{building: make(map[reflect.Type]*decodeFunc)}
	return b.build(t)
}

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	rawMessageType      = reflect.TypeFor[json.RawMessage]()
	numberType          = reflect.TypeFor[json.Number]()
)

// builder makes the decodeFuncs of a type and of the types it holds.
type builder struct {
	// building holds the types being built, for types that hold
	// themselves (type Node struct{ Next *Node }).
	building map[reflect.Type]*decodeFunc
}

func (b *builder) build(t reflect.Type) decodeFunc {
	if d, ok := decoders.Load(t); ok {
		return d.(decodeFunc)
	}
	if p, ok := b.building[t]; ok {
		return func(s *scanner, v unsafe.Pointer) bool {
			d := *p
			return d != nil && d(s, v)
		}
	}
	p := new(decodeFunc)
	b.building[t] = p
	*p = b.make(t)
	delete(b.building, t)
	decoders.Store(t, *p)
	return *p
}

func (b *builder) make(t reflect.Type) decodeFunc {
	switch {
	case t == rawMessageType:
		return decodeRaw
	case t.Kind() == reflect.Pointer:
		// A pointer's methods are its element's: the element decides.
		return b.pointer(t)
	}
	ptr := reflect.PointerTo(t)
	if t.Implements(unmarshalerType) || ptr.Implements(unmarshalerType) ||
		t.Implements(textUnmarshalerType) || ptr.Implements(textUnmarshalerType) {
		return nil
	}
	switch t.Kind() {
	case reflect.Bool:
		return decodeBool
	case reflect.String:
		if t == numberType {
			return nil
		}
		return decodeString
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return decodeInt(t.Bits())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return decodeUint(t.Bits())
	case reflect.Float32, reflect.Float64:
		return decodeFloat(t.Bits())
	case reflect.Interface:
		if t.NumMethod() != 0 {
			return nil
		}
		return decodeInterface
	case reflect.Slice:
		return b.slice(t)
	case reflect.Map:
		return b.mapOf(t)
	case reflect.Struct:
		return b.structOf(t)
	}
	return nil // arrays, complex numbers, channels, functions
}

func (b *builder) pointer(t reflect.Type) decodeFunc {
	elem := b.build(t.Elem())
	if elem == nil {
		return nil
	}
	return func(s *scanner, p unsafe.Pointer) bool {
		if s.peek() == 'n' {
			return s.literal("null") // *p is already nil
		}
		v := reflect.New(t.Elem()).UnsafePointer()
		if !elem(s, v) {
			return false
		}
		*(*unsafe.Pointer)(p) = v
		return true
	}
}

func (b *builder) slice(t reflect.Type) decodeFunc {
	if t.Elem().Kind() == reflect.Uint8 {
		return nil // base64 text or an array of numbers: encoding/json's
	}
	elem := b.build(t.Elem())
	if elem == nil {
		return nil
	}
	size := t.Elem().Size()
	return func(s *scanner, p unsafe.Pointer) bool {
		null, ok := s.open('[')
		if !ok || null {
			return ok // *p is already nil
		}
		v := reflect.NewAt(t, p).Elem()
		if s.close(']') {
			v.Set(reflect.MakeSlice(t, 0, 0)) // [] is empty, not nil
			return true
		}
		h := (*sliceHeader)(p)
		for n := 0; ; n++ {
			if n == h.cap {
				v.Grow(max(n, 4)) // doubling, from 4: results' lists are short (zeroed)
			}
			h.len = n + 1
			if !elem(s, unsafe.Add(h.data, uintptr(n)*size)) {
				return false
			}
			if !s.next() {
				return s.close(']')
			}
		}
	}
}

func (b *builder) mapOf(t reflect.Type) decodeFunc {
	key := t.Key()
	if key.Kind() != reflect.String || reflect.PointerTo(key).Implements(textUnmarshalerType) {
		return nil // integer keys and text keys: encoding/json's
	}
	elem := b.build(t.Elem())
	if elem == nil {
		return nil
	}
	return func(s *scanner, p unsafe.Pointer) bool {
		null, ok := s.open('{')
		if !ok || null {
			return ok // *p is already nil
		}
		m := reflect.MakeMap(t)
		reflect.NewAt(t, p).Elem().Set(m)
		if s.close('}') {
			return true
		}
		k := reflect.New(key).Elem()
		for {
			name, ok := s.name()
			if !ok {
				return false
			}
			k.SetString(string(name))
			e := reflect.New(t.Elem())
			if !elem(s, e.UnsafePointer()) {
				return false
			}
			m.SetMapIndex(k, e.Elem())
			if !s.next() {
				return s.close('}')
			}
		}
	}
}

// field is a struct field that JSON names.
type field struct {
	name   string
	folded string // name folded as encoding/json matches names without case
	index  int
	offset uintptr
	dec    decodeFunc
}

// maxFields bounds the fields of a struct Decode takes (a bit each, to
// tell a field named twice).
const maxFields = 64

func (b *builder) structOf(t reflect.Type) decodeFunc {
	var fields []field
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Anonymous {
			return nil // embedded fields: encoding/json's promotion rules
		}
		name, opts, ok := canonjson.FieldName(sf)
		if !ok {
			continue
		}
		if hasOption(opts, "string") {
			return nil
		}
		fields = append(fields, field{name: name, folded: string(appendFolded(nil, []byte(name))), index: i, offset: sf.Offset})
	}
	if len(fields) > maxFields {
		return nil
	}
	for i := range fields {
		for j := range i {
			if fields[j].name == fields[i].name {
				return nil // encoding/json drops or picks by tags
			}
		}
	}
	// The decoders of the fields' types come after the list is known, so
	// that a type that holds itself finds its own decoder in building.
	for i := range fields {
		if fields[i].dec = b.build(t.Field(fields[i].index).Type); fields[i].dec == nil {
			return nil
		}
	}
	return func(s *scanner, p unsafe.Pointer) bool {
		null, ok := s.open('{')
		if !ok || null || s.close('}') {
			return ok // a struct ignores null
		}
		var seen uint64
		var fold [32]byte
		for {
			name, ok := s.name()
			if !ok {
				return false
			}
			f := lookup(fields, name, fold[:0])
			if f < 0 {
				if !s.skip() {
					return false
				}
			} else {
				if seen&(1<<f) != 0 {
					return false // two names of one field: encoding/json merges
				}
				seen |= 1 << f
				if !fields[f].dec(s, unsafe.Add(p, fields[f].offset)) {
					return false
				}
			}
			if !s.next() {
				return s.close('}')
			}
		}
	}
}

// lookup returns the index in fields of the field name decodes into, as
// encoding/json finds it: the field of that exact name, else the first
// whose name is equal without case (Unicode simple folding); -1 for none.
func lookup(fields []field, name, buf []byte) int {
	for i := range fields {
		if fields[i].name == string(name) {
			return i
		}
	}
	folded := appendFolded(buf, name)
	for i := range fields {
		if fields[i].folded == string(folded) {
			return i
		}
	}
	return -1
}

// appendFolded appends name folded as encoding/json folds field names:
// ASCII letters upper case, other runes the smallest of their fold set.
func appendFolded(dst, name []byte) []byte {
	for i := 0; i < len(name); {
		if c := name[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(name[i:])
		for {
			r2 := unicode.SimpleFold(r)
			if r2 <= r {
				r = r2
				break
			}
			r = r2
		}
		dst = utf8.AppendRune(dst, r)
		i += n
	}
	return dst
}

// hasOption reports whether the comma-separated tag options opts hold name.
func hasOption(opts, name string) bool {
	for opts != "" {
		var o string
		o, opts, _ = strings.Cut(opts, ",")
		if o == name {
			return true
		}
	}
	return false
}

func decodeBool(s *scanner, p unsafe.Pointer) bool {
	switch s.peek() {
	case 't':
		*(*bool)(p) = true
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	}
	return false
}

func decodeString(s *scanner, p unsafe.Pointer) bool {
	switch s.peek() {
	case '"':
		str, ok := s.str()
		if ok {
			*(*string)(p) = string(str)
		}
		return ok
	case 'n':
		return s.literal("null")
	}
	return false
}

// decodeNumber returns the decoder of a number kind: it reads a number
// (null leaves the value as it is) and set sets *p from its text, reporting
// false for text *p's type cannot hold.
func decodeNumber(set func(text string, p unsafe.Pointer) bool) decodeFunc {
	return func(s *scanner, p unsafe.Pointer) bool {
		num, ok := s.numberOrNull()
		if !ok || num == nil {
			return ok
		}
		return set(unsafeString(num), p)
	}
}

// decodeInt is the decoder of the signed integers of that many bits.
func decodeInt(bits int) decodeFunc {
	lo, hi := int64(-1)<<(bits-1), int64(uint64(1)<<(bits-1)-1)
	return decodeNumber(func(text string, p unsafe.Pointer) bool {
		if n, ok := shortInt(text); ok && lo <= n && n <= hi {
			storeInteger(p, bits, uint64(n))
			return true
		}
		n, err := strconv.ParseInt(text, 10, bits)
		if err == nil {
			storeInteger(p, bits, uint64(n))
		}
		return err == nil
	})
}

// decodeUint is the decoder of the unsigned integers of that many bits.
func decodeUint(bits int) decodeFunc {
	hi := int64(math.MaxInt64) // a short integer is below 10^18
	if bits < 64 {
		hi = int64(1)<<bits - 1
	}
	return decodeNumber(func(text string, p unsafe.Pointer) bool {
		if n, ok := shortInt(text); ok && 0 <= n && n <= hi && text[0] != '-' {
			storeInteger(p, bits, uint64(n))
			return true
		}
		n, err := strconv.ParseUint(text, 10, bits)
		if err == nil {
			storeInteger(p, bits, n)
		}
		return err == nil
	})
}

// storeInteger stores the low bits of n at p, an integer of that many
// bits, signed or not (two's complement: the same bits).
func storeInteger(p unsafe.Pointer, bits int, n uint64) {
	switch bits {
	case 8:
		*(*uint8)(p) = uint8(n)
	case 16:
		*(*uint16)(p) = uint16(n)
	case 32:
		*(*uint32)(p) = uint32(n)
	default:
		*(*uint64)(p) = n
	}
}

// shortInt returns the value of text, a number of JSON's grammar, when it
// is an integer of at most 18 digits (no fraction, no exponent), which an
// int64 holds: the common case, read without strconv's general path.
func shortInt(text string) (int64, bool) {
	digits := text
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(digits); i++ {
		c := digits[i] - '0'
		if c > 9 { // '.', 'e' or 'E'
			return 0, false
		}
		n = n*10 + int64(c)
	}
	if text[0] == '-' {
		n = -n
	}
	return n, true
}

// exactPow10 are the powers of ten a float64 holds exactly, up to the
// largest exactFloat divides by.
var exactPow10 = [...]float64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}

// exactFloat returns the float64 of text, a number of JSON's grammar, when
// it has no exponent and at most 15 digits: the digits, an integer below
// 2^53, and the power of ten of its fraction are both exact, so their
// quotient is the correctly rounded value, the float64 strconv.ParseFloat
// returns (which takes the same shortcut).
func exactFloat(text string) (float64, bool) {
	digits := text
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) > 16 { // 15 digits and a point
		return 0, false
	}
	var m uint64
	fraction, n := -1, 0
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		switch {
		case '0' <= c && c <= '9':
			m = m*10 + uint64(c-'0')
			n++
		case c == '.':
			fraction = n
		default: // an exponent
			return 0, false
		}
	}
	if n > 15 {
		return 0, false
	}
	f := float64(m)
	if fraction >= 0 {
		f /= exactPow10[n-fraction]
	}
	if text[0] == '-' {
		f = -f
	}
	return f, true
}

// decodeFloat is the decoder of the floats of that many bits.
func decodeFloat(bits int) decodeFunc {
	return decodeNumber(func(text string, p unsafe.Pointer) bool {
		if bits == 64 {
			if f, ok := exactFloat(text); ok {
				*(*float64)(p) = f
				return true
			}
		}
		f, err := strconv.ParseFloat(text, bits)
		switch {
		case err != nil:
			return false
		case bits == 32:
			*(*float32)(p) = float32(f)
		default:
			*(*float64)(p) = f
		}
		return true
	})
}

// sliceHeader is the layout of a slice.
type sliceHeader struct {
	data     unsafe.Pointer
	len, cap int
}

func decodeRaw(s *scanner, p unsafe.Pointer) bool {
	start := s.pos
	if !s.skip() {
		return false
	}
	*(*[]byte)(p) = append([]byte(nil), s.data[start:s.pos]...)
	return true
}

func decodeInterface(s *scanner, p unsafe.Pointer) bool {
	a, ok := s.anyValue()
	if ok && a != nil {
		*(*any)(p) = a
	}
	return ok
}

// unsafeString views b as a string for a call that does not keep it.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// maxDepth bounds the nesting Decode follows (encoding/json's bound is
// 10,000); deeper values are encoding/json's.
const maxDepth = 1000

// scanner reads JSON without white space, strictly: anything it does not
// expect makes its methods report false.
type scanner struct {
	data  []byte
	pos   int
	depth int // of the arrays and objects open
}

// peek returns the byte at the position, 0 at the end.
func (s *scanner) peek() byte {
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

// literal consumes lit (true, false or null).
func (s *scanner) literal(lit string) bool {
	if !strings.HasPrefix(unsafeString(s.data[s.pos:]), lit) {
		return false
	}
	s.pos += len(lit)
	return true
}

// next consumes a comma and reports true, or reports false at anything
// else (the caller then expects the end of the array or object).
func (s *scanner) next() bool {
	if s.peek() == ',' {
		s.pos++
		return true
	}
	return false
}

// open consumes c, the opening bracket of an array or object, or a null:
// null says which, ok false is for anything else and past maxDepth.
func (s *scanner) open(c byte) (null, ok bool) {
	switch s.peek() {
	case c:
		if s.depth++; s.depth > maxDepth {
			return false, false
		}
		s.pos++
		return false, true
	case 'n':
		return true, s.literal("null")
	}
	return false, false
}

// close consumes end, the closing bracket of what open opened.
func (s *scanner) close(end byte) bool {
	if s.peek() == end {
		s.pos++
		s.depth--
		return true
	}
	return false
}

// name reads an object member's name and the colon after it.
func (s *scanner) name() ([]byte, bool) {
	if s.peek() != '"' {
		return nil, false
	}
	name, ok := s.str()
	if !ok || s.peek() != ':' {
		return nil, false
	}
	s.pos++
	return name, true
}

// str reads a string and returns its value, which shares memory with the
// input when the string has no escape.
func (s *scanner) str() ([]byte, bool) {
	start := s.pos
	i := start + 1
	ascii, escaped := true, false
	for ; i < len(s.data); i++ {
		c := s.data[i]
		switch {
		case c == '"':
			raw := s.data[start : i+1]
			s.pos = i + 1
			body := raw[1 : len(raw)-1]
			if !ascii && !utf8.Valid(body) {
				return nil, false // encoding/json replaces bad bytes
			}
			if !escaped {
				return body, true
			}
			out, err := canonjson.Unquote(nil, raw)
			return out, err == nil
		case c == '\\':
			escaped = true
			i++ // the escaped byte; Unquote checks the escape
		case c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

// numberOrNull reads a number and returns its text, or null (nil text).
func (s *scanner) numberOrNull() ([]byte, bool) {
	if s.peek() == 'n' {
		return nil, s.literal("null")
	}
	return s.number()
}

// number reads a number of JSON's grammar and returns its text.
func (s *scanner) number() ([]byte, bool) {
	d, i := s.data, s.pos
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		i = digits(d, i)
	default:
		return nil, false
	}
	if i < len(d) && d[i] == '.' {
		j := digits(d, i+1)
		if j == i+1 {
			return nil, false
		}
		i = j
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		j := digits(d, i)
		if j == i {
			return nil, false
		}
		i = j
	}
	num := d[s.pos:i]
	s.pos = i
	return num, true
}

func digits(d []byte, i int) int {
	for i < len(d) && '0' <= d[i] && d[i] <= '9' {
		i++
	}
	return i
}

// skip reads past one value, checking its grammar.
func (s *scanner) skip() bool {
	switch s.peek() {
	case '"':
		_, ok := s.str()
		return ok
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	case '[':
		if _, ok := s.open('['); !ok {
			return false
		}
		if s.close(']') {
			return true
		}
		for {
			if !s.skip() {
				return false
			}
			if !s.next() {
				return s.close(']')
			}
		}
	case '{':
		if _, ok := s.open('{'); !ok {
			return false
		}
		if s.close('}') {
			return true
		}
		for {
			if _, ok := s.name(); !ok || !s.skip() {
				return false
			}
			if !s.next() {
				return s.close('}')
			}
		}
	}
	_, ok := s.number()
	return ok
}

// anyValue reads a value as encoding/json decodes it into an empty
// interface: map[string]any, []any, string, float64, bool or nil.
func (s *scanner) anyValue() (any, bool) {
	switch s.peek() {
	case '"':
		str, ok := s.str()
		return string(str), ok
	case 't':
		return true, s.literal("true")
	case 'f':
		return false, s.literal("false")
	case 'n':
		return nil, s.literal("null")
	case '[':
		if _, ok := s.open('['); !ok {
			return nil, false
		}
		out := []any{}
		if s.close(']') {
			return out, true
		}
		for {
			v, ok := s.anyValue()
			if !ok {
				return nil, false
			}
			out = append(out, v)
			if !s.next() {
				return out, s.close(']')
			}
		}
	case '{':
		if _, ok := s.open('{'); !ok {
			return nil, false
		}
		out := map[string]any{}
		if s.close('}') {
			return out, true
		}
		for {
			name, ok := s.name()
			if !ok {
				return nil, false
			}
			v, ok := s.anyValue()
			if !ok {
				return nil, false
			}
			out[string(name)] = v
			if !s.next() {
				return out, s.close('}')
			}
		}
	}
	num, ok := s.number()
	if !ok {
		return nil, false
	}
	f, err := strconv.ParseFloat(unsafeString(num), 64)
	return f, err == nil
}
