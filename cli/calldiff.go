package cli

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/explain"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/internal/jsondiff"
	"github.com/pyrula/caseworker/runevent"
)

// callRec is one call of a recording (a bundle) or of a case run (its own
// journal): its identity, fingerprint, input when known and outcome.
type callRec struct {
	kind, key   string
	fingerprint string
	// input is the call's input; nil when unknown (a bundle holds the
	// inputs of its prefix calls only, in their call:start events).
	input json.RawMessage
	// result and err: exactly one is set for a call with a recorded
	// outcome; neither for a call started but not done.
	result, err json.RawMessage
	// startSeq is the run_seq of the call's call:start when only its
	// result is known and keeps it; 0 otherwise.
	startSeq int64
}

func (c callRec) id() string { return c.kind + ":" + c.key }

// outcome is "result", "error" or "none".
func (c callRec) outcome() string {
	switch {
	case c.err != nil:
		return "error"
	case c.result != nil:
		return "result"
	}
	return "none"
}

// value is the call's result, else its error (nil for neither).
func (c callRec) value() json.RawMessage {
	if c.err != nil {
		return c.err
	}
	return c.result
}

// callStart is a call:start: the call and its input.
type callStart struct {
	call  host.CallRef
	input json.RawMessage
}

// callsOf lists a run's calls in run order: the calls whose call:start is
// known, in the order of those events, then the calls known only by their
// result: by the run_seq of their call:start where the result keeps it
// (start_seq), then by kind and by key with numbers in numeric order
// ("model:2" before "model:10"). A bundle's history stops at the fork, so
// its later calls take the second order; their inputs are the ones their
// results keep (none in a bundle saved before results kept them).
func callsOf(starts []callStart, results []bundle.Result) []callRec {
	type k struct{ kind, key string }
	byKey := make(map[k]bundle.Result, len(results))
	for _, r := range results {
		byKey[k{r.Kind, r.Key}] = r
	}
	seen := map[k]bool{}
	out := make([]callRec, 0, len(results))
	for _, s := range starts {
		id := k{string(s.call.Kind), s.call.Key}
		if seen[id] {
			continue
		}
		seen[id] = true
		c := callRec{kind: id.kind, key: id.key, fingerprint: s.call.Fingerprint, input: s.input}
		if r, ok := byKey[id]; ok {
			c.fingerprint, c.result, c.err = r.Fingerprint, r.Result, r.Error
		}
		out = append(out, c)
	}
	rest := make([]callRec, 0, len(results))
	for _, r := range results {
		if !seen[k{r.Kind, r.Key}] {
			rest = append(rest, callRec{kind: r.Kind, key: r.Key, fingerprint: r.Fingerprint, input: r.Input,
				result: r.Result, err: r.Error, startSeq: r.StartSeq})
		}
	}
	slices.SortFunc(rest, func(x, y callRec) int {
		if (x.startSeq > 0) != (y.startSeq > 0) {
			return cmp.Compare(y.startSeq, x.startSeq) // with a start_seq first
		}
		return cmp.Or(cmp.Compare(x.startSeq, y.startSeq), strings.Compare(x.kind, y.kind), naturalCompare(x.key, y.key))
	})
	return append(out, rest...)
}

// bundleCalls lists the calls of a bundle (callsOf its history's call:start
// events and its results).
func bundleCalls(b *bundle.Bundle) []callRec {
	var starts []callStart
	for _, raw := range b.History {
		var ev struct {
			Kind  string          `json:"kind"`
			Call  *host.CallRef   `json:"call"`
			Input json.RawMessage `json:"input"`
		}
		if json.Unmarshal(raw, &ev) != nil || ev.Kind != string(runevent.CallStart) || ev.Call == nil {
			continue // a bundle read through bundle.Read is valid: skip what is not a call:start
		}
		starts = append(starts, callStart{call: *ev.Call, input: ev.Input})
	}
	return callsOf(starts, b.Results)
}

// runCalls lists the calls of a run from its journal's events and results.
func runCalls(events []host.Event, results []bundle.Result) []callRec {
	var starts []callStart
	for _, ev := range events {
		if ev.Kind == runevent.CallStart && ev.Call != nil {
			starts = append(starts, callStart{call: *ev.Call, input: ev.Input})
		}
	}
	return callsOf(starts, results)
}

// naturalCompare compares keys chunk by chunk, runs of digits by their
// number: "quote:2" < "quote:10".
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		ca, ra := chunk(a)
		cb, rb := chunk(b)
		if isDigits(ca) && isDigits(cb) {
			na, nb := strings.TrimLeft(ca, "0"), strings.TrimLeft(cb, "0")
			if c := cmp.Or(cmp.Compare(len(na), len(nb)), strings.Compare(na, nb)); c != 0 {
				return c
			}
		}
		if c := strings.Compare(ca, cb); c != 0 {
			return c
		}
		a, b = ra, rb
	}
	return cmp.Compare(len(a), len(b))
}

