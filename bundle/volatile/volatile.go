// Package volatile owns the volatile-field rules of calls: the parts of a
// call's input that do not count in its fingerprint. A step's or a tool's
// rules are JSON paths of input fields (a request id, a timestamp) that are
// removed before fingerprinting; a model call's rules are regular
// expressions whose matches are removed from its prompt text (a date line).
// The call's recorded input keeps the real values.
//
// The rules are part of bundle format 1 (a bundle's registration records
// them), so this package defines their syntax, checks it, and applies the
// rules to a canonical input. It imports canonjson and the standard
// library only; bundle (validation), flow (fingerprints) and replay
// (verification, diffs) use it.
//
// Path syntax: object keys separated by dots ("request_id", "meta.ts");
// "[]" after a key (or at the start) stands for every element of an array
// ("items[].ts", "[].id"); a key "*" for every member of an object
// ("headers.*", "*.ts"). A key cannot contain '.', '[' or ']'; paths are
// written without a leading "$". A path that does not fit the input (a
// missing key, a string where an object was expected) removes nothing.
package volatile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/pyrula/caseworker/canonjson"
)

// Limits of one call's rules, checked at registration and when a bundle is
// read.
const (
	// MaxRules bounds the paths, or the patterns, of one call.
	MaxRules = 64
	// MaxRuleBytes bounds the length of one path or pattern.
	MaxRuleBytes = 1024
)

// stepKind is what one step of a path selects.
type stepKind uint8

const (
	stepKey      stepKind = iota // the member named key
	stepMembers                  // every member of an object ("*")
	stepElements                 // every element of an array ("[]")
)

type step struct {
	kind stepKind
	key  string
}

// Path is a parsed JSON path of the rules' syntax.
type Path struct {
	src   string
	steps []step
}

// String returns the path as it was written.
func (p Path) String() string { return p.src }

// ParsePath parses a path of the rules' syntax (see the package doc). Its
// error says what is wrong and where.
func ParsePath(s string) (Path, error) {
	switch {
	case s == "":
		return Path{}, fmt.Errorf("volatile path %q is empty", s)
	case len(s) > MaxRuleBytes:
		return Path{}, fmt.Errorf("volatile path %q… is longer than %d bytes", s[:40], MaxRuleBytes)
	case s == "$" || strings.HasPrefix(s, "$.") || strings.HasPrefix(s, "$["):
		return Path{}, fmt.Errorf("volatile path %q: write it without the leading $ (%q)",
			s, strings.TrimPrefix(strings.TrimPrefix(s, "$"), "."))
	}
	p := Path{src: s}
	rest := s
	first := true
	for rest != "" {
		if strings.HasPrefix(rest, "[]") {
			p.steps = append(p.steps, step{kind: stepElements})
			rest, first = rest[2:], false
			continue
		}
		if !first {
			if rest[0] != '.' {
				return Path{}, fmt.Errorf("volatile path %q: at byte %d: want '.' or \"[]\" (array elements are written \"[]\", not by index)",
					s, len(s)-len(rest))
			}
			rest = rest[1:]
		}
		first = false
		end := strings.IndexAny(rest, ".[]")
		if end < 0 {
			end = len(rest)
		}
		key := rest[:end]
		if key == "" {
			return Path{}, fmt.Errorf("volatile path %q: at byte %d: empty key", s, len(s)-len(rest))
		}
		if key == "*" {
			p.steps = append(p.steps, step{kind: stepMembers})
		} else {
			p.steps = append(p.steps, step{kind: stepKey, key: key})
		}
		rest = rest[end:]
		if rest != "" && rest[0] == ']' {
			return Path{}, fmt.Errorf("volatile path %q: at byte %d: unexpected ']'", s, len(s)-len(rest))
		}
	}
	return p, nil
}

