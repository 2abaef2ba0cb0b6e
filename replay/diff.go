package replay

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/pyrula/caseworker/explain"
	"github.com/pyrula/caseworker/internal/jsondiff"
)

// InputDiff is a field-level difference between a call's recorded and
// actual input: JSON paths (such as "$.messages[2].content") that only the
// actual input has (Added), only the recorded one has (Removed), or whose
// values differ (Changed). Under volatile-field rules (DiffInputsVolatile)
// the paths that differ only in what the rules remove are listed apart
// (Ignored) and do not appear in the other three. Values (--values only)
// holds the recorded and the actual value at each path of the other three.
type InputDiff struct {
	Added   []string `json:"added"`
	Removed []string `json:"removed"`
	Changed []string `json:"changed"`
	// Ignored, present only when there are some, are the differing paths
	// the call's volatile-field rules ignore.
	Ignored []string `json:"ignored,omitempty"`
	// Values are the values at each added, removed and changed path, with
	// --values only.
	Values map[string]ValuePair `json:"values,omitempty"`
}

// ValuePair is the value at one path as recorded and as it is now; the
// one an added or removed path lacks is absent.
type ValuePair struct {
	Recorded json.RawMessage `json:"recorded,omitempty"`
	Actual   json.RawMessage `json:"actual,omitempty"`
}

// Paths are the paths that count: added, removed, then changed.
func (d *InputDiff) Paths() []string {
	if d == nil {
		return nil
	}
	return slices.Concat(d.Added, d.Removed, d.Changed)
}

// Summary words the diff on one line: "input fields added $.currency;
// changed $.amount" (at most five paths a list), with the ignored ones.
func (d *InputDiff) Summary() string {
	if d == nil {
		return ""
	}
	var parts []string
	for _, l := range []struct {
		what  string
		paths []string
	}{{"added", d.Added}, {"removed", d.Removed}, {"changed", d.Changed}, {"ignored as volatile", d.Ignored}} {
		if len(l.paths) > 0 {
			parts = append(parts, l.what+" "+explain.ListPaths(l.paths))
		}
	}
	if len(d.Added)+len(d.Removed)+len(d.Changed) == 0 {
		parts = append([]string{"no field differs that counts"}, parts...)
	}
	return "input fields " + strings.Join(parts, "; ")
}

// DiffInputs compares two JSON values (jsondiff.Compare). It returns nil
// when either is not JSON.
func DiffInputs(recorded, actual json.RawMessage) *InputDiff {
	changes, err := jsondiff.Compare(recorded, actual)
	if err != nil {
		return nil
	}
	d := &InputDiff{}
	d.Added, d.Removed, d.Changed = jsondiff.Paths(changes)
	return d
}

// addValues fills d.Values from the two inputs, for the paths that count.
func (d *InputDiff) addValues(recorded, actual json.RawMessage) {
	if d == nil {
		return
	}
	changes, err := jsondiff.Compare(recorded, actual)
	if err != nil {
		return
	}
	counted := map[string]bool{}
	for _, p := range d.Paths() {
		counted[p] = true
	}
	for _, c := range changes {
		if !counted[c.Path] {
			continue
		}
		if d.Values == nil {
			d.Values = map[string]ValuePair{}
		}
		d.Values[c.Path] = ValuePair{Recorded: c.A, Actual: c.B}
	}
}

// Role values of a divergence (explain.Cause, explain.Consequent,
// explain.Independent).
const (
	RoleCause       = explain.Cause
	RoleConsequent  = explain.Consequent
	RoleIndependent = explain.Independent
)