// chunk splits s after its first run of digits or of non-digits.
func chunk(s string) (head, rest string) {
	digit := unicode.IsDigit(rune(s[0]))
	i := 1
	for i < len(s) && unicode.IsDigit(rune(s[i])) == digit {
		i++
	}
	return s[:i], s[i:]
}

func isDigits(s string) bool { return s != "" && s[0] >= '0' && s[0] <= '9' }

// pair is a value on each side of a comparison: "a" (the first case, arm
// or the recording) and "b".
type pair[T any] struct {
	A T `json:"a"`
	B T `json:"b"`
}

// rawPair is a pair of JSON values of which either may be absent.
type rawPair struct {
	A json.RawMessage `json:"a,omitempty"`
	B json.RawMessage `json:"b,omitempty"`
}

// fieldDiff is a JSON-path diff of two values (jsondiff); Values holds the
// values at each path, with --values only.
type fieldDiff struct {
	Added   []string           `json:"added"`
	Removed []string           `json:"removed"`
	Changed []string           `json:"changed"`
	Values  map[string]rawPair `json:"values,omitempty"`
}

// empty says that the diff found nothing.
func (d *fieldDiff) empty() bool {
	return d == nil || len(d.Added)+len(d.Removed)+len(d.Changed) == 0
}

// diffFields compares two JSON values; nil when either is absent or not
// JSON.
func diffFields(a, b json.RawMessage, values bool) *fieldDiff {
	if a == nil || b == nil {
		return nil
	}
	changes, err := jsondiff.Compare(a, b)
	if err != nil {
		return nil
	}
	d := &fieldDiff{}
	d.Added, d.Removed, d.Changed = jsondiff.Paths(changes)
	if values && len(changes) > 0 {
		d.Values = make(map[string]rawPair, len(changes))
		for _, c := range changes {
			d.Values[c.Path] = rawPair{A: c.A, B: c.B}
		}
	}
	return d
}

// callChange is one call that differs between two runs or recordings.
type callChange struct {
	// Type is "call" on a case diff line; empty (left out) inside other
	// lines.
	Type string `json:"type,omitempty"`
	Call string `json:"call"`
	Kind string `json:"kind"`
	Key  string `json:"key"`
	// Change is "added" (only b made the call), "removed" (only a) or
	// "changed".
	Change string `json:"change"`
	// Fields are what changed: of "fingerprint", "input", "outcome"
	// (result against error), "result", "error".
	Fields      []string      `json:"fields"`
	Fingerprint pair[*string] `json:"fingerprint"`
	Outcome     pair[*string] `json:"outcome"`
	Input       *fieldDiff    `json:"input,omitempty"`
	Result      *fieldDiff    `json:"result,omitempty"`
	Error       *fieldDiff    `json:"error,omitempty"`
	// Value holds the outcomes (result or error) of an added or removed
	// call, or of a call whose outcome changed kind; with --values only.
	Value *rawPair `json:"value,omitempty"`
	// Role, on a call whose input changed (its fingerprint differs), is
	// its role among those calls in run order (explain.Tracker): cause,
	// consequent or independent; CausedBy names the call a consequent
	// one's changed input carries a value of.
	Role     string `json:"role,omitempty"`
	CausedBy string `json:"caused_by,omitempty"`
	// NoInput says, on a call whose fingerprint differs, why its input
	// diff is missing: a side keeps no input for it.
	NoInput string `json:"no_input,omitempty"`
	// Model says what changed in a model call's input.
	Model *explain.ModelChange `json:"model,omitempty"`
}

// callCounts counts the calls of a comparison by how they compare.
type callCounts struct {
	Same    int `json:"same"`
	Added   int `json:"added"`
	Removed int `json:"removed"`
	Changed int `json:"changed"`
}

// diffCalls matches the calls of a and b by (kind, key) and returns the
// ones that differ, in a's run order with b's new calls after the last
// call both made before them, and the counts. A call differs when its
// fingerprint, its outcome (result or error) or the value of that outcome
// differs; inputs are compared (field by field, when both sides know them)
// only for calls whose fingerprints differ, so that what a fingerprint
// leaves out (volatile fields) is no difference. values puts the values of
// the differing fields (and the outcome of an added or removed call) in the
// changes.
func diffCalls(a, b []callRec, values bool) ([]callChange, callCounts) {
	posA := make(map[string]int, len(a))
	for i, c := range a {
		posA[c.id()] = i
	}
	posB := make(map[string]int, len(b))
	for i, c := range b {
		posB[c.id()] = i
	}
	// after[i+1] holds b's new calls to list after a[i] (after[0]: first).
	after := make([][]int, len(a)+1)
	anchor := 0
	for j, c := range b {
		if i, ok := posA[c.id()]; ok {
			anchor = i + 1
			continue
		}
		after[anchor] = append(after[anchor], j)
	}
	var out []callChange
	var n callCounts
	var roles explain.Tracker
	added := func(slot int) {
		for _, j := range after[slot] {
			out = append(out, oneSided(b[j], "added", values))
			n.Added++
		}
	}
	added(0)
	for i, ca := range a {
		j, ok := posB[ca.id()]
		if !ok {
			out = append(out, oneSided(ca, "removed", values))
			n.Removed++
		} else if ch, differ := compareCall(ca, b[j], values); differ {
			if ch.Fingerprint.A != nil && ch.Fingerprint.B != nil && *ch.Fingerprint.A != *ch.Fingerprint.B {
				cb := b[j]
				r := roles.Add(explain.Call{ID: ca.id(), Input: cb.input, RecordedInput: ca.input, Result: cb.value(), RecordedResult: ca.value()})
				ch.Role, ch.CausedBy = r.Role, r.CausedBy
			}
			out = append(out, ch)
			n.Changed++
		} else {
			n.Same++
		}
		added(i + 1)
	}
	if out == nil {
		out = []callChange{}
	}
	return out, n
}