// Spec is one call's rules as a registration records them and as a
// divergence shows them: Fields (JSON paths of input fields removed before
// fingerprinting; steps and tools) and Prompt (regular expressions whose
// matches are removed from the prompt text; model calls). Both are always
// arrays in JSON.
type Spec struct {
	Fields []string `json:"fields"`
	Prompt []string `json:"prompt"`
}

// Empty reports whether s has no rules.
func (s Spec) Empty() bool { return len(s.Fields) == 0 && len(s.Prompt) == 0 }

// Equal reports whether s and o are the same rules.
func (s Spec) Equal(o Spec) bool {
	return slices.Equal(s.Fields, o.Fields) && slices.Equal(s.Prompt, o.Prompt)
}

// Normal returns s with nil lists made empty, for its JSON form.
func (s Spec) Normal() Spec {
	if s.Fields == nil {
		s.Fields = []string{}
	}
	if s.Prompt == nil {
		s.Prompt = []string{}
	}
	return s
}

// CheckFields checks a list of paths: at most MaxRules, each valid
// (ParsePath) and none twice.
func CheckFields(paths []string) error {
	_, err := parseFields(paths)
	return err
}

// CheckPrompt checks a list of patterns: at most MaxRules, each a valid
// regular expression (Go's RE2 syntax) of at most MaxRuleBytes.
func CheckPrompt(patterns []string) error {
	_, err := compilePrompt(patterns)
	return err
}

// SortFields returns the paths sorted and without repeats: the form a
// registration records, so that the order in which a target declares them
// does not matter.
func SortFields(paths []string) []string {
	if len(paths) == 0 {
		return nil
	}
	out := slices.Clone(paths)
	slices.Sort(out)
	return slices.Compact(out)
}

func parseFields(paths []string) ([]Path, error) {
	if len(paths) > MaxRules {
		return nil, fmt.Errorf("%d volatile paths, more than %d", len(paths), MaxRules)
	}
	out := make([]Path, 0, len(paths))
	seen := make(map[string]bool, len(paths))
	for _, s := range paths {
		p, err := ParsePath(s)
		if err != nil {
			return nil, err
		}
		if seen[s] {
			return nil, fmt.Errorf("volatile path %q given twice", s)
		}
		seen[s] = true
		out = append(out, p)
	}
	return out, nil
}

func compilePrompt(patterns []string) ([]*regexp.Regexp, error) {
	if len(patterns) > MaxRules {
		return nil, fmt.Errorf("%d volatile prompt patterns, more than %d", len(patterns), MaxRules)
	}
	out := make([]*regexp.Regexp, 0, len(patterns))
	for _, s := range patterns {
		if s == "" {
			return nil, fmt.Errorf("volatile prompt pattern %q is empty", s)
		}
		if len(s) > MaxRuleBytes {
			return nil, fmt.Errorf("volatile prompt pattern %q… is longer than %d bytes", s[:40], MaxRuleBytes)
		}
		re, err := regexp.Compile(s)
		if err != nil {
			return nil, fmt.Errorf("volatile prompt pattern %q: %w", s, err)
		}
		out = append(out, re)
	}
	return out, nil
}

// promptText are the places of a model call's input that prompt patterns
// apply to: the system prompt, a message's content when it is a string,
// and the text of its content blocks.
var promptText = []Path{mustParse("system"), mustParse("messages[].content"), mustParse("messages[].content[].text")}

func mustParse(s string) Path {
	p, err := ParsePath(s)
	if err != nil {
		panic(err)
	}
	return p
}

// Rules are one call's rules, compiled. A nil *Rules has no rules.
type Rules struct {
	spec   Spec
	fields []Path
	prompt []*regexp.Regexp
}

// Compile checks and compiles s; nil (no rules) when s is empty. Its error
// names the bad path or pattern.
func Compile(s Spec) (*Rules, error) {
	if s.Empty() {
		return nil, nil
	}
	fields, err := parseFields(s.Fields)
	if err != nil {
		return nil, err
	}
	prompt, err := compilePrompt(s.Prompt)
	if err != nil {
		return nil, err
	}
	return &Rules{spec: s, fields: fields, prompt: prompt}, nil
}

