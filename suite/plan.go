// Package suite is the model of a suite: many case runs (the children),
// each case of a selection under each of one or more arms, under one
// budget. It holds what is pure about one: the plan of its children
// (Plan), the pass or fail of each child from its case run's outcome
// (Result), and the suite's outcome (Outcome, Summarize): totals per
// status, the failures grouped by what diverged, spend, live calls and
// provenance per arm, and the cases whose verdict differs between arms.
// The worker executes suites (worker/internal/runexec); docs/protocol.md
// says what a run_suite message and its events carry.
//
// It also selects a suite's cases: from the fixture store (SelectStored)
// or from the journal's recorded runs (SelectRuns). suite imports
// flow/host, journal, messages, replay, runevent and store, and nothing
// else of the project.
package suite

import (
	"cmp"
	"fmt"
	"strconv"

	"github.com/pyrula/caseworker/messages"
)

// Plan is a suite's selection, fixed once before its children are
// submitted and written as its suite:plan event, so that a suite resumed
// on another worker runs the same children.
type Plan struct {
	Type    string `json:"type"`
	SuiteID string `json:"suite_id"`
	Target  string `json:"target"`
	// Source is where the cases come from: "bundles" (the fixture store)
	// or "journal" (recorded runs, each case rebuilt from its run).
	Source string `json:"source"`
	// Cases are the selected cases, in selection order: fixture hashes, or
	// run ids for a journal source.
	Cases []string `json:"cases"`
	// Forks, for a journal source forked after each run's start, are the
	// run_seq each case forks after (its run's first run:start); absent
	// when each case keeps only its run's inputs.
	Forks []int64 `json:"forks,omitempty"`
	// Arms are the arms' names, in the body's order.
	Arms []string `json:"arms"`
	// Asserts are each arm's assertions, in the arms' order (absent when no
	// arm has any).
	Asserts [][]messages.SuiteAssertion `json:"asserts,omitempty"`
	// Total is the number of children: len(Cases) × len(Arms).
	Total int `json:"total"`
	// MinCases is the least number of cases that counts as a suite.
	MinCases int `json:"min_cases"`
	// FailFast stops the suite at its first child that does not pass.
	FailFast bool `json:"fail_fast,omitempty"`
}

// PlanType is the type of a suite:plan line.
const PlanType = "suite_plan"

// The sources of a plan's cases.
const (
	SourceBundles = "bundles"
	SourceJournal = "journal"
)

// Selection is what a suite's cases selected: the case ids (fixture hashes,
// or run ids for SourceJournal) and, for runs forked after their start,
// each one's fork.
type Selection struct {
	Source string
	Cases  []string
	Forks  []int64
}

// NewPlan is the plan of suite suiteID of body b over the selection sel.
func NewPlan(suiteID string, b messages.RunSuiteBody, sel Selection) Plan {
	p := Plan{Type: PlanType, SuiteID: suiteID, Target: b.TargetName, Source: cmp.Or(sel.Source, SourceBundles), Cases: sel.Cases, Forks: sel.Forks, MinCases: 1}
	if p.Cases == nil {
		p.Cases = []string{}
	}
	if b.MinCases != nil {
		p.MinCases = *b.MinCases
	}
	p.FailFast = b.FailFast
	asserts := false
	for i, a := range b.Arms {
		p.Arms = append(p.Arms, ArmName(a, i))
		asserts = asserts || len(a.Assert) > 0
	}
	if asserts {
		for _, a := range b.Arms {
			p.Asserts = append(p.Asserts, a.Assert)
		}
	}
	p.Total = len(p.Cases) * len(p.Arms)
	return p
}

// ArmName is arm i's name: its own, else "arm<i>".
func ArmName(a messages.SuiteArm, i int) string {
	if a.Name != "" {
		return a.Name
	}
	return "arm" + strconv.Itoa(i)
}

// TooSmall says why the plan is no suite (suite_too_small), "" when it is
// one.
func (p Plan) TooSmall() string {
	if len(p.Cases) >= max(p.MinCases, 1) {
		return ""
	}
	return fmt.Sprintf("the selection holds %d case(s) of %s, fewer than min_cases %d: a suite of fewer cases never passes",
		len(p.Cases), p.Target, max(p.MinCases, 1))
}

// Child is one (case, arm) of a suite: an ordinary case run.
type Child struct {
	// Index is the child's place in the plan: arm-major, Arm*len(Cases)+Case.
	Index int
	Arm   int
	Case  int
	// RunID is the child's run id: <suite id>:<arm>:<case>.
	RunID string
}

// Child returns the plan's child i (0 ≤ i < Total).
func (p Plan) Child(i int) Child {
	n := len(p.Cases)
	arm, c := i/n, i%n
	return Child{Index: i, Arm: arm, Case: c, RunID: ChildRunID(p.SuiteID, arm, c)}
}

// ChildRunID is the run id of the child of arm arm and case c.
func ChildRunID(suiteID string, arm, c int) string {
	return suiteID + ":" + strconv.Itoa(arm) + ":" + strconv.Itoa(c)
}

// MaxSuiteIDBytes is the longest suite id: a child's run id appends at
// most 14 bytes and must stay within a run id's 200.
const MaxSuiteIDBytes = 180

// SourceOf is the run_case source of case c of the plan.
func (p Plan) SourceOf(c int) messages.RunCaseSource {
	if p.Source != SourceJournal {
		return messages.RunCaseSource{Bundle: &messages.BundleSource{FixtureHash: p.Cases[c]}}
	}
	fork := messages.InputsOnly()
	if c < len(p.Forks) {
		fork = messages.ForkAfter(p.Forks[c])
	}
	return messages.RunCaseSource{Journal: &messages.JournalSource{RunID: p.Cases[c], ForkAfterSeq: fork}}
}

// AssertsOf are the assertions of arm i.
func (p Plan) AssertsOf(arm int) []messages.SuiteAssertion {
	if arm < len(p.Asserts) {
		return p.Asserts[arm]
	}
	return nil
}
