package volatile_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/bundle/volatile"
)

func TestParsePath(t *testing.T) {
	t.Parallel()
	valid := []string{"request_id", "meta.ts", "items[].ts", "[].id", "[]", "a[][]", "*.ts", "headers.*", "a.b.c", "ключ.ts", "a-b c"}
	for _, s := range valid {
		p, err := volatile.ParsePath(s)
		if err != nil || p.String() != s {
			t.Errorf("ParsePath(%q) = %q, %v; want it valid", s, p, err)
		}
	}
	invalid := []struct{ path, want string }{
		{"", "is empty"},
		{"meta..ts", `"meta..ts": at byte 5: empty key`},
		{".a", "at byte 0: empty key"},
		{"a.", "at byte 2: empty key"},
		{"a.[]", "at byte 2: empty key"},
		{"items[0].ts", `at byte 5: want '.' or "[]"`},
		{"a[", `at byte 1: want '.' or "[]"`},
		{"a]", "unexpected ']'"},
		{"$.meta.ts", `write it without the leading $ ("meta.ts")`},
		{"$", "without the leading $"},
		{strings.Repeat("a", volatile.MaxRuleBytes+1), "longer than"},
	}
	for _, c := range invalid {
		_, err := volatile.ParsePath(c.path)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParsePath(%.20q) = %v, want an error containing %q", c.path, err, c.want)
		}
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	if err := volatile.CheckFields([]string{"a", "a"}); err == nil || !strings.Contains(err.Error(), `"a" given twice`) {
		t.Errorf("duplicate path: %v", err)
	}
	many := make([]string, volatile.MaxRules+1)
	for i := range many {
		many[i] = fmt.Sprint("k", i)
	}
	if err := volatile.CheckFields(many); err == nil {
		t.Error("too many paths accepted")
	}
	if err := volatile.CheckPrompt([]string{`(?m)^Today is .*$`, `\d{4}-\d{2}-\d{2}`}); err != nil {
		t.Errorf("valid patterns: %v", err)
	}
	for _, bad := range []string{"", "(unclosed", `a\`} {
		if err := volatile.CheckPrompt([]string{bad}); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) {
			t.Errorf("CheckPrompt(%q) = %v, want an error naming it", bad, err)
		}
	}
	if got := volatile.SortFields([]string{"b", "a", "b"}); fmt.Sprint(got) != "[a b]" {
		t.Errorf("SortFields = %v", got)
	}
}

func TestMask(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		spec   volatile.Spec
		input  string
		want   string
		same   bool // Mask returns the input itself
		errSub string
	}{
		{name: "top-level key", spec: volatile.Spec{Fields: []string{"request_id"}},
			input: `{"request_id":"r-1","sku":"SKU-42"}`, want: `{"sku":"SKU-42"}`},
		{name: "nested key", spec: volatile.Spec{Fields: []string{"meta.ts"}},
			input: `{"meta":{"ts":"2026-01-02T03:04:05Z","who":"a"},"qty":2}`, want: `{"meta":{"who":"a"},"qty":2}`},
		{name: "every element", spec: volatile.Spec{Fields: []string{"items[].trace"}},
			input: `{"items":[{"sku":"a","trace":1},{"sku":"b"},{"trace":3}]}`, want: `{"items":[{"sku":"a"},{"sku":"b"},{}]}`},
		{name: "every member", spec: volatile.Spec{Fields: []string{"*.ts"}},
			input: `{"a":{"ts":1,"x":1},"b":{"ts":2},"c":5}`, want: `{"a":{"x":1},"b":{},"c":5}`},
		{name: "whole object", spec: volatile.Spec{Fields: []string{"headers.*"}},
			input: `{"headers":{"x-id":"1","y":"2"},"q":1}`, want: `{"headers":{},"q":1}`},
		{name: "top-level array", spec: volatile.Spec{Fields: []string{"[].id"}},
			input: `[{"id":1,"v":"x"},{"id":2,"v":"y"}]`, want: `[{"v":"x"},{"v":"y"}]`},
		{name: "several paths", spec: volatile.Spec{Fields: []string{"a", "b.c"}},
			input: `{"a":1,"b":{"c":2,"d":3}}`, want: `{"b":{"d":3}}`},
		{name: "absent path", spec: volatile.Spec{Fields: []string{"meta.ts"}},
			input: `{"meta":{"who":"a"}}`, same: true},
		{name: "shape mismatch", spec: volatile.Spec{Fields: []string{"meta.ts", "items[].x"}},
			input: `{"items":"none","meta":"x"}`, same: true},
		{name: "scalar input", spec: volatile.Spec{Fields: []string{"a"}}, input: `"SKU-42"`, same: true},
		{name: "numbers stay canonical", spec: volatile.Spec{Fields: []string{"ts"}},
			input: `{"big":123456789012345678901234567890,"f":1.5e+300,"p":0.0001,"ts":1}`,
			want:  `{"big":123456789012345678901234567890,"f":1.5e+300,"p":0.0001}`},
		{name: "strings stay canonical", spec: volatile.Spec{Fields: []string{"ts"}},
			input: `{"s":"<a&b> é \u0001","ts":1}`, want: `{"s":"<a&b> é \u0001"}`},
		{name: "prompt date line", spec: volatile.Spec{Prompt: []string{`(?m)^Today is .*$`}},
			input: `{"messages":[{"content":"Today is 2026-12-01.\nWhere is order 42?","role":"user"},` +
				`{"content":[{"text":"Today is Monday","type":"text"},{"id":"t1","input":{"q":"Today is x"},"name":"f","type":"tool_use"}],"role":"assistant"}],` +
				`"model":"m","system":"You help.\nToday is 2026-12-01.","tools":[]}`,
			want: `{"messages":[{"content":"\nWhere is order 42?","role":"user"},` +
				`{"content":[{"text":"","type":"text"},{"id":"t1","input":{"q":"Today is x"},"name":"f","type":"tool_use"}],"role":"assistant"}],` +
				`"model":"m","system":"You help.\n","tools":[]}`},
		{name: "prompt patterns in order", spec: volatile.Spec{Prompt: []string{`\d{4}-\d{2}-\d{2}`, `date: ?`}},
			input: `{"messages":[],"model":"m","system":"date: 2026-12-01","tools":[]}`,
			want:  `{"messages":[],"model":"m","system":"","tools":[]}`},
		{name: "prompt without a match", spec: volatile.Spec{Prompt: []string{`(?m)^Today is .*$`}},
			input: `{"messages":[],"model":"m","system":"You help.","tools":[]}`, same: true},
		{name: "prompt patterns leave other fields", spec: volatile.Spec{Prompt: []string{`m`}},
			input: `{"messages":[],"model":"m","system":"","tools":["m"]}`, same: true},
		{name: "not JSON", spec: volatile.Spec{Fields: []string{"a"}}, input: `{`, errSub: "decode input"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r, err := volatile.Compile(c.spec)
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.Mask(json.RawMessage(c.input))
			switch {
			case c.errSub != "":
				if err == nil || !strings.Contains(err.Error(), c.errSub) {
					t.Fatalf("Mask = %s, %v; want an error containing %q", got, err, c.errSub)
				}
				return
			case err != nil:
				t.Fatal(err)
			case c.same:
				if string(got) != c.input {
					t.Fatalf("Mask = %s, want the input unchanged", got)
				}
			case string(got) != c.want:
				t.Fatalf("Mask =\n %s\nwant\n %s", got, c.want)
			}
		})
	}
}

func TestNilRules(t *testing.T) {
	t.Parallel()
	r, err := volatile.Compile(volatile.Spec{})
	if err != nil || r != nil {
		t.Fatalf("Compile(empty) = %v, %v; want nil, nil", r, err)
	}
	in := json.RawMessage(`{"a":1}`)
	if got, err := r.Mask(in); err != nil || string(got) != string(in) {
		t.Fatalf("nil Mask = %s, %v", got, err)
	}
	if !r.Spec().Empty() {
		t.Fatal("nil rules have a spec")
	}
	s := volatile.Spec{Fields: nil}.Normal()
	if raw, _ := json.Marshal(s); string(raw) != `{"fields":[],"prompt":[]}` {
		t.Fatalf("Normal spec JSON %s", raw)
	}
	if !(volatile.Spec{Fields: []string{}}).Equal(volatile.Spec{}) || (volatile.Spec{Fields: []string{"a"}}).Equal(volatile.Spec{}) {
		t.Fatal("Equal")
	}
}

// A step's volatile field is removed before its input is fingerprinted;
// the recorded input keeps it.
func ExampleRules_Mask() {
	rules, err := volatile.Compile(volatile.Spec{Fields: []string{"request_id", "items[].trace"}})
	if err != nil {
		panic(err)
	}
	masked, err := rules.Mask(json.RawMessage(`{"items":[{"sku":"a","trace":"t-1"}],"request_id":"r-9","qty":2}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(string(masked))
	// Output: {"items":[{"sku":"a"}],"qty":2}
}
