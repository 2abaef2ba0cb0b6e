package replay

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
)

// InputDiff is a field-level difference between a call's recorded and
// actual input: JSON paths (such as "$.messages[2].content") that only the
// actual input has (Added), only the recorded one has (Removed), or whose
// values differ (Changed).
type InputDiff struct {
	Added   []string `json:"added"`
	Removed []string `json:"removed"`
	Changed []string `json:"changed"`
}

// DiffInputs compares two JSON values. It returns nil when either is not
// JSON.
func DiffInputs(recorded, actual json.RawMessage) *InputDiff {
	var a, b any
	if json.Unmarshal(recorded, &a) != nil || json.Unmarshal(actual, &b) != nil {
		return nil
	}
	d := &InputDiff{Added: []string{}, Removed: []string{}, Changed: []string{}}
	diffValues("$", a, b, d)
	return d
}

func diffValues(path string, a, b any, d *InputDiff) {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			break
		}
		keys := make([]string, 0, len(av)+len(bv))
		for k := range av {
			keys = append(keys, k)
		}
		for k := range bv {
			if _, ok := av[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := path + "." + k
			x, inA := av[k]
			y, inB := bv[k]
			switch {
			case !inA:
				d.Added = append(d.Added, p)
			case !inB:
				d.Removed = append(d.Removed, p)
			default:
				diffValues(p, x, y, d)
			}
		}
		return
	case []any:
		bv, ok := b.([]any)
		if !ok {
			break
		}
		for i := range max(len(av), len(bv)) {
			p := path + "[" + strconv.Itoa(i) + "]"
			switch {
			case i >= len(av):
				d.Added = append(d.Added, p)
			case i >= len(bv):
				d.Removed = append(d.Removed, p)
			default:
				diffValues(p, av[i], bv[i], d)
			}
		}
		return
	}
	if fmt.Sprintf("%#v", a) != fmt.Sprintf("%#v", b) {
		d.Changed = append(d.Changed, path)
	}
}
