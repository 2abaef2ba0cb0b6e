package messages

import (
	"encoding/json"
	"reflect"
	"strconv"
)

// StartRunBody is the body of start_run: a new live run of a target.
type StartRunBody struct {
	// RunID is the new run's id; empty means one derived from the message id.
	RunID      string          `json:"run_id,omitempty"`
	TargetName string          `json:"target_name"`
	Inputs     json.RawMessage `json:"inputs,omitempty"`
	// LLMRef names the model client of an agent's model calls: "anthropic",
	// "openai" or one the worker's binary registered; empty means the
	// worker's PYRULA_LLM_REF, else the agent's own client.
	LLMRef string `json:"llm_ref,omitempty"`
}

// RunCaseBody is the body of run_case: a case run from a saved bundle or
// from a run in the worker's journal.
type RunCaseBody struct {
	// RunID is the new run's id; empty means one derived from the message id.
	RunID      string         `json:"run_id,omitempty"`
	TargetName string         `json:"target_name"`
	Source     RunCaseSource  `json:"source"`
	Options    RunCaseOptions `json:"options"`
	// FixtureStore, when set, is the store the sender expects the worker
	// to read a bundle source from (binding_mismatch otherwise).
	FixtureStore string `json:"fixture_store,omitempty"`
}

// RunCaseSource is where a case run's case comes from: exactly one of
// Bundle and Journal.
type RunCaseSource struct {
	Bundle  *BundleSource  `json:"bundle,omitempty"`
	Journal *JournalSource `json:"journal,omitempty"`
}

// BundleSource names a bundle in the fixture store.
type BundleSource struct {
	FixtureHash string `json:"fixture_hash"`
}

// JournalSource names a recorded run whose capture is rebuilt from the
// journal (live or archived).
type JournalSource struct {
	RunID string `json:"run_id"`
	// ForkAfterSeq is where the case forks from the recorded run: a
	// run_seq, or JSON null to keep only the inputs (then every call goes
	// down the ladder, live where allowed). It must be given: a source
	// without it is refused (invalid_overrides).
	ForkAfterSeq ForkPoint `json:"fork_after_seq,omitzero"`
	// ExpectedHash, when set, is the hash the rebuilt capture must have
	// (whatif_source_changed otherwise).
	ExpectedHash string `json:"expected_hash,omitempty"`
}

// ForkPoint is a fork_after_seq that must be given and may be null: Given
// says the key was present, Seq is the run_seq the case forks after, nil
// for null (the inputs only). The zero value is "not given", which encodes
// as no key at all (omitzero); Given with a nil Seq encodes as null.
type ForkPoint struct {
	Given bool
	Seq   *int64
}

// ForkAfter is the fork point after run_seq seq.
func ForkAfter(seq int64) ForkPoint { return ForkPoint{Given: true, Seq: &seq} }

// InputsOnly is the fork point null: the case keeps only the run's inputs.
func InputsOnly() ForkPoint { return ForkPoint{Given: true} }

// IsZero reports that the fork point was not given.
func (f ForkPoint) IsZero() bool { return !f.Given }

// MarshalJSON writes the run_seq, or null.
func (f ForkPoint) MarshalJSON() ([]byte, error) {
	if f.Seq == nil {
		return []byte("null"), nil
	}
	return strconv.AppendInt(nil, *f.Seq, 10), nil
}

// UnmarshalJSON reads a run_seq (an integer) or null, and marks the fork
// point given. Anything else is a *json.UnmarshalTypeError.
func (f *ForkPoint) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*f = InputsOnly()
		return nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		what := "number " + string(b)
		if len(b) > 0 && (b[0] < '0' || b[0] > '9') && b[0] != '-' {
			what = map[byte]string{'"': "string", '{': "object", '[': "array", 't': "bool", 'f': "bool"}[b[0]]
		}
		return &json.UnmarshalTypeError{Value: what, Type: reflect.TypeFor[int64]()}
	}
	*f = ForkAfter(n)
	return nil
}

// RunCaseOptions are the case-run options, as the CLI's `case run` flags.
type RunCaseOptions struct {
	FromStart bool                       `json:"from_start,omitempty"`
	Inputs    map[string]json.RawMessage `json:"inputs,omitempty"`
	Model     string                     `json:"model,omitempty"`
	// Prompt is the system prompt of the agent's model calls (--prompt-file's content).
	Prompt     string          `json:"prompt,omitempty"`
	Supply     json.RawMessage `json:"supply,omitempty"`
	LiveBudget *int            `json:"live_budget,omitempty"`
	MaxCostUSD *float64        `json:"max_cost_usd,omitempty"`
	Prices     json.RawMessage `json:"prices,omitempty"`
	AllowWrite []string        `json:"allow_write,omitempty"`
	ReplayOnly bool            `json:"replay_only,omitempty"`
	// LLMRef names the model client of live model calls (as StartRunBody's).
	LLMRef string `json:"llm_ref,omitempty"`
}

// RunResult is the result of start_run and run_case: the submitted run and
// the key of its event stream, where everything after the submission
// arrives, ending with a terminal event.
type RunResult struct {
	RunID  string `json:"run_id"`
	Events string `json:"events"`
	// ForkAfterSeq, for a run_case from the journal, is the fork the case
	// uses, as the source gave it: a run_seq, or null for the inputs only.
	// Absent for other runs.
	ForkAfterSeq ForkPoint `json:"fork_after_seq,omitzero"`
}
