package replay

import (
	"encoding/json"

	"github.com/pyrula/caseworker/internal/jsondiff"
)

// InputDiff is a field-level difference between a call's recorded and
// actual input: JSON paths (such as "$.messages[2].content") that only the
// actual input has (Added), only the recorded one has (Removed), or whose
// values differ (Changed). Under volatile-field rules (DiffInputsVolatile)
// the paths that differ only in what the rules remove are listed apart
// (Ignored) and do not appear in the other three.
type InputDiff struct {
	Added   []string `json:"added"`
	Removed []string `json:"removed"`
	Changed []string `json:"changed"`
	// Ignored, present only when there are some, are the differing paths
	// the call's volatile-field rules ignore.
	Ignored []string `json:"ignored,omitempty"`
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
