package resultjson_test

import (
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/pyrula/caseworker/canonjson"
	"github.com/pyrula/caseworker/flow/internal/resultjson"
)

type inner struct {
	A int     `json:"a"`
	B *string `json:"b,omitempty"`
}

type label string

type node struct {
	Value int   `json:"value"`
	Next  *node `json:"next"`
	Kids  []node
}

// probe has fields of the kinds results decode into, and the ones where
// decoders tend to differ: names matched without case (ASCII and Unicode
// folding), invalid tags, a "-," tag, unexported fields, raw messages,
// interfaces, named types, narrow numbers, nested pointers.
type probe struct {
	ID     int                        `json:"id"`
	Name   string                     `json:"name"`
	Total  float64                    `json:"total"`
	Ratio  float32                    `json:"ratio"`
	Small  int8                       `json:"small"`
	U      uint                       `json:"u"`
	U8     uint8                      `json:"u8"`
	Items  []string                   `json:"items"`
	Map    map[string]any             `json:"map"`
	Labels map[label]label            `json:"labels"`
	Inner  *inner                     `json:"inner"`
	Inners []inner                    `json:"inners"`
	PP     **int                      `json:"pp"`
	Raw    json.RawMessage            `json:"raw"`
	RawPtr *json.RawMessage           `json:"raw_ptr"`
	RawMap map[string]json.RawMessage `json:"raw_map"`
	Any    any                        `json:"any"`
	Flag   bool                       `json:"flag"`
	Mixed  string                     `json:"MiXeD"`
	Kelvin string                     `json:"kelvin"` // "\u212aelvin" (Kelvin sign) folds to it
	//lint:ignore SA5008 an invalid tag on purpose: the field's name is used
	Bad string `json:"a\\b"`
	//lint:ignore SA5008 the field named "-", on purpose
	Dash    string `json:"-,"`
	Skipped string `json:"-"`
	NoTag   int
	Node    *node                    `json:"node"`
	Nested  [][]map[string][]float64 `json:"nested"`
	//lint:ignore U1000 an unexported field, which decoding must leave alone
	internal int
}

// outside are types Decode leaves to encoding/json.
type withArray struct {
	Arr [2]int `json:"arr"`
}
type withBytes struct {
	B []byte `json:"b"`
}
type withQuoted struct {
	N int `json:"n,string"`
}
type withEmbedded struct {
	inner
	C int `json:"c"`
}
type withTwins struct {
	A int `json:"B"`
	B int
}
type withNumber struct {
	N json.Number `json:"n"`
}
type withIntKeys struct {
	M map[int]string `json:"m"`
}
type withStringer struct {
	S interface{ String() string } `json:"s"`
}

// check decodes in into a T with Decode and with encoding/json: when
// Decode takes it, both must give the same value and encoding/json no
// error. It returns whether Decode took it.
func check[T any](t *testing.T, in []byte) bool {
	t.Helper()
	var got T
	if !resultjson.Decode(in, &got) {
		return false
	}
	var want T
	if err := json.Unmarshal(in, &want); err != nil {
		t.Fatalf("%T %s: Decode took what encoding/json refuses: %v (got %#v)", got, in, err, got)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%T %s:\ngot  %#v\nwant %#v", got, in, got, want)
	}
	return true
}

func checkAll(t *testing.T, in []byte) {
	t.Helper()
	check[probe](t, in)
	check[any](t, in)
	check[map[string]json.RawMessage](t, in)
	check[map[string]any](t, in)
	check[[]any](t, in)
	check[[]inner](t, in)
	check[*node](t, in)
	check[string](t, in)
	check[float64](t, in)
	check[int](t, in)
	check[*int](t, in)
	check[bool](t, in)
	check[json.RawMessage](t, in)
}

