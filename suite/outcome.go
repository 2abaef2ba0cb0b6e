package suite

import (
	"cmp"
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/replay"
)

// The verdicts of a child.
const (
	// Pass: its case run completed, and under replay-only left no recorded
	// call unconsumed.
	Pass = "pass"
	// Fail: its case run started and did not pass.
	Fail = "fail"
	// Error: its case run could not run (a refusal before it started: the
	// bundle missing, bad options, …).
	Error = "error"
	// Skipped: it was not run, its suite having stopped at a failure
	// (fail_fast).
	Skipped = "skipped"
)

// ReasonFailFast is the reason on the case:outcome of a child not run
// because its suite stopped at a failure (code cancelled).
const ReasonFailFast = "fail_fast"

// Result is how one child ended: its case run's case:outcome line, and
// its result (the run:complete's; nil when the run did not complete).
type Result struct {
	Child   Child
	Outcome replay.Outcome
	Answer  json.RawMessage
}

// Judge is the child's verdict under its arm's assertions: the case run's
// verdict (Verdict), and for a pass, Fail with the first assertion that
// does not hold (its text and what was found).
func (r Result) Judge(asserts []messages.SuiteAssertion) (verdict, assertion, found string) {
	v := r.Verdict()
	if v != Pass {
		return v, "", ""
	}
	for _, a := range asserts {
		if f := CheckAssertion(a, r.Answer, r.Outcome); f != "" {
			return Fail, AssertionText(a), f
		}
	}
	return Pass, "", ""
}

// Verdict is the child's pass, fail or error.
func (r Result) Verdict() string {
	o := r.Outcome
	switch {
	case o.Status == host.StatusComplete && (o.UnconsumedKeys == nil || len(*o.UnconsumedKeys) == 0):
		return Pass
	case o.Code == string(messages.Cancelled) && o.Reason == ReasonFailFast:
		return Skipped
	case o.Status == host.StatusError && messages.Code(o.Code).Known() && !messages.Code(o.Code).IsRunStop():
		return Error
	}
	return Fail
}

// Outcome is a suite's suite:outcome line.
type Outcome struct {
	Type    string `json:"type"`
	SuiteID string `json:"suite_id"`
	Target  string `json:"target"`
	// Status is pass when every child passed, else fail.
	Status string `json:"status"`
	// Code is suite_failed or suite_too_small when the suite did not pass.
	Code    messages.Code `json:"code,omitempty"`
	Message string        `json:"message,omitempty"`
	Cases   int           `json:"cases"`
	Total   int           `json:"total"`
	// ByStatus counts the children by verdict: pass, fail, error and
	// skipped, always all four.
	ByStatus map[string]int `json:"by_status"`
	// Groups are the children that did not pass, grouped by what
	// diverged, largest group first.
	Groups []Group `json:"groups"`
	// Arms are the totals of each arm, in the plan's order.
	Arms []ArmTotals `json:"arms"`
	// ArmDiffs compare each later arm with the first, case by case.
	ArmDiffs   []ArmDiff  `json:"arm_diffs"`
	CostUSD    replay.USD `json:"cost_usd"`
	LiveCalls  int        `json:"live_calls"`
	DurationMS int64      `json:"duration_ms"`
	// Budget is the suite's budget, null when it has none.
	Budget *Budget `json:"budget"`
}

// OutcomeType is the type of a suite:outcome line.
const OutcomeType = "suite_outcome"

