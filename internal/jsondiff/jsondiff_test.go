package jsondiff_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/internal/jsondiff"
)

func TestCompare(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want string // "op path a b" per change, joined by "; "
	}{
		{`{"a":1}`, `{"a":1}`, ``},
		{`{"a":1}`, `{"a":1.0}`, ``},
		{`{"a":1,"b":[1,2]}`, `{"b":[1,3,4],"c":null}`, `removed $.a 1 -; changed $.b[1] 2 3; added $.b[2] - 4; added $.c - null`},
		{`{"m":[{"role":"user","content":"hi"}]}`, `{"m":[{"role":"user","content":"hello"}]}`, `changed $.m[0].content "hi" "hello"`},
		{`{"a":{"x":1}}`, `{"a":[1]}`, `changed $.a {"x":1} [1]`},
		{`"x"`, `"y"`, `changed $ "x" "y"`},
		{`null`, `false`, `changed $ null false`},
		{`{"n":12345678901234567890}`, `{"n":12345678901234567890}`, ``},
		{`{"s":"<&>"}`, `{"s":"<&>!"}`, `changed $.s "<&>" "<&>!"`},
		{`{"b":1,"a":2}`, `{"a":3,"b":1}`, `changed $.a 2 3`},
	} {
		changes, err := jsondiff.Compare(json.RawMessage(tc.a), json.RawMessage(tc.b))
		if err != nil {
			t.Fatalf("%s vs %s: %v", tc.a, tc.b, err)
		}
		var got []string
		for _, c := range changes {
			got = append(got, fmt.Sprintf("%s %s %s %s", c.Op, c.Path, orDash(c.A), orDash(c.B)))
		}
		if s := strings.Join(got, "; "); s != tc.want {
			t.Errorf("%s vs %s:\n got %s\nwant %s", tc.a, tc.b, s, tc.want)
		}
	}
}

func TestCompareNotJSON(t *testing.T) {
	t.Parallel()
	for _, pair := range [][2]string{{`{`, `{}`}, {`{}`, `nope`}, {`1 2`, `1`}, {``, `1`}} {
		if _, err := jsondiff.Compare(json.RawMessage(pair[0]), json.RawMessage(pair[1])); err == nil {
			t.Errorf("%q vs %q: want an error", pair[0], pair[1])
		}
	}
}

func TestPaths(t *testing.T) {
	t.Parallel()
	changes, err := jsondiff.Compare(json.RawMessage(`{"a":1,"b":2}`), json.RawMessage(`{"b":3,"c":4}`))
	if err != nil {
		t.Fatal(err)
	}
	added, removed, changed := jsondiff.Paths(changes)
	if fmt.Sprint(added, removed, changed) != "[$.c] [$.a] [$.b]" {
		t.Errorf("paths %v %v %v", added, removed, changed)
	}
	added, removed, changed = jsondiff.Paths(nil)
	if added == nil || removed == nil || changed == nil {
		t.Error("Paths(nil) returned a nil slice")
	}
}

func orDash(raw json.RawMessage) string {
	if raw == nil {
		return "-"
	}
	return string(raw)
}
