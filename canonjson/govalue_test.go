package canonjson_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/pyrula/caseworker/canonjson"
)

// Types AppendGo writes directly (goTargets) and ones it leaves to the
// general path (fallbackCases). The fuzz target decodes its input into
// each, so that the values have every shape the types allow.
type (
	goInner struct {
		Z  string            `json:"z"`
		A  []int             `json:"a,omitempty"`
		M  map[string]string `json:"m,omitempty"`
		P  *goInner          `json:"p,omitempty"`
		F  float64           `json:"f"`
		U8 uint8
	}
	goNamedString string
	goNamedMap    map[goNamedString]any
	goAll         struct {
		ID       int               `json:"id"`
		Query    string            `json:"query"`
		Total    float64           `json:"total,omitempty"`
		Items    []string          `json:"items"`
		Tags     map[string]int    `json:"tags"`
		Any      any               `json:"any"`
		Inner    goInner           `json:"inner"`
		PInner   *goInner          `json:"pinner"`
		Skip     string            `json:"-"`
		NoTag    bool              //
		Uni      string            `json:"ü"`
		Empty    string            `json:",omitempty"`
		Arr      [3]byte           `json:"arr"`
		Named    goNamedMap        `json:"named"`
		Nested   [][]any           `json:"nested"`
		Int8     int8              `json:"i8"`
		Uint64   uint64            `json:"u64"`
		PP       **int             `json:"pp"`
		Ifaces   []any             `json:"ifaces,omitempty"`
		MapSlice map[string][]bool `json:"ms"`
		hidden   int
	}
	goList struct {
		V    int     `json:"v"`
		Next *goList `json:"next"`
	}
)

// oddTags is a struct with the tags staticcheck refuses to see written:
// "-," names a field "-", and a name json.Marshal finds invalid leaves the
// field its Go name.
var oddTags = reflect.StructOf([]reflect.StructField{
	{Name: "Dash", Type: reflect.TypeFor[string](), Tag: `json:"-,"`},
	{Name: "Bad", Type: reflect.TypeFor[string](), Tag: `json:"b\\ad"`},
	{Name: "Odd", Type: reflect.TypeFor[int](), Tag: `json:"x y!#"`},
	{Name: "Next", Type: reflect.TypeFor[*goInner](), Tag: `json:",omitempty"`},
})

// goTargets returns new values of the types AppendGo writes directly.
func goTargets() []any {
	return []any{reflect.New(oddTags).Interface(), new(any), new(goAll), new(goInner), new(goList), new([]any), new(map[string]any),
		new(float64), new(string), new(int64), new([]goInner), new(goNamedMap)}
}

// FuzzAppendGo: for any JSON decoded into each of goTargets, AppendGo
// either declines or writes exactly what Append writes for json.Marshal's
// text of the same value (json.Marshal's refusals are declined too).
func FuzzAppendGo(f *testing.F) {
	for _, s := range []string{
		`{"id":1,"query":"q","items":["a","b"],"tags":{"b":1,"a":2},"any":{"y":[1,2.5,"s",null,true],"x":{}}}`,
		`{"inner":{"z":"\u0000\n\"\\<>&\u2028","a":[1,2],"m":{"é":"x","e":"y"},"p":{"z":"deep"},"f":1e21},"pinner":null}`,
		`{"total":1e20,"any":[0.1,-0.0,1e-6,1e-7,123456789.125,5e-324,1.7976931348623157e308,100,1e16,1e15]}`,
		`{"named":{"k":[1,{"a":null}]},"nested":[[1,[2]],[]],"i8":-128,"u64":18446744073709551615,"pp":7}`,
		`{"NoTag":true,"ü":"u","Empty":"","arr":[1,2,255],"ms":{"a":[true,false]}}`,
		`{"Bad":"x","-":"dash","x y!#":3,"Next":{"z":"n"}}`,
		`{"v":1,"next":{"v":2,"next":{"v":3,"next":null}}}`,
		`[1,"two",3.0,{"four":4}]`, `"s\u00e9"`, `-0.0`, `12345678901234567890`, `1.5e300`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, target := range goTargets() {
			if json.Unmarshal(in, target) != nil {
				continue
			}
			v := reflect.ValueOf(target).Elem().Interface()
			checkAppendGo(t, v)
		}
	})
}