// Group is the children that did not pass the same way: the same reason
// code and reason, at the same call, with the same fields of its input
// added, removed and changed.
type Group struct {
	Verdict string `json:"verdict"`
	Code    string `json:"code,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Call is the call that diverged or stopped the run (with the tool's
	// name for a tool call); empty when none is named.
	Call    string   `json:"call,omitempty"`
	Changed []string `json:"changed"`
	Added   []string `json:"added"`
	Removed []string `json:"removed"`
	Count   int      `json:"count"`
	// Arms are the arms the group's children ran under.
	Arms []string `json:"arms"`
	// Examples are up to MaxExamples of its children.
	Examples []Example `json:"examples"`
	// Message is the first child's message.
	Message string `json:"message,omitempty"`
}

// ReasonAssertion is the reason of a group of children whose case run
// passed and whose answer failed an assertion of their arm; its call is
// the assertion.
const ReasonAssertion = "assertion"

// MaxExamples is the most examples a group names.
const MaxExamples = 5

// Example names one child: its case (the fixture hash), arm and run id,
// whose events hold the whole case run.
type Example struct {
	Case  string `json:"case"`
	Arm   string `json:"arm"`
	RunID string `json:"run_id"`
}

// ArmTotals are one arm's children by verdict, its live spend and calls,
// and its calls by provenance.
type ArmTotals struct {
	Name        string         `json:"name"`
	Passed      int            `json:"passed"`
	Failed      int            `json:"failed"`
	Errors      int            `json:"errors"`
	Skipped     int            `json:"skipped"`
	CostUSD     replay.USD     `json:"cost_usd"`
	LiveCalls   int            `json:"live_calls"`
	PrefixCalls int            `json:"prefix_calls"`
	Provenance  map[string]int `json:"provenance"`
}

// ArmDiff compares arm Arm with arm Against case by case: the cases whose
// verdict differs, and the difference in spend.
type ArmDiff struct {
	Arm     string `json:"arm"`
	Against string `json:"against"`
	// Differ counts the cases whose verdict differs; Cases names up to
	// MaxExamples of them.
	Differ       int        `json:"differ"`
	Cases        []string   `json:"cases"`
	CostDeltaUSD replay.USD `json:"cost_delta_usd"`
}

// Summarize is the outcome of plan p from its children's results (in any
// order; a child without a result counts as an error), which took
// durationMS.
func Summarize(p Plan, results []Result, durationMS int64) Outcome {
	o := Outcome{Type: OutcomeType, SuiteID: p.SuiteID, Target: p.Target, Status: Pass, Cases: len(p.Cases), Total: p.Total,
		ByStatus: map[string]int{Pass: 0, Fail: 0, Error: 0, Skipped: 0}, Groups: []Group{}, ArmDiffs: []ArmDiff{}, DurationMS: durationMS}
	for _, name := range p.Arms {
		o.Arms = append(o.Arms, ArmTotals{Name: name, Provenance: map[string]int{}})
	}
	if why := p.TooSmall(); why != "" {
		o.Status, o.Code, o.Message = Fail, messages.SuiteTooSmall, why
		return o
	}
	byIndex := make([]*Result, p.Total)
	for i := range results {
		if ix := results[i].Child.Index; ix >= 0 && ix < p.Total {
			byIndex[ix] = &results[i]
		}
	}
	verdicts := make([]string, p.Total)
	groups := map[string]*Group{}
	for i, r := range byIndex {
		child := p.Child(i)
		v, assertion, found := Error, "", ""
		if r == nil {
			r = &Result{Child: child, Outcome: replay.Outcome{Status: host.StatusError, Code: string(messages.RuntimeError),
				Message: "the child ended without a case:outcome"}}
		} else {
			v, assertion, found = r.Judge(p.AssertsOf(child.Arm))
		}
		verdicts[i] = v
		o.ByStatus[v]++
		a := &o.Arms[child.Arm]
		switch v {
		case Pass:
			a.Passed++
		case Fail:
			a.Failed++
		case Skipped:
			a.Skipped++
		default:
			a.Errors++
		}
		out := r.Outcome
		a.CostUSD += out.CostUSD
		a.LiveCalls += out.LiveCalls
		a.PrefixCalls += out.PrefixCalls
		for prov, n := range out.Provenance {
			a.Provenance[prov] += n
		}
		o.CostUSD += out.CostUSD
		o.LiveCalls += out.LiveCalls
		switch {
		case assertion != "":
			addToGroup(groups, v, p, child, replay.Outcome{Reason: ReasonAssertion, Cause: assertion, Message: found})
		case v != Pass && v != Skipped:
			addToGroup(groups, v, p, child, out)
		}
	}
	for _, g := range groups {
		o.Groups = append(o.Groups, *g)
	}
	slices.SortFunc(o.Groups, func(a, b Group) int {
		return cmp.Or(b.Count-a.Count, strings.Compare(a.Code, b.Code), strings.Compare(a.Call, b.Call), strings.Compare(strings.Join(a.Changed, ","), strings.Join(b.Changed, ",")))
	})
	for arm := 1; arm < len(p.Arms); arm++ {
		d := ArmDiff{Arm: p.Arms[arm], Against: p.Arms[0], Cases: []string{}, CostDeltaUSD: o.Arms[arm].CostUSD - o.Arms[0].CostUSD}
		for c := range p.Cases {
			if verdicts[arm*len(p.Cases)+c] != verdicts[c] {
				d.Differ++
				if len(d.Cases) < MaxExamples {
					d.Cases = append(d.Cases, p.Cases[c])
				}
			}
		}
		o.ArmDiffs = append(o.ArmDiffs, d)
	}
	if o.ByStatus[Pass] != p.Total {
		o.Status, o.Code = Fail, messages.SuiteFailed
		o.Message = failedMessage(o)
	}
	return o
}

// addToGroup adds child c, which did not pass with outcome out, to its
// group.
func addToGroup(groups map[string]*Group, verdict string, p Plan, c Child, out replay.Outcome) {
	g := Group{Verdict: verdict, Code: out.Code, Reason: out.Reason, Changed: []string{}, Added: []string{}, Removed: []string{}}
	switch d := out.Divergence; {
	case d != nil:
		g.Call = d.Where()
		if d.Diff != nil {
			g.Changed, g.Added, g.Removed = orEmpty(d.Diff.Changed), orEmpty(d.Diff.Added), orEmpty(d.Diff.Removed)
		}
	case len(out.StopKey) > 0 && string(out.StopKey) != "null":
		g.Call = strings.Trim(string(out.StopKey), `"`)
	case out.Cause != "":
		g.Call = out.Cause
	case out.Code == "" && out.UnconsumedKeys != nil && len(*out.UnconsumedKeys) > 0:
		g.Reason, g.Call = "unconsumed", (*out.UnconsumedKeys)[0]
	}
	key := strings.Join([]string{verdict, g.Code, g.Reason, g.Call, strings.Join(g.Changed, ","), strings.Join(g.Added, ","), strings.Join(g.Removed, ",")}, "\x00")
	cur, ok := groups[key]
	if !ok {
		g.Message = out.Message
		g.Arms, g.Examples = []string{}, []Example{}
		cur = &g
		groups[key] = cur
	}
	cur.Count++
	if arm := p.Arms[c.Arm]; !slices.Contains(cur.Arms, arm) {
		cur.Arms = append(cur.Arms, arm)
	}
	if len(cur.Examples) < MaxExamples {
		cur.Examples = append(cur.Examples, Example{Case: p.Cases[c.Case], Arm: p.Arms[c.Arm], RunID: c.RunID})
	}
}

