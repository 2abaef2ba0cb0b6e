package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// Limits of a --supply file.
const (
	// MaxSupplyEntries is the most entries each of calls and tools may hold.
	MaxSupplyEntries = 200
	// MaxSupplyBytes is the most bytes a supply file may have.
	MaxSupplyBytes = 64 << 10
)

// Supply holds supplied answers (--supply): Calls keyed "<kind>:<key>",
// Tools keyed by tool name (answering tool calls whose tool-use id the
// recording does not know, such as the new ids of a live model call).
type Supply struct {
	Calls map[string]json.RawMessage `json:"calls"`
	Tools map[string]json.RawMessage `json:"tools"`
}

// ParseSupply reads a --supply file: a JSON object with calls and tools, at
// most MaxSupplyEntries entries each and MaxSupplyBytes in all. Shapes are
// not checked here: a wrong-shaped answer stops the run with
// missing_context when a call uses it.
func ParseSupply(data []byte) (Supply, error) {
	if len(data) > MaxSupplyBytes {
		return Supply{}, fmt.Errorf("supply: %d bytes, at most %d", len(data), MaxSupplyBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s Supply
	if err := dec.Decode(&s); err != nil {
		return Supply{}, fmt.Errorf("supply: want {\"calls\": {…}, \"tools\": {…}}: %w", err)
	}
	if dec.More() {
		return Supply{}, fmt.Errorf("supply: more than one JSON value")
	}
	if len(s.Calls) > MaxSupplyEntries {
		return Supply{}, fmt.Errorf("supply: %d calls, at most %d", len(s.Calls), MaxSupplyEntries)
	}
	if len(s.Tools) > MaxSupplyEntries {
		return Supply{}, fmt.Errorf("supply: %d tools, at most %d", len(s.Tools), MaxSupplyEntries)
	}
	return s, nil
}

// useSupply notes that the supplied entry entry ("calls:<kind>:<key>" or
// "tools:<name>") answered a call. The caller holds e.mu.
func (e *engine) useSupply(entry string) {
	if e.usedSupply == nil {
		e.usedSupply = map[string]bool{}
	}
	e.usedSupply[entry] = true
}

// unusedSupply lists the entries of s that are not in used, as
// "calls:<kind>:<key>" and "tools:<name>", sorted; never nil.
func unusedSupply(s Supply, used map[string]bool) []string {
	out := []string{}
	for key := range s.Calls {
		if !used["calls:"+key] {
			out = append(out, "calls:"+key)
		}
	}
	for name := range s.Tools {
		if !used["tools:"+name] {
			out = append(out, "tools:"+name)
		}
	}
	slices.Sort(out)
	return out
}
