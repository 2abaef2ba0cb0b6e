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
type Result struct {
	Key         string          `json:"key"`
	Kind        string          `json:"kind"`
	Fingerprint string          `json:"fingerprint"`
	Result      json.RawMessage `json:"result,omitempty"`
	Error       json.RawMessage `json:"error,omitempty"`
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