func strp(s string) *string { return &s }

// oneSided is the change of a call only one side made.
func oneSided(c callRec, change string, values bool) callChange {
	ch := callChange{Call: c.id(), Kind: c.kind, Key: c.key, Change: change, Fields: []string{}}
	v := rawPair{}
	if change == "added" {
		ch.Fingerprint.B, ch.Outcome.B = strp(c.fingerprint), strp(c.outcome())
		v.B = c.value()
	} else {
		ch.Fingerprint.A, ch.Outcome.A = strp(c.fingerprint), strp(c.outcome())
		v.A = c.value()
	}
	if values && (v.A != nil || v.B != nil) {
		ch.Value = &v
	}
	return ch
}

// compareCall compares the same call on both sides.
func compareCall(a, b callRec, values bool) (callChange, bool) {
	ch := callChange{Call: a.id(), Kind: a.kind, Key: a.key, Change: "changed", Fields: []string{},
		Fingerprint: pair[*string]{strp(a.fingerprint), strp(b.fingerprint)},
		Outcome:     pair[*string]{strp(a.outcome()), strp(b.outcome())}}
	if a.fingerprint != b.fingerprint {
		ch.Fields = append(ch.Fields, "fingerprint")
		switch d := diffFields(a.input, b.input, values); {
		case a.input == nil || b.input == nil:
			ch.NoInput = noInputWords(a.input == nil, b.input == nil)
		case !d.empty():
			ch.Fields = append(ch.Fields, "input")
			ch.Input = d
			if a.kind == "model" {
				ch.Model = explain.Model(a.input, b.input, slices.Concat(d.Added, d.Removed, d.Changed))
			}
		}
	}
	switch {
	case a.outcome() != b.outcome():
		ch.Fields = append(ch.Fields, "outcome")
		if values {
			ch.Value = &rawPair{A: a.value(), B: b.value()}
		}
	case a.result != nil:
		if d := diffFields(a.result, b.result, values); !d.empty() || (d == nil && !bytes.Equal(a.result, b.result)) {
			ch.Fields = append(ch.Fields, "result")
			ch.Result = d
		}
	case a.err != nil:
		if d := diffFields(a.err, b.err, values); !d.empty() || (d == nil && !bytes.Equal(a.err, b.err)) {
			ch.Fields = append(ch.Fields, "error")
			ch.Error = d
		}
	}
	return ch, len(ch.Fields) > 0
}

// noInputWords say which side of a comparison keeps no input for a call
// whose fingerprint differs.
func noInputWords(a, b bool) string {
	side := "either side"
	switch {
	case a && !b:
		side = "the first side (a)"
	case b && !a:
		side = "the second side (b)"
	}
	return "fingerprints differ; " + side + " keeps no input for this call (saved before cases kept the inputs of calls after the fork): save it again to name the fields"
}

// describeChange words a change on one line for a table or a message:
// "changed fingerprint, input ($.qty), result ($.total)".
func describeChange(c callChange) string {
	if c.Change != "changed" {
		return c.Change
	}
	parts := make([]string, 0, len(c.Fields))
	for _, f := range c.Fields {
		var d *fieldDiff
		switch f {
		case "input":
			d = c.Input
		case "result":
			d = c.Result
		case "error":
			d = c.Error
		}
		parts = append(parts, f+pathsText(d))
	}
	text := "changed " + strings.Join(parts, ", ")
	switch {
	case c.Role == explain.Consequent:
		text += " · consequent of " + c.CausedBy
	case c.Role != "":
		text += " · " + c.Role
	}
	return text
}

// pathsText lists a diff's paths in parentheses ("" for none): at most
// five, then how many more.
func pathsText(d *fieldDiff) string {
	if d.empty() {
		return ""
	}
	var paths []string
	for _, p := range d.Added {
		paths = append(paths, "+"+p)
	}
	for _, p := range d.Removed {
		paths = append(paths, "-"+p)
	}
	paths = append(paths, d.Changed...)
	if len(paths) > 5 {
		paths = append(paths[:5], "…"+strconv.Itoa(len(paths)-5)+" more")
	}
	return " (" + strings.Join(paths, " ") + ")"
}
