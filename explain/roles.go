package explain

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/pyrula/caseworker/internal/jsondiff"
)

// The roles of a changed call.
const (
	// Cause is the first call that changed: the divergence to look at.
	Cause = "cause"
	// Consequent is a later changed call whose changed input carries a
	// value that an earlier changed call's result produced.
	Consequent = "consequent"
	// Independent is a later changed call whose changed input carries no
	// value an earlier changed result produced: it changed on its own
	// (the same edit, or another one, reached it directly).
	Independent = "independent"
)

// Call is one call whose input changed, as Tracker.Add reads it.
type Call struct {
	// ID is the call's identity, "kind:key".
	ID string
	// Input is the call's input now; RecordedInput its recorded input, nil
	// when the recording keeps none.
	Input, RecordedInput json.RawMessage
	// Result is the call's outcome now (its result, else its error), nil
	// when it has none; RecordedResult the recorded one.
	Result, RecordedResult json.RawMessage
}

// Role is how a changed call relates to the ones before it.
type Role struct {
	// Role is Cause, Consequent or Independent.
	Role string
	// CausedBy is, for a Consequent call, the earliest earlier changed
	// call whose result produced a value its changed input carries.
	CausedBy string
}

// minContained is the length from which a produced string counts when a
// changed input string contains it (a model's answer quoted in the next
// prompt, a formatted receipt in an email body); shorter produced strings
// count only when an input value equals them.
const minContained = 8

// Tracker classifies changed calls in run order: the first is the Cause;
// each later one is Consequent when a value its changed input carries
// (the actual value at each added or changed path, or every value of the
// input when the recording keeps none) is a value an earlier changed call
// produced, Independent otherwise. A call produces the scalar values of
// its result that its recorded result does not hold and its own input
// does not carry (a value passed through from the input was produced
// upstream). Values compare as JSON scalars: strings by text, numbers by
// value; booleans, null and empty strings never count. A produced string
// of at least 8 characters also counts when it appears inside an input
// string. The zero Tracker is ready to use; the same calls in the same
// order always get the same roles.
type Tracker struct {
	produced []producer
}

// producer is what one earlier changed call produced.
type producer struct {
	id     string
	values map[string]bool // leaf keys (leafKey)
	long   []string        // produced strings of minContained bytes or more
}

// Add classifies the next changed call and remembers what it produced.
func (t *Tracker) Add(c Call) Role {
	r := Role{Role: Independent}
	if len(t.produced) == 0 {
		r.Role = Cause
	} else if by, ok := t.causedBy(carried(c)); ok {
		r = Role{Role: Consequent, CausedBy: by}
	}
	t.produced = append(t.produced, produce(c))
	return r
}

// causedBy returns the earliest producer of a carried value.
func (t *Tracker) causedBy(carried map[string]bool) (string, bool) {
	if len(carried) == 0 {
		return "", false
	}
	for _, p := range t.produced {
		for k := range carried {
			if p.values[k] {
				return p.id, true
			}
		}
		for _, s := range p.long {
			for k := range carried {
				if strings.HasPrefix(k, "s:") && strings.Contains(k[2:], s) {
					return p.id, true
				}
			}
		}
	}
	return "", false
}

// carried are the values c's changed input carries, as leaf keys.
func carried(c Call) map[string]bool {
	out := map[string]bool{}
	if c.RecordedInput == nil {
		leaves(c.Input, out)
		return out
	}
	changes, err := jsondiff.Compare(c.RecordedInput, c.Input)
	if err != nil {
		leaves(c.Input, out)
		return out
	}
	for _, ch := range changes {
		if ch.Op != jsondiff.Removed {
			leaves(ch.B, out)
		}
	}
	return out
}

// produce is what c produced: its result's values that are neither in its
// recorded result nor in its own input.
func produce(c Call) producer {
	p := producer{id: c.ID, values: map[string]bool{}}
	if c.Result == nil || bytes.Equal(c.Result, c.RecordedResult) {
		return p
	}
	leaves(c.Result, p.values)
	old := map[string]bool{}
	if c.RecordedResult != nil {
		leaves(c.RecordedResult, old)
	}
	leaves(c.Input, old)
	for k := range old {
		delete(p.values, k)
	}
	for k := range p.values {
		if strings.HasPrefix(k, "s:") && len(k)-2 >= minContained {
			p.long = append(p.long, k[2:])
		}
	}
	slices.Sort(p.long)
	return p
}

// leaves adds the keys of raw's scalar values that count to out: "s:" and
// the text of a non-empty string, "n:" and the shortest form of a number.
func leaves(raw json.RawMessage, out map[string]bool) {
	if len(raw) == 0 {
		return
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return
	}
	walkLeaves(v, out)
}

func walkLeaves(v any, out map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			walkLeaves(e, out)
		}
	case []any:
		for _, e := range x {
			walkLeaves(e, out)
		}
	case string:
		if x != "" {
			out["s:"+x] = true
		}
	case json.Number:
		if f, err := x.Float64(); err == nil {
			out["n:"+strconv.FormatFloat(f, 'g', -1, 64)] = true
		} else {
			out["n:"+x.String()] = true
		}
	}
}
