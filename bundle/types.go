package bundle

import "encoding/json"

// Format is the bundle format this version writes and reads.
const Format = 1

// Kind is a bundle's manifest kind.
type Kind string

// The manifest kinds of format 1.
const (
	KindWorkflow Kind = "workflow"
	KindAgent    Kind = "agent"
)

// Bundle is format 1 in Go types: what a save builds before it is
// canonicalised with Encode. Values that are arbitrary JSON (inputs, events,
// results) are kept as raw JSON text.
type Bundle struct {
	Manifest Manifest          `json:"manifest"`
	History  []json.RawMessage `json:"history"`
	Results  []Result          `json:"results"`
}

// Manifest describes the recorded run and the fork point.
type Manifest struct {
	Format         int             `json:"format"`
	Kind           Kind            `json:"kind"`
	TargetName     string          `json:"target_name"`
	CodeVersion    string          `json:"code_version"`
	Registration   Registration    `json:"registration"`
	RecordedConfig json.RawMessage `json:"recorded_config"`
	PyrulaVersion  string          `json:"pyrula_version"`
	Source         Source          `json:"source"`
	// ForkAfterSeq is the run_seq the case forks after; nil keeps only the inputs.
	ForkAfterSeq *int64          `json:"fork_after_seq"`
	Capture      Capture         `json:"capture"`
	Inputs       json.RawMessage `json:"inputs"`
}

// Registration is what the target offered when the run was recorded.
type Registration struct {
	// Tools lists every tool an agent offered, with its writes flag.
	Tools []Tool `json:"tools"`
	// Steps lists step ids, so that --allow-write step:<id> can name them.
	Steps []Step `json:"steps"`
	// Volatile are the target's volatile-field rules; absent (nil) when it
	// declares none.
	Volatile *Volatile `json:"volatile,omitempty"`
}

// Volatile are the volatile-field rules of a target's calls, as recorded
// when the run was saved: the parts of a call's input that do not count in
// its fingerprint (package bundle/volatile has their syntax). A case run
// verifies the recorded calls under these rules, not the code's.
type Volatile struct {
	// Steps are, by step name, the JSON paths of a step's input fields
	// that do not count, sorted.
	Steps map[string][]string `json:"steps,omitempty"`
	// Tools are, by tool name, the JSON paths of a tool's input fields that
	// do not count, sorted.
	Tools map[string][]string `json:"tools,omitempty"`
	// Prompt are an agent's regular expressions whose matches in the system
	// prompt and the messages' text do not count in its model calls'
	// fingerprints, in the order they apply.
	Prompt []string `json:"prompt,omitempty"`
}

// Tool is one tool an agent offered.
type Tool struct {
	Name   string `json:"name"`
	Writes bool   `json:"writes"`
}

// Step is one registered step id with its declared effect.
type Step struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Effect string `json:"effect"`
}

// Source says which run the bundle was captured from.
type Source struct {
	RunID     string `json:"run_id"`
	Namespace string `json:"namespace"`
	// Origin is "valkey" or "archive".
	Origin string `json:"origin"`
}

// Capture says whether replay can use the bundle, and what is missing if not.
type Capture struct {
	Complete bool              `json:"complete"`
	Missing  []json.RawMessage `json:"missing"`
}

// Result is one recorded call result: exactly one of Result and Error is set
// (a JSON null result is the four bytes "null", which counts as set).
// Input and StartSeq, when set, are the call's recorded input and the
// run_seq of its call:start event: a capture keeps them on the results of
// calls made after the fork (whose call:start events are not in the
// history), so that a case run can say which fields of such a call changed
// and a case diff can list such calls in run order. A bundle saved without
// them still reads and replays; its divergences after the fork name the
// call but not the fields.
type Result struct {
	Key         string          `json:"key"`
	Kind        string          `json:"kind"`
	Fingerprint string          `json:"fingerprint"`
	Input       json.RawMessage `json:"input,omitempty"`
	Result      json.RawMessage `json:"result,omitempty"`
	Error       json.RawMessage `json:"error,omitempty"`
	StartSeq    int64           `json:"start_seq,omitempty"`
}

// Summary is the manifest_summary printed by save and import.
type Summary struct {
	Format       int     `json:"format"`
	Kind         Kind    `json:"kind"`
	TargetName   string  `json:"target_name"`
	ForkAfterSeq *int64  `json:"fork_after_seq"`
	Capture      Capture `json:"capture"`
	ResultCount  int     `json:"result_count"`
	HistoryCount int     `json:"history_count"`
}
