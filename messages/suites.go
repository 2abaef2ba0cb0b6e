package messages

import (
	"encoding/json"
	"time"
)

// RunSuiteBody is the body of run_suite: case runs of the cases a
// selection names, each under every arm, under one budget. Each (case, arm)
// is a child: an ordinary case run with a run id and events of its own.
type RunSuiteBody struct {
	// SuiteID is the suite's id (a run id: its events are the suite's);
	// empty means one derived from the message id.
	SuiteID    string     `json:"suite_id,omitempty"`
	TargetName string     `json:"target_name"`
	Cases      SuiteCases `json:"cases"`
	// Arms are the ways each case runs; at least one, at most MaxSuiteArms.
	Arms []SuiteArm `json:"arms"`
	// MaxCostUSD and MaxLiveCalls bound the whole suite's live spend and
	// live calls, across every child and every worker: every live call of
	// a child reserves one call and its worst-case price before it is
	// sent, and settles its real price after.
	MaxCostUSD   *float64 `json:"max_cost_usd,omitempty"`
	MaxLiveCalls *int     `json:"max_live_calls,omitempty"`
	// FailFast stops the suite at its first child that does not pass: the
	// children that have not started by then end at once, not run
	// (skipped).
	FailFast bool `json:"fail_fast,omitempty"`
	// MinCases is the least number of cases that counts as a suite (1 when
	// absent); a smaller selection ends the suite with suite_too_small.
	MinCases *int `json:"min_cases,omitempty"`
	// FixtureStore, when set, is the store the sender expects the worker
	// to read bundles from (binding_mismatch otherwise).
	FixtureStore string `json:"fixture_store,omitempty"`
}

// MaxSuiteArms is the most arms a suite has; MaxSuiteChildren the most
// (case, arm) children.
const (
	MaxSuiteArms     = 16
	MaxSuiteChildren = 100_000
)

// SuiteCases selects a suite's cases: exactly one of Bundles, Store and
// Journal.
type SuiteCases struct {
	// Bundles are fixture hashes in the worker's fixture store.
	Bundles []string `json:"bundles,omitempty"`
	// Store selects every case of the suite's target in the fixture store.
	Store *SuiteStoreCases `json:"store,omitempty"`
	// Journal selects completed runs of the suite's target in the worker's
	// journal (the archive included).
	Journal *SuiteJournalCases `json:"journal,omitempty"`
}

// SuiteJournalCases selects the completed runs of the suite's target in the
// worker's journal, live and archived, in run id order.
type SuiteJournalCases struct {
	// After and Before bound when the runs finished: After ≤ finished_at <
	// Before (RFC 3339); absent does not bound.
	After  time.Time `json:"after,omitzero"`
	Before time.Time `json:"before,omitzero"`
	// Sample, when above 0 and below the runs found, keeps Sample of them
	// drawn with Seed: the same runs and seed draw the same sample.
	Sample int    `json:"sample,omitempty"`
	Seed   uint64 `json:"seed,omitempty"`
	// Fork is where each run's case forks: ForkAfterStart (the default:
	// right after the run's first run:start, so that every call is replayed
	// against the recording) or ForkInputsOnly (the inputs alone: every
	// call goes down the ladder).
	Fork string `json:"fork,omitempty"`
}

// The forks of a suite's journal cases.
const (
	ForkAfterStart = "after_start"
	ForkInputsOnly = "inputs_only"
)

// SuiteStoreCases selects the fixture store's cases of the suite's target,
// in hash order; Limit, when above 0, keeps the first Limit.
type SuiteStoreCases struct {
	Limit int `json:"limit,omitempty"`
}

// SuiteArm is one way a suite runs each case: the options of a run_case,
// and what each of its children's answers must hold to pass.
type SuiteArm struct {
	// Name names the arm in the suite's outcome; "arm<i>" when empty.
	Name    string         `json:"name,omitempty"`
	Options RunCaseOptions `json:"options"`
	// Assert are checks on each child's result and spend (at most
	// MaxSuiteAssertions): a child whose case run completed passes only
	// when every one holds.
	Assert []SuiteAssertion `json:"assert,omitempty"`
}

// MaxSuiteAssertions is the most assertions an arm has.
const MaxSuiteAssertions = 20

// SuiteAssertion is one check on a child: exactly one of Equals, Contains
// and Matches on the value at Path in the run's result, or a bound on its
// spend (MaxCostUSD) or live calls (MaxLiveCalls).
type SuiteAssertion struct {
	// Path is a JSON path into the run's result: "$" (the default, the
	// whole result), "$.answer", "$.items[0].id", `$["a key"]`.
	Path string `json:"path,omitempty"`
	// Equals holds when the value is this JSON value (numbers compared as
	// numbers, objects whatever their key order).
	Equals json.RawMessage `json:"equals,omitempty"`
	// Contains holds when the value is a string holding this text, or an
	// array with this string among its elements.
	Contains *string `json:"contains,omitempty"`
	// Matches holds when the value is a string the RE2 pattern matches.
	Matches *string `json:"matches,omitempty"`
	// MaxCostUSD holds when the run's cost_usd is at most this.
	MaxCostUSD *float64 `json:"max_cost_usd,omitempty"`
	// MaxLiveCalls holds when the run's live_calls are at most this.
	MaxLiveCalls *int `json:"max_live_calls,omitempty"`
}

// RunSuiteResult is the result of run_suite: the suite and the key of its
// event stream, where its plan, its progress and its suite:outcome arrive,
// ending with a terminal event.
type RunSuiteResult struct {
	SuiteID string `json:"suite_id"`
	Events  string `json:"events"`
}