// failedMessage says how many children did not pass, in how many groups.
func failedMessage(o Outcome) string {
	var b strings.Builder
	b.WriteString(strings.Join([]string{itoa(o.Total - o.ByStatus[Pass]), " of ", itoa(o.Total), " children did not pass (",
		itoa(o.ByStatus[Fail]), " failed, ", itoa(o.ByStatus[Error]), " could not run"}, ""))
	if n := o.ByStatus[Skipped]; n > 0 {
		b.WriteString(", " + itoa(n) + " skipped under fail_fast")
	}
	b.WriteString("), in " + itoa(len(o.Groups)) + " group(s)")
	if len(o.Groups) > 0 {
		g := o.Groups[0]
		b.WriteString("; the largest: " + itoa(g.Count) + " × " + cmp.Or(g.Code, g.Reason, g.Verdict))
		if g.Call != "" {
			b.WriteString(" at " + g.Call)
		}
		if len(g.Changed) > 0 {
			b.WriteString(", changed " + strings.Join(g.Changed, ", "))
		}
	}
	return b.String()
}

func itoa(n int) string { return strconv.Itoa(n) }

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Budget is what a suite's budget held when its outcome was written: its
// ceilings, the live calls reserved, what they spent, and what stays
// reserved at its worst case (calls whose worker died with them in
// flight).
type Budget struct {
	MaxCostUSD   *replay.USD `json:"max_cost_usd"`
	MaxLiveCalls *int        `json:"max_live_calls"`
	LiveCalls    int         `json:"live_calls"`
	SpentUSD     replay.USD  `json:"spent_usd"`
	UnsettledUSD replay.USD  `json:"unsettled_usd"`
}