// checkAppendGo checks AppendGo(v) against Append(json.Marshal(v)).
func checkAppendGo(t *testing.T, v any) {
	t.Helper()
	prefix := []byte("prefix")
	got, ok := canonjson.AppendGo(bytes.Clone(prefix), v)
	raw, merr := json.Marshal(v)
	var want []byte
	var cerr error
	if merr == nil {
		want, cerr = canonjson.Canonicalize(raw)
	}
	if !ok {
		if !bytes.Equal(got, prefix) {
			t.Fatalf("AppendGo(%#v) declined but changed dst to %q", v, got)
		}
		return
	}
	if merr != nil || cerr != nil {
		t.Fatalf("AppendGo(%#v) = %q, but json.Marshal: %v, Canonicalize: %v", v, got, merr, cerr)
	}
	if !bytes.Equal(got[len(prefix):], want) {
		t.Fatalf("AppendGo(%#v)\n got %s\nwant %s", v, got[len(prefix):], want)
	}
}

// TestAppendGoTakesTheUsualTypes: the types AppendGo is for are written
// directly, not declined.
func TestAppendGoTakesTheUsualTypes(t *testing.T) {
	seven := 7
	pseven := &seven
	odd := reflect.New(oddTags).Elem()
	odd.Field(0).SetString("dash")
	odd.Field(1).SetString("bad")
	odd.Field(3).Set(reflect.ValueOf(&goInner{Z: "z"}))
	for _, v := range []any{
		nil, true, 3, int8(-3), uint16(9), 2.5, 1e21, math.Copysign(0, -1), "s",
		struct {
			ID    int    `json:"id"`
			Query string `json:"query"`
		}{1, "q"},
		goAll{hidden: 1, ID: 3, Items: []string{"x"}, Tags: map[string]int{"b": 1, "a": 2}, Any: []any{1.5, "x", nil}, PP: &pseven, Arr: [3]byte{1, 2, 3}},
		&goList{V: 1, Next: &goList{V: 2}},
		map[string]any{"z": 1, "a": map[string]any{"c": []any{}}},
		[]goInner{{Z: "z", P: &goInner{F: 0.1}}},
		goNamedMap{"k": goNamedString("v")},
		odd.Interface(),
	} {
		if _, ok := canonjson.AppendGo(nil, v); !ok {
			t.Errorf("AppendGo(%#v) declined", v)
		}
		checkAppendGo(t, v)
	}
}

// TestAppendGoDeclines: what json.Marshal writes by rules of its own, and
// values it changes or refuses, go to the general path.
func TestAppendGoDeclines(t *testing.T) {
	type embedded struct{ goInner }
	type asString struct {
		N int `json:"n,string"`
	}
	type omitZero struct {
		N int `json:"n,omitzero"`
	}
	// Two fields named x (made at run time: go vet refuses the literal).
	twice := reflect.New(reflect.StructOf([]reflect.StructField{
		{Name: "A", Type: reflect.TypeFor[string](), Tag: `json:"x"`},
		{Name: "B", Type: reflect.TypeFor[string](), Tag: `json:"x"`},
	})).Elem().Interface()
	cyclic := &goList{V: 1}
	cyclic.Next = cyclic
	deep := any(1)
	for range 70 {
		deep = []any{deep}
	}
	for _, v := range []any{
		time.Unix(0, 0), []byte("b"), float32(1.5), json.Number("1"), json.RawMessage(`{"b":1,"a":2}`),
		embedded{}, asString{1}, omitZero{1}, twice, map[int]string{1: "x"},
		"bad \xff utf-8", map[string]int{"\xff": 1}, math.NaN(), math.Inf(-1), []any{math.Inf(1)},
		cyclic, deep, make(chan int), complex(1, 2),
	} {
		if got, ok := canonjson.AppendGo([]byte("dst"), v); ok || string(got) != "dst" {
			t.Errorf("AppendGo(%T) = %q, %v; want it declined with dst unchanged", v, got, ok)
		}
	}
}

// TestAppendGoConcurrentFirstUse: many goroutines meeting a recursive type
// for the first time at once get the same bytes (run under -race).
func TestAppendGoConcurrentFirstUse(t *testing.T) {
	type node struct {
		Kids []*node `json:"kids"`
		Name string  `json:"name"`
	}
	v := &node{Name: "root", Kids: []*node{{Name: "a"}, {Name: "b", Kids: []*node{{Name: "c"}}}}}
	want := `{"kids":[{"kids":null,"name":"a"},{"kids":[{"kids":null,"name":"c"}],"name":"b"}],"name":"root"}`
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			got, ok := canonjson.AppendGo(nil, v)
			if !ok || string(got) != want {
				errs <- fmt.Errorf("got %s, %v", got, ok)
				return
			}
			errs <- nil
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