var inputs = []string{
	`{"id":1,"items":["a"],"name":"x","total":1.5}`,
	`{"ID":2,"NAME":"y","mixed":"m","Kelvin":"k","noTAG":3}`,
	`{"\u212aelvin":"kelvin sign","a\\b":"bad tag","Bad":"field name","-":"dash","Skipped":"no","internal":4}`,
	`{"ratio":3.4028235e+38,"small":-128,"u":18446744073709551615,"u8":255}`,
	`{"ratio":1e+39}`, `{"small":300}`, `{"u":-1}`, `{"u8":256}`, `{"id":1.5}`, `{"id":1e2}`, `{"total":1e400}`,
	`{"items":"a"}`, `{"items":[1]}`, `{"name":1}`, `{"flag":"true"}`, `{"flag":null,"id":null,"name":null,"total":null}`,
	`{"map":{"a":[1,{"b":null}],"c":1e+16,"d":"\u00e9\n\"\\"},"labels":{"k":"v"}}`,
	`{"inner":{"a":1,"b":"s"},"inners":[{"a":2},null,{}]}`, `{"inner":null,"inners":null,"items":null,"map":null}`,
	`{"items":[],"map":{},"inners":[]}`,
	`{"pp":7}`, `{"pp":null}`,
	`{"raw":{"z":[1,2]},"raw_ptr":null,"raw_map":{"k":null,"l":[true]},"any":[true,"s",1.25,null]}`,
	`{"raw":null,"raw_ptr":[1]}`,
	`{"node":{"Kids":[{"value":3}],"next":{"next":{"value":2},"value":1},"value":0}}`,
	`{"nested":[[{"a":[1,2.5]},{}],[]]}`,
	`{"id":1,"ID":2}`, `{"Name":"a","name":"b"}`,
	`{"unknown":{"deep":[1,{"x":null}],"s":"\ud83d\ude00"},"id":5}`,
	`null`, `[]`, `{}`, `1`, `-0`, `"s"`, `true`, `[{"a":1},{"b":"x"}]`, `[1,"a",null]`,
	`{"id":999999999999999999,"small":127,"u":999999999999999999,"u8":0,"total":123456789012345,"ratio":0.1}`,
	`{"id":-999999999999999999,"small":-129}`, `{"id":9223372036854775807,"u":9223372036854775808}`,
	`{"id":-9223372036854775808}`, `{"id":9223372036854775808}`, `{"u8":-0}`, `{"u":-0}`, `{"id":-0}`,
	`{"total":-0.0}`, `{"total":0.000000000000001}`, `{"total":1234567890.12345}`, `{"total":1234567890.123456}`,
	`{"total":9007199254740993}`, `{"total":900719925474099.3}`, `{"ratio":16777217}`,
	`[-0.0,0.30000000000000004,123456789012345.6,1.5e3,0.1,100000000000000000000.5]`,
	`{"a":1,}`, `[1,]`, `{"a" :1}`, ` {}`, `{"a":1} `, `[01]`, `{"a":tru}`, `"\x"`, `"\ud800"`, `{"id":1}{}`,
}

func TestDecodeMatchesEncodingJSON(t *testing.T) {
	for _, in := range inputs {
		checkAll(t, []byte(in))
	}
}

// TestDecodeTakesResults: the types and values results have are decoded
// here, not handed back to encoding/json.
func TestDecodeTakesResults(t *testing.T) {
	for _, in := range []string{
		`{"id":1,"items":["a","b"],"name":"x","total":1.5,"ratio":0.5,"small":-1,"u":2,"u8":3}`,
		`{"ID":2,"NAME":"y","\u212aelvin":"k","flag":true}`,
		`{"any":{"a":[1,"x",null,false]},"inner":{"a":1,"b":"s"},"inners":[{"a":2},null],"labels":{"k":"v"}}`,
		`{"map":{"a":{"b":[]}},"node":{"next":{"value":1}},"pp":3,"raw":{"z":1},"raw_map":{"k":null}}`,
		`{"unknown":[{"x":"\u00e9\n"}],"nested":[[{"a":[1]}]]}`,
		`null`, `{}`,
	} {
		if !check[probe](t, []byte(in)) {
			t.Errorf("probe %s: left to encoding/json", in)
		}
	}
	for _, in := range []string{`{"a":[1,{"b":null}],"c":"d"}`, `[]`, `"s"`, `1.5`, `null`} {
		if !check[any](t, []byte(in)) {
			t.Errorf("any %s: left to encoding/json", in)
		}
	}
}

// TestDecodeLeavesOthers: types with encoding/json rules of their own are
// left to it, whatever the input.
func TestDecodeLeavesOthers(t *testing.T) {
	for _, c := range []struct {
		in   string
		took bool
	}{
		{`{"arr":[1,2]}`, resultjson.Decode([]byte(`{"arr":[1,2]}`), new(withArray))},
		{`{"b":"aGk="}`, resultjson.Decode([]byte(`{"b":"aGk="}`), new(withBytes))},
		{`{"n":"1"}`, resultjson.Decode([]byte(`{"n":"1"}`), new(withQuoted))},
		{`{"a":1,"c":2}`, resultjson.Decode([]byte(`{"a":1,"c":2}`), new(withEmbedded))},
		{`{"B":1}`, resultjson.Decode([]byte(`{"B":1}`), new(withTwins))},
		{`{"n":1}`, resultjson.Decode([]byte(`{"n":1}`), new(withNumber))},
		{`{"m":{"1":"a"}}`, resultjson.Decode([]byte(`{"m":{"1":"a"}}`), new(withIntKeys))},
		{`{"s":null}`, resultjson.Decode([]byte(`{"s":null}`), new(withStringer))},
	} {
		if c.took {
			t.Errorf("%s: Decode took a type it leaves to encoding/json", c.in)
		}
	}
}

