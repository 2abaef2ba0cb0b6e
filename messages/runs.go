package messages

import "encoding/json"

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
	RunID        string `json:"run_id"`
	ForkAfterSeq *int64 `json:"fork_after_seq,omitempty"`
	// ExpectedHash, when set, is the hash the rebuilt capture must have
	// (whatif_source_changed otherwise).
	ExpectedHash string `json:"expected_hash,omitempty"`
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
}
