package suite_test

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/replay"
	"github.com/pyrula/caseworker/suite"
)

// plan is a plan of n cases under the named arms.
func plan(n int, arms ...string) suite.Plan {
	var cases []string
	for i := range n {
		cases = append(cases, strings.Repeat(string(rune('a'+i)), 4))
	}
	b := messages.RunSuiteBody{TargetName: "t"}
	for _, a := range arms {
		b.Arms = append(b.Arms, messages.SuiteArm{Name: a})
	}
	return suite.NewPlan("s1", b, suite.Selection{Cases: cases})
}

// diverged is a replay_diverged outcome at call, changing fields.
func diverged(call string, fields ...string) replay.Outcome {
	return replay.Outcome{Status: host.StatusError, Code: string(messages.ReplayDiverged), Reason: replay.ReasonInputChanged,
		Message:    call + ": input fields changed",
		Divergence: &replay.Divergence{Call: call, Diff: &replay.InputDiff{Changed: fields}}, CostUSD: 0.5, LiveCalls: 1}
}

func complete() replay.Outcome {
	return replay.Outcome{Status: host.StatusComplete, Provenance: map[string]int{"reused": 3}, CostUSD: 0.25, LiveCalls: 1}
}

// Summarize groups the children that did not pass by code, call and
// changed fields, counts them per arm, compares the arms case by case, and
// counts a child without an outcome as one that could not run.
func TestSummarize(t *testing.T) {
	p := plan(4, "base", "new")
	results := []suite.Result{
		{Child: p.Child(0), Outcome: complete()},
		{Child: p.Child(1), Outcome: complete()},
		{Child: p.Child(2), Outcome: complete()},
		{Child: p.Child(3), Outcome: complete()},
		{Child: p.Child(4), Outcome: complete()},
		{Child: p.Child(5), Outcome: diverged("step:quote:0", "$.qty")},
		{Child: p.Child(6), Outcome: diverged("step:quote:0", "$.qty")},
		// Child 7 has no outcome.
	}
	o := suite.Summarize(p, results, 1234)
	if o.Status != suite.Fail || o.Code != messages.SuiteFailed || o.Total != 8 || o.Cases != 4 {
		t.Fatalf("outcome %+v", o)
	}
	if want := map[string]int{suite.Pass: 5, suite.Fail: 2, suite.Error: 1, suite.Skipped: 0}; !maps.Equal(o.ByStatus, want) {
		t.Fatalf("by status %v, want %v", o.ByStatus, want)
	}
	if len(o.Groups) != 2 {
		t.Fatalf("groups %+v, want 2", o.Groups)
	}
	g := o.Groups[0]
	if g.Count != 2 || g.Call != "step:quote:0" || !slices.Equal(g.Changed, []string{"$.qty"}) || !slices.Equal(g.Arms, []string{"new"}) ||
		len(g.Examples) != 2 || g.Examples[0].RunID != "s1:1:1" || g.Examples[0].Case != p.Cases[1] {
		t.Fatalf("largest group %+v", g)
	}
	if e := o.Groups[1]; e.Verdict != suite.Error || e.Code != string(messages.RuntimeError) || e.Count != 1 {
		t.Fatalf("second group %+v, want the child without an outcome", e)
	}
	if a := o.Arms[1]; a.Passed != 1 || a.Failed != 2 || a.Errors != 1 || a.LiveCalls != 3 || a.CostUSD != 1.25 || a.Provenance["reused"] != 3 {
		t.Fatalf("arm new %+v", a)
	}
	if d := o.ArmDiffs[0]; d.Differ != 3 || d.CostDeltaUSD != 0.25 || !slices.Equal(d.Cases, p.Cases[1:]) {
		t.Fatalf("arm diff %+v", d)
	}
	if !strings.Contains(o.Message, "3 of 8 children did not pass (2 failed, 1 could not run), in 2 group(s)") {
		t.Fatalf("message %q", o.Message)
	}
}

// A selection under min_cases fails with suite_too_small and runs nothing;
// a suite whose every child passed passes.
func TestSummarizeTooSmallAndPass(t *testing.T) {
	b := messages.RunSuiteBody{TargetName: "t", Arms: []messages.SuiteArm{{}}}
	min := 3
	b.MinCases = &min
	small := suite.NewPlan("s", b, suite.Selection{Cases: []string{"x", "y"}})
	if o := suite.Summarize(small, nil, 0); o.Status != suite.Fail || o.Code != messages.SuiteTooSmall || !strings.Contains(o.Message, "fewer than min_cases 3") {
		t.Fatalf("too small: %+v", o)
	}
	empty := suite.NewPlan("s", messages.RunSuiteBody{TargetName: "t", Arms: []messages.SuiteArm{{}}}, suite.Selection{})
	if o := suite.Summarize(empty, nil, 0); o.Code != messages.SuiteTooSmall {
		t.Fatalf("empty: %+v", o)
	}
	p := plan(2, "only")
	o := suite.Summarize(p, []suite.Result{{Child: p.Child(1), Outcome: complete()}, {Child: p.Child(0), Outcome: complete()}}, 0)
	if o.Status != suite.Pass || o.Code != "" || len(o.Groups) != 0 || o.ByStatus[suite.Pass] != 2 {
		t.Fatalf("pass: %+v", o)
	}
	raw, err := json.Marshal(o)
	if err != nil || !strings.Contains(string(raw), `"budget":null`) || !strings.Contains(string(raw), `"groups":[]`) {
		t.Fatalf("encoded %s, %v", raw, err)
	}
}