// FuzzDecode: on any input, canonical or not, whatever Decode takes it
// decodes as encoding/json does.
//
//	go test -run '^$' -fuzz FuzzDecode -fuzztime 60s ./flow/internal/resultjson/
func FuzzDecode(f *testing.F) {
	for _, in := range inputs {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		checkAll(t, in)
		if canon, err := canonjson.Canonicalize(in); err == nil {
			checkAll(t, canon)
		}
	})
}

// TestDecodeDepth: nesting is followed to a bound (encoding/json has one
// of its own), in typed values, in any and in skipped members alike.
func TestDecodeDepth(t *testing.T) {
	nested := func(depth int, open, leaf, close string) []byte {
		return []byte(strings.Repeat(open, depth) + leaf + strings.Repeat(close, depth))
	}
	for _, c := range []struct {
		name string
		in   []byte
		took func([]byte) bool
	}{
		{"typed", nested(999, `{"next":`, `{"value":1}`, `}`), func(b []byte) bool { return check[node](t, b) }},
		{"any", nested(1000, `[`, `1`, `]`), func(b []byte) bool { return check[any](t, b) }},
		{"skipped", nested(1000, `{"x":`, `1`, `}`), func(b []byte) bool { return check[inner](t, b) }},
	} {
		if !c.took(c.in) {
			t.Errorf("%s: 1,000 levels left to encoding/json", c.name)
		}
		deeper := append(append([]byte(`[`), c.in...), ']')
		if c.name != "any" {
			deeper = append(append([]byte(`{"next":`), c.in...), '}')
			if c.name == "skipped" {
				deeper = append(append([]byte(`{"x":`), c.in...), '}')
			}
		}
		if c.took(deeper) {
			t.Errorf("%s: 1,001 levels decoded", c.name)
		}
	}
}

// TestDecodeNumbersAsStrconv: a number decodes to the bits strconv gives
// it, the sign of a negative zero included (reflect.DeepEqual cannot tell
// -0 from 0), and into each integer size exactly when strconv takes it.
func TestDecodeNumbersAsStrconv(t *testing.T) {
	numbers := []string{
		"0", "-0", "-0.0", "0.1", "0.5", "1.5", "-1.5", "0.30000000000000004", "123456789012345",
		"12345678901234.5", "1234567890.123456", "0.000000000000001", "0.0000000000000001",
		"9007199254740993", "900719925474099.3", "999999999999999", "9999999999999999",
		"127", "128", "-128", "-129", "255", "256", "32767", "32768", "65535", "65536",
		"2147483647", "2147483648", "-2147483648", "-2147483649", "4294967295", "4294967296",
		"999999999999999999", "-999999999999999999", "1000000000000000000",
		"9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
		"18446744073709551615", "18446744073709551616", "1e2", "1.0", "10.50",
	}
	for _, text := range numbers {
		var got float64
		want, err := strconv.ParseFloat(text, 64)
		if ok := resultjson.Decode([]byte(text), &got); ok != (err == nil) || ok && math.Float64bits(got) != math.Float64bits(want) {
			t.Errorf("float64 %s: Decode %v (%v), strconv %v (%v)", text, got, ok, want, err)
		}
		checkInteger[int8](t, text)
		checkInteger[int16](t, text)
		checkInteger[int32](t, text)
		checkInteger[int64](t, text)
		checkInteger[uint8](t, text)
		checkInteger[uint16](t, text)
		checkInteger[uint32](t, text)
		checkInteger[uint64](t, text)
	}
}

// checkInteger decodes text into a T and checks it against strconv's
// reading of it for T's size and sign.
func checkInteger[T int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64](t *testing.T, text string) {
	t.Helper()
	var got, want T
	bits := int(unsafe.Sizeof(got)) * 8
	var err error
	if ^T(0) < 0 { // signed
		var n int64
		n, err = strconv.ParseInt(text, 10, bits)
		want = T(n)
	} else {
		var n uint64
		n, err = strconv.ParseUint(text, 10, bits)
		want = T(n)
	}
	if ok := resultjson.Decode([]byte(text), &got); ok != (err == nil) || ok && got != want {
		t.Errorf("%T %s: Decode %v (%v), strconv %v (%v)", got, text, got, ok, want, err)
	}
}
