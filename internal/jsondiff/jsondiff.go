// Package jsondiff compares two JSON values field by field and names each
// difference by its JSON path: "$" is the whole value, "$.a.b" a member,
// "$.messages[2]" an array element. It is the one field-level diff of the
// module: the case-run engine's divergence diffs (replay.DiffInputs) and the
// CLI's case diff and case compare use it.
//
// jsondiff imports only the standard library.
package jsondiff

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
)

// Op is how a path differs.
type Op string

// The ops of a Change.
const (
	// Added: only the second value has the path.
	Added Op = "added"
	// Removed: only the first value has the path.
	Removed Op = "removed"
	// Changed: both have the path with different values (a different type
	// included).
	Changed Op = "changed"
)

// Change is one difference. A and B are the values at Path in the first
// and the second value, as JSON; the one an Added or Removed change lacks
// is nil.
type Change struct {
	Op   Op
	Path string
	A, B json.RawMessage
}

// Compare compares two JSON texts and returns their differences in path
// order: object members by key (code-point order), array elements by
// index. Arrays are compared element by element (an insertion changes
// every later element). Numbers are equal when their values are equal as
// float64 (1 and 1.0 are the same number). It fails when either text is
// not JSON.
func Compare(a, b json.RawMessage) ([]Change, error) {
	x, err := decode(a)
	if err != nil {
		return nil, fmt.Errorf("jsondiff: first value: %w", err)
	}
	y, err := decode(b)
	if err != nil {
		return nil, fmt.Errorf("jsondiff: second value: %w", err)
	}
	var out []Change
	walk("$", x, y, &out)
	return out, nil
}

// Paths splits changes into the paths added, removed and changed, each
// never nil.
func Paths(changes []Change) (added, removed, changed []string) {
	added, removed, changed = []string{}, []string{}, []string{}
	for _, c := range changes {
		switch c.Op {
		case Added:
			added = append(added, c.Path)
		case Removed:
			removed = append(removed, c.Path)
		default:
			changed = append(changed, c.Path)
		}
	}
	return added, removed, changed
}

func decode(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("more than one value")
	}
	return v, nil
}

func walk(path string, a, b any, out *[]Change) {
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
				*out = append(*out, Change{Op: Added, Path: p, B: encode(y)})
			case !inB:
				*out = append(*out, Change{Op: Removed, Path: p, A: encode(x)})
			default:
				walk(p, x, y, out)
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
				*out = append(*out, Change{Op: Added, Path: p, B: encode(bv[i])})
			case i >= len(bv):
				*out = append(*out, Change{Op: Removed, Path: p, A: encode(av[i])})
			default:
				walk(p, av[i], bv[i], out)
			}
		}
		return
	}
	if !equalScalars(a, b) {
		*out = append(*out, Change{Op: Changed, Path: path, A: encode(a), B: encode(b)})
	}
}

// equalScalars compares two decoded values of which at least one is not
// an object or an array (or whose kinds differ).
func equalScalars(a, b any) bool {
	switch av := a.(type) {
	case json.Number:
		bv, ok := b.(json.Number)
		if !ok {
			return false
		}
		if av == bv {
			return true
		}
		x, errA := av.Float64()
		y, errB := bv.Float64()
		return errA == nil && errB == nil && x == y
	case string:
		bv, ok := b.(string)
		return ok && av == bv
	case bool:
		bv, ok := b.(bool)
		return ok && av == bv
	case nil:
		return b == nil
	}
	return false // an object or array against a scalar, or two kinds
}

// encode writes a decoded value back as compact JSON, without HTML
// escaping.
func encode(v any) json.RawMessage {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
