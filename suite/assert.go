package suite

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/replay"
)

// pathStep is one step of a JSON path: a member name, or an array index
// when index ≥ 0.
type pathStep struct {
	name  string
	index int
}

// parsePath reads a JSON path: "$" then any of .name (letters, digits,
// underscores), ["name"] (a JSON string) and [index].
func parsePath(p string) ([]pathStep, error) {
	if p == "" {
		p = "$"
	}
	rest, ok := strings.CutPrefix(p, "$")
	if !ok {
		return nil, fmt.Errorf("path %q does not start with $", p)
	}
	var steps []pathStep
	for rest != "" {
		switch rest[0] {
		case '.':
			end := 1
			for end < len(rest) && (rest[end] == '_' || rest[end] >= 'a' && rest[end] <= 'z' || rest[end] >= 'A' && rest[end] <= 'Z' || rest[end] >= '0' && rest[end] <= '9') {
				end++
			}
			if end == 1 {
				return nil, fmt.Errorf("path %q: a member name must follow the dot (use [\"name\"] for other names)", p)
			}
			steps, rest = append(steps, pathStep{name: rest[1:end], index: -1}), rest[end:]
		case '[':
			end := strings.IndexByte(rest, ']')
			if rest[1] == '"' {
				end = closingBracket(rest)
			}
			if end < 0 {
				return nil, fmt.Errorf("path %q: [ without ]", p)
			}
			inner := rest[1:end]
			if strings.HasPrefix(inner, `"`) {
				var name string
				if err := json.Unmarshal([]byte(inner), &name); err != nil {
					return nil, fmt.Errorf("path %q: %s is not a JSON string", p, inner)
				}
				steps = append(steps, pathStep{name: name, index: -1})
			} else {
				n, err := strconv.Atoi(inner)
				if err != nil || n < 0 {
					return nil, fmt.Errorf("path %q: [%s] is not an index (0 or more) or a quoted name", p, inner)
				}
				steps = append(steps, pathStep{index: n})
			}
			rest = rest[end+1:]
		default:
			return nil, fmt.Errorf("path %q: %q is not . or [", p, rest[:1])
		}
	}
	return steps, nil
}

// closingBracket is the index of the ] that closes s's ["…"], -1 if none.
func closingBracket(s string) int {
	escaped := false
	for i := 2; i < len(s); i++ {
		switch {
		case escaped:
			escaped = false
		case s[i] == '\\':
			escaped = true
		case s[i] == '"':
			if i+1 < len(s) && s[i+1] == ']' {
				return i + 1
			}
			return -1
		}
	}
	return -1
}

// errNoValue is the lookup of a path the value does not have.
var errNoValue = errors.New("no such value")

// lookup is the value at steps in v (decoded with UseNumber).
func lookup(v any, steps []pathStep) (any, error) {
	for _, s := range steps {
		switch cur := v.(type) {
		case map[string]any:
			next, ok := cur[s.name]
			if s.index >= 0 || !ok {
				return nil, errNoValue
			}
			v = next
		case []any:
			if s.index < 0 || s.index >= len(cur) {
				return nil, errNoValue
			}
			v = cur[s.index]
		default:
			return nil, errNoValue
		}
	}
	return v, nil
}

