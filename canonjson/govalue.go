package canonjson

import (
	"encoding"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// AppendGo appends the canonical JSON of the Go value v to dst: byte for
// byte what Append writes for json.Marshal(v)'s output, without the
// intermediate text. It takes the types call inputs and results usually
// have: booleans, integers, float64, strings, structs without embedded
// fields, slices, arrays, maps with string keys, pointers and interfaces
// holding those. ok is false, and dst returned as it was, for anything
// else (a type with its own MarshalJSON or MarshalText, a []byte, a
// float32, a json.Number, a struct field tagged ",string" or
// ",omitzero", an embedded field, two fields of one name) and for values
// json.Marshal would change or refuse (a string that is not valid UTF-8,
// NaN or an infinity, nesting past 64 levels, which is where a cycle
// would go): the caller then takes the general path, json.Marshal and
// Append, which gives the same bytes or the error.
func AppendGo(dst []byte, v any) (out []byte, ok bool) {
	if v == nil {
		return append(dst, "null"...), true
	}
	rv := reflect.ValueOf(v)
	enc := encoderOf(rv.Type())
	if enc == nil {
		return dst, false
	}
	out, ok = enc(dst, rv, 0)
	if !ok {
		return dst, false
	}
	return out, true
}

// maxGoDepth is the nesting AppendGo follows before it leaves the value to
// the general path (which also detects cycles).
const maxGoDepth = 64

// goEncoder appends the canonical JSON of v, a value of the type it was
// built for, at nesting depth; false means the value must take the general
// path.
type goEncoder func(dst []byte, v reflect.Value, depth int) ([]byte, bool)

// goEncoders caches the encoder of each type (a nil *goEncoder: the type
// takes the general path).
var goEncoders sync.Map // reflect.Type → *goEncoder

var (
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
	jsonNumberType    = reflect.TypeFor[json.Number]()
)

// encoderOf returns the encoder of t, nil for a type AppendGo leaves to
// the general path.
func encoderOf(t reflect.Type) goEncoder {
	if e, ok := goEncoders.Load(t); ok {
		return *e.(*goEncoder)
	}
	// A recursive type reaches itself while it is built: the placeholder
	// forwards to the encoder once it is known.
	var (
		wg  sync.WaitGroup
		enc goEncoder
	)
	wg.Add(1)
	forward := goEncoder(func(dst []byte, v reflect.Value, depth int) ([]byte, bool) {
		wg.Wait()
		if enc == nil {
			return dst, false
		}
		return enc(dst, v, depth)
	})
	if e, loaded := goEncoders.LoadOrStore(t, &forward); loaded {
		return *e.(*goEncoder)
	}
	enc = buildEncoder(t)
	wg.Done()
	goEncoders.Store(t, &enc)
	return enc
}

// buildEncoder makes the encoder of t (nil: the general path).
func buildEncoder(t reflect.Type) goEncoder {
	if t.Implements(jsonMarshalerType) || t.Implements(textMarshalerType) ||
		reflect.PointerTo(t).Implements(jsonMarshalerType) || reflect.PointerTo(t).Implements(textMarshalerType) ||
		t == jsonNumberType {
		return nil
	}
	switch t.Kind() {
	case reflect.Bool:
		return func(dst []byte, v reflect.Value, _ int) ([]byte, bool) {
			if v.Bool() {
				return append(dst, "true"...), true
			}
			return append(dst, "false"...), true
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return func(dst []byte, v reflect.Value, _ int) ([]byte, bool) {
			return strconv.AppendInt(dst, v.Int(), 10), true
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return func(dst []byte, v reflect.Value, _ int) ([]byte, bool) {
			return strconv.AppendUint(dst, v.Uint(), 10), true
		}
	case reflect.Float64:
		return func(dst []byte, v reflect.Value, _ int) ([]byte, bool) {
			return appendGoFloat(dst, v.Float())
		}
	case reflect.String:
		return func(dst []byte, v reflect.Value, _ int) ([]byte, bool) {
			s := v.String()
			if !utf8.ValidString(s) {
				return dst, false // json.Marshal writes U+FFFD for the bad bytes
			}
			return appendQuotedString(dst, s), true
		}
	case reflect.Interface:
		return func(dst []byte, v reflect.Value, depth int) ([]byte, bool) {
			if v.IsNil() {
				return append(dst, "null"...), true
			}
			e := v.Elem()
			enc := encoderOf(e.Type())
			if enc == nil || depth >= maxGoDepth {
				return dst, false
			}
			return enc(dst, e, depth+1)
		}
	case reflect.Pointer:
		elem := encoderOf(t.Elem())
		if elem == nil {
			return nil
		}
		return func(dst []byte, v reflect.Value, depth int) ([]byte, bool) {
			if v.IsNil() {
				return append(dst, "null"...), true
			}
			if depth >= maxGoDepth {
				return dst, false
			}
			return elem(dst, v.Elem(), depth+1)
		}
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
			return nil // base64, or a MarshalJSON of its elements
		}
		elem := encoderOf(t.Elem())
		if elem == nil {
			return nil
		}
		nilable := t.Kind() == reflect.Slice
		return func(dst []byte, v reflect.Value, depth int) ([]byte, bool) {
			if nilable && v.IsNil() {
				return append(dst, "null"...), true
			}
			return appendGoElements(dst, v, depth, elem)
		}
	case reflect.Map:
		if t.Key().Kind() != reflect.String || t.Key().Implements(textMarshalerType) ||
			reflect.PointerTo(t.Key()).Implements(textMarshalerType) {
			return nil
		}
		elem := encoderOf(t.Elem())
		if elem == nil {
			return nil
		}
		return func(dst []byte, v reflect.Value, depth int) ([]byte, bool) {
			return appendGoMap(dst, v, depth, elem)
		}
	case reflect.Struct:
		return structEncoder(t)
	}
	return nil // float32, complex, chan, func, unsafe.Pointer
}

// appendGoFloat appends f as Append writes json.Marshal's text for it:
// integral values under 1e21 in json.Marshal's plain digits (which Append
// keeps, "-0" as "0"), other values as Python's repr.
func appendGoFloat(dst []byte, f float64) ([]byte, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, false
	}
	if f == 0 {
		return append(dst, '0'), true
	}
	if abs := math.Abs(f); abs >= 1e-6 && abs < 1e21 && f == math.Trunc(f) {
		return strconv.AppendFloat(dst, f, 'f', -1, 64), true
	}
	return AppendFloat(dst, f), true
}

// appendGoElements appends v's elements (a slice or an array) as a JSON
// array.
func appendGoElements(dst []byte, v reflect.Value, depth int, elem goEncoder) ([]byte, bool) {
	if depth >= maxGoDepth {
		return dst, false
	}
	dst = append(dst, '[')
	for i := range v.Len() {
		if i > 0 {
			dst = append(dst, ',')
		}
		var ok bool
		if dst, ok = elem(dst, v.Index(i), depth+1); !ok {
			return dst, false
		}
	}
	return append(dst, ']'), true
}

// appendGoMap appends v, a map with string keys, as a JSON object with its
// keys in code-point order (byte order, for valid UTF-8).
func appendGoMap(dst []byte, v reflect.Value, depth int, elem goEncoder) ([]byte, bool) {
	if v.IsNil() {
		return append(dst, "null"...), true
	}
	if depth >= maxGoDepth {
		return dst, false
	}
	type member struct {
		key string
		val reflect.Value
	}
	members := make([]member, 0, v.Len())
	for it := v.MapRange(); it.Next(); {
		k := it.Key().String()
		if !utf8.ValidString(k) {
			return dst, false
		}
		members = append(members, member{k, it.Value()})
	}
	slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.key, b.key) })
	dst = append(dst, '{')
	for i, m := range members {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(appendQuotedString(dst, m.key), ':')
		var ok bool
		if dst, ok = elem(dst, m.val, depth+1); !ok {
			return dst, false
		}
	}
	return append(dst, '}'), true
}

