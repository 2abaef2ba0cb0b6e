package core

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/pyrula/caseworker/canonjson"
)

type unmarshalInner struct {
	A int     `json:"a"`
	B *string `json:"b,omitempty"`
}

type UnmarshalEmbedded struct {
	E  string `json:"e"`
	ID int
}

// unmarshalProbe has fields of the kinds results decode into, including
// the ones where decoders tend to differ: case-insensitive names, ,string,
// embedded structs, raw messages, interfaces, byte slices, times, numbers.
type unmarshalProbe struct {
	UnmarshalEmbedded
	ID      int                        `json:"id"`
	Name    string                     `json:"name"`
	Total   float64                    `json:"total"`
	Small   int8                       `json:"small"`
	U       uint                       `json:"u"`
	Items   []string                   `json:"items"`
	Arr     [2]int                     `json:"arr"`
	Map     map[string]any             `json:"map"`
	IntMap  map[int]string             `json:"int_map"`
	Inner   *unmarshalInner            `json:"inner"`
	Inners  []unmarshalInner           `json:"inners"`
	Raw     json.RawMessage            `json:"raw"`
	Any     any                        `json:"any"`
	Bytes   []byte                     `json:"bytes"`
	Quoted  int                        `json:"quoted,string"`
	When    time.Time                  `json:"when"`
	Num     json.Number                `json:"num"`
	Flag    bool                       `json:"flag"`
	Mixed   string                     `json:"MiXeD"`
	RawMap  map[string]json.RawMessage `json:"raw_map"`
	Skipped string                     `json:"-"`
}

func checkUnmarshal[T any](t *testing.T, in []byte) {
	t.Helper()
	got, gotErr := unmarshalResult[T](in)
	var want T
	wantErr := json.Unmarshal(in, &want)
	if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
		t.Fatalf("%s: error %v, encoding/json %v", in, gotErr, wantErr)
	}
	if gotErr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\ngot  %#v\nwant %#v", in, got, want)
	}
}

func TestUnmarshalResultMatchesEncodingJSON(t *testing.T) {
	for _, in := range []string{
		`{"id":1,"items":["a"],"name":"x","total":1.5}`,
		`{"ID":2,"NAME":"y","e":"emb","mixed":"m"}`,
		`{"quoted":"12","when":"2026-01-02T03:04:05.123456789Z","num":12.5,"bytes":"aGk="}`,
		`{"quoted":12}`, `{"small":300}`, `{"u":-1}`, `{"arr":[1,2,3]}`, `{"arr":[1]}`,
		`{"map":{"a":[1,{"b":null}],"c":1e+16},"int_map":{"1":"x","-2":"y"}}`, `{"int_map":{"x":"y"}}`,
		`{"inner":{"a":1,"b":"s"},"inners":[{"a":2},null]}`, `{"inner":null}`,
		`{"raw":{"z":[1,2]},"raw_map":{"k":null},"any":[true,"s",1.25,null]}`,
		`{"-":"dash","Skipped":"no"}`, `{"flag":"true"}`, `{"when":"yesterday"}`, `{"bytes":"!"}`,
		`null`, `[]`, `1`, `"s"`, `{"id":1.5}`, `{"items":"a"}`,
	} {
		checkUnmarshal[unmarshalProbe](t, []byte(in))
		checkUnmarshal[any](t, []byte(in))
		checkUnmarshal[map[string]json.RawMessage](t, []byte(in))
		checkUnmarshal[[]any](t, []byte(in))
		checkUnmarshal[string](t, []byte(in))
		checkUnmarshal[float64](t, []byte(in))
		checkUnmarshal[*int](t, []byte(in))
		checkUnmarshal[InterruptAnswer](t, []byte(in))
	}
}

// FuzzUnmarshalResult: on any canonical JSON (what results are), the fast
// decoder gives what encoding/json gives, value and error.
//
//	go test -run '^$' -fuzz FuzzUnmarshalResult -fuzztime 60s ./flow/
func FuzzUnmarshalResult(f *testing.F) {
	f.Add([]byte(`{"id":1,"items":["a"],"name":"x","total":1.5,"inner":{"a":1}}`))
	f.Add([]byte(`{"ID":2,"NAME":"y","e":"emb","quoted":"12","when":"2026-01-02T03:04:05Z","num":1}`))
	f.Add([]byte(`{"map":{"a":[1,{"b":null}]},"raw":[1],"any":{"x":1},"bytes":"aGk=","int_map":{"1":"x"}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		canon, err := canonjson.Canonicalize(in)
		if err != nil {
			return
		}
		checkUnmarshal[unmarshalProbe](t, canon)
		checkUnmarshal[any](t, canon)
		checkUnmarshal[ModelResponse](t, canon)
		checkUnmarshal[[]unmarshalInner](t, canon)
	})
}