// Spec returns the rules as written; the zero Spec for nil.
func (r *Rules) Spec() Spec {
	if r == nil {
		return Spec{}
	}
	return r.spec
}

// Mask returns the canonical JSON of input (canonical JSON itself) with
// the rules applied: the fields removed and the prompt patterns' matches
// removed from the prompt text. When the rules change nothing (or r is
// nil) it returns input itself.
func (r *Rules) Mask(input json.RawMessage) (json.RawMessage, error) {
	if r == nil {
		return input, nil
	}
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("volatile: decode input: %w", err)
	}
	changed := false
	for _, p := range r.fields {
		var ch bool
		v, ch = remove(v, p.steps)
		changed = changed || ch
	}
	if len(r.prompt) > 0 {
		for _, p := range promptText {
			var ch bool
			v, ch = mapStrings(v, p.steps, r.maskText)
			changed = changed || ch
		}
	}
	if !changed {
		return input, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("volatile: encode input: %w", err)
	}
	out, err := canonjson.Canonicalize(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	if err != nil {
		return nil, fmt.Errorf("volatile: canonicalize input: %w", err)
	}
	return out, nil
}

// maskText removes every match of the prompt patterns from s, pattern by
// pattern in order.
func (r *Rules) maskText(s string) string {
	for _, re := range r.prompt {
		s = re.ReplaceAllLiteralString(s, "")
	}
	return s
}

// remove removes what steps select from v and returns the new v and
// whether anything was removed.
func remove(v any, steps []step) (any, bool) {
	if len(steps) == 0 {
		return v, false
	}
	s, rest := steps[0], steps[1:]
	last := len(rest) == 0
	switch s.kind {
	case stepKey:
		m, ok := v.(map[string]any)
		if !ok {
			return v, false
		}
		x, ok := m[s.key]
		if !ok {
			return v, false
		}
		if last {
			delete(m, s.key)
			return m, true
		}
		nx, ch := remove(x, rest)
		m[s.key] = nx
		return m, ch
	case stepMembers:
		m, ok := v.(map[string]any)
		if !ok || len(m) == 0 {
			return v, false
		}
		if last {
			return map[string]any{}, true
		}
		changed := false
		for k, x := range m {
			nx, ch := remove(x, rest)
			m[k] = nx
			changed = changed || ch
		}
		return m, changed
	default: // stepElements
		a, ok := v.([]any)
		if !ok || len(a) == 0 {
			return v, false
		}
		if last {
			return []any{}, true
		}
		changed := false
		for i, x := range a {
			nx, ch := remove(x, rest)
			a[i] = nx
			changed = changed || ch
		}
		return a, changed
	}
}

// mapStrings replaces each string that steps select in v by f of it and
// returns the new v and whether a string changed.
func mapStrings(v any, steps []step, f func(string) string) (any, bool) {
	if len(steps) == 0 {
		s, ok := v.(string)
		if !ok {
			return v, false
		}
		ns := f(s)
		return ns, ns != s
	}
	s, rest := steps[0], steps[1:]
	switch s.kind {
	case stepKey:
		m, ok := v.(map[string]any)
		if !ok {
			return v, false
		}
		x, ok := m[s.key]
		if !ok {
			return v, false
		}
		nx, ch := mapStrings(x, rest, f)
		m[s.key] = nx
		return m, ch
	case stepMembers:
		m, ok := v.(map[string]any)
		if !ok {
			return v, false
		}
		changed := false
		for k, x := range m {
			nx, ch := mapStrings(x, rest, f)
			m[k] = nx
			changed = changed || ch
		}
		return m, changed
	default: // stepElements
		a, ok := v.([]any)
		if !ok {
			return v, false
		}
		changed := false
		for i, x := range a {
			nx, ch := mapStrings(x, rest, f)
			a[i] = nx
			changed = changed || ch
		}
		return a, changed
	}
}