// goField is a struct field as json.Marshal writes it.
type goField struct {
	index     int
	name      string // the JSON name
	prefix    string // `"name":`
	omitEmpty bool
	enc       goEncoder
}

// structEncoder is the encoder of a struct type: its exported fields under
// their JSON names, sorted by name; nil where json.Marshal's rules go past
// the plain case (embedded fields, options other than omitempty, two
// fields of one name).
func structEncoder(t reflect.Type) goEncoder {
	var fields []goField
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Anonymous {
			return nil
		}
		name, opts, ok := FieldName(sf)
		if !ok {
			continue
		}
		f := goField{index: i, name: name}
		for opt := range strings.SplitSeq(opts, ",") {
			switch opt {
			case "":
			case "omitempty":
				f.omitEmpty = true
			default:
				return nil // string, omitzero, or one json.Marshal may learn
			}
		}
		if !utf8.ValidString(name) {
			return nil
		}
		if f.enc = encoderOf(sf.Type); f.enc == nil {
			return nil
		}
		f.prefix = string(appendQuotedString(nil, name)) + ":"
		fields = append(fields, f)
	}
	slices.SortFunc(fields, func(a, b goField) int { return strings.Compare(a.name, b.name) })
	for i := 1; i < len(fields); i++ {
		if fields[i].name == fields[i-1].name {
			return nil
		}
	}
	return func(dst []byte, v reflect.Value, depth int) ([]byte, bool) {
		if depth >= maxGoDepth {
			return dst, false
		}
		dst = append(dst, '{')
		first := true
		for i := range fields {
			f := &fields[i]
			fv := v.Field(f.index)
			if f.omitEmpty && isEmptyValue(fv) {
				continue
			}
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = append(dst, f.prefix...)
			var ok bool
			if dst, ok = f.enc(dst, fv, depth+1); !ok {
				return dst, false
			}
		}
		return append(dst, '}'), true
	}
}

// isEmptyValue is json.Marshal's test for omitempty.
func isEmptyValue(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}

// FieldName is the JSON name encoding/json gives struct field sf (its
// tag's name when that is a valid one, else its Go name) and the options
// of its tag ("omitempty,string"); ok is false for a field encoding/json
// leaves out (unexported, or tagged "-"). Embedded fields, whose fields
// encoding/json promotes, are the caller's to refuse.
func FieldName(sf reflect.StructField) (name, opts string, ok bool) {
	if !sf.IsExported() {
		return "", "", false
	}
	tag := sf.Tag.Get("json")
	if tag == "-" {
		return "", "", false
	}
	name, opts, _ = strings.Cut(tag, ",")
	if !isValidTag(name) {
		name = sf.Name
	}
	return name, opts, true
}

// isValidTag is json.Marshal's test of a tag's name: otherwise the field
// keeps its Go name.
func isValidTag(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}

// appendQuotedString is AppendQuoted for a string.
func appendQuotedString(dst []byte, s string) []byte {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' {
			return AppendQuoted(dst, []byte(s))
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