// decode reads JSON keeping numbers exact.
func decode(raw []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

// CheckAssertion checks that a holds of a child's run: its result (the
// run:complete result, nil when the run did not complete) and its outcome.
// It returns "" when it holds, else what was found.
func CheckAssertion(a messages.SuiteAssertion, result json.RawMessage, o replay.Outcome) string {
	switch {
	case a.MaxCostUSD != nil:
		if float64(o.CostUSD) > *a.MaxCostUSD {
			raw, _ := o.CostUSD.MarshalJSON()
			return fmt.Sprintf("cost_usd %s is over %g", raw, *a.MaxCostUSD)
		}
		return ""
	case a.MaxLiveCalls != nil:
		if o.LiveCalls > *a.MaxLiveCalls {
			return fmt.Sprintf("live_calls %d is over %d", o.LiveCalls, *a.MaxLiveCalls)
		}
		return ""
	}
	path := cmp.Or(a.Path, "$")
	if result == nil {
		return "the run has no result"
	}
	steps, err := parsePath(path)
	if err != nil {
		return err.Error()
	}
	whole, err := decode(result)
	if err != nil {
		return fmt.Sprintf("the result is not JSON: %v", err)
	}
	v, err := lookup(whole, steps)
	if err != nil {
		return fmt.Sprintf("the result has no %s", path)
	}
	show := func(v any) string {
		raw, _ := json.Marshal(v)
		if len(raw) > 120 {
			return string(raw[:117]) + "…"
		}
		return string(raw)
	}
	switch {
	case a.Equals != nil:
		want, err := decode(a.Equals)
		if err != nil {
			return fmt.Sprintf("equals is not JSON: %v", err)
		}
		if !jsonEqual(v, want) {
			return fmt.Sprintf("%s is %s, not %s", path, show(v), show(want))
		}
	case a.Contains != nil:
		switch cur := v.(type) {
		case string:
			if !strings.Contains(cur, *a.Contains) {
				return fmt.Sprintf("%s is %s, without %q", path, show(v), *a.Contains)
			}
		case []any:
			for _, e := range cur {
				if e == *a.Contains {
					return ""
				}
			}
			return fmt.Sprintf("%s is %s, without the element %q", path, show(v), *a.Contains)
		default:
			return fmt.Sprintf("%s is %s, not a string or an array", path, show(v))
		}
	case a.Matches != nil:
		s, ok := v.(string)
		if !ok {
			return fmt.Sprintf("%s is %s, not a string", path, show(v))
		}
		re, err := regexp.Compile(*a.Matches)
		if err != nil {
			return fmt.Sprintf("matches %q: %v", *a.Matches, err)
		}
		if !re.MatchString(s) {
			return fmt.Sprintf("%s is %s, which %q does not match", path, show(v), *a.Matches)
		}
	}
	return ""
}

// jsonEqual compares two decoded JSON values, numbers as numbers.
func jsonEqual(a, b any) bool {
	an, aok := a.(json.Number)
	bn, bok := b.(json.Number)
	if aok && bok {
		af, aerr := an.Float64()
		bf, berr := bn.Float64()
		return aerr == nil && berr == nil && af == bf || an == bn
	}
	return reflect.DeepEqual(normalize(a), normalize(b))
}

// normalize turns numbers into float64, so that DeepEqual compares 1 and
// 1.0 alike.
func normalize(v any) any {
	switch cur := v.(type) {
	case json.Number:
		f, err := cur.Float64()
		if err != nil {
			return cur.String()
		}
		return f
	case map[string]any:
		out := make(map[string]any, len(cur))
		for k, e := range cur {
			out[k] = normalize(e)
		}
		return out
	case []any:
		out := make([]any, len(cur))
		for i, e := range cur {
			out[i] = normalize(e)
		}
		return out
	}
	return v
}

// CheckAssertionShape refuses an assertion that cannot be checked: not
// exactly one check, a path that does not parse, a pattern that does not
// compile, equals that is not JSON, a negative bound. The error names what.
func CheckAssertionShape(a messages.SuiteAssertion) error {
	n := 0
	for _, set := range []bool{a.Equals != nil, a.Contains != nil, a.Matches != nil, a.MaxCostUSD != nil, a.MaxLiveCalls != nil} {
		if set {
			n++
		}
	}
	switch {
	case n != 1:
		return errors.New("must have exactly one of equals, contains, matches, max_cost_usd and max_live_calls")
	case (a.MaxCostUSD != nil || a.MaxLiveCalls != nil) && a.Path != "":
		return errors.New("path applies to equals, contains and matches")
	case a.MaxCostUSD != nil && !(*a.MaxCostUSD >= 0):
		return fmt.Errorf("max_cost_usd %g is negative", *a.MaxCostUSD)
	case a.MaxLiveCalls != nil && *a.MaxLiveCalls < 0:
		return fmt.Errorf("max_live_calls %d is negative", *a.MaxLiveCalls)
	}
	if _, err := parsePath(cmp.Or(a.Path, "$")); err != nil {
		return err
	}
	if a.Equals != nil {
		if _, err := decode(a.Equals); err != nil {
			return fmt.Errorf("equals is not JSON: %v", err)
		}
	}
	if a.Matches != nil {
		if _, err := regexp.Compile(*a.Matches); err != nil {
			return fmt.Errorf("matches %q is not an RE2 pattern: %v", *a.Matches, err)
		}
	}
	return nil
}

// AssertionText names an assertion: `$.answer equals "yes"`,
// `cost_usd ≤ 0.5`.
func AssertionText(a messages.SuiteAssertion) string {
	path := cmp.Or(a.Path, "$")
	switch {
	case a.MaxCostUSD != nil:
		return fmt.Sprintf("cost_usd ≤ %g", *a.MaxCostUSD)
	case a.MaxLiveCalls != nil:
		return fmt.Sprintf("live_calls ≤ %d", *a.MaxLiveCalls)
	case a.Equals != nil:
		return path + " equals " + string(a.Equals)
	case a.Contains != nil:
		return fmt.Sprintf("%s contains %q", path, *a.Contains)
	case a.Matches != nil:
		return fmt.Sprintf("%s matches %q", path, *a.Matches)
	}
	return path
}
