package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pyrula/caseworker/internal/redact"
	"github.com/pyrula/caseworker/replay"
	"github.com/pyrula/caseworker/suite"
)

// writeSuiteOutcome writes a suite's outcome for people: the suite, its
// status and message, its children by verdict, spend and budget, then a
// table of its failure groups (count, verdict and code, the call, the
// fields that changed, the arms, an example child) and one of its arms.
func writeSuiteOutcome(w io.Writer, o suite.Outcome) error {
	field(w, "", "suite", cell(o.SuiteID)+" ("+cell(o.Target)+")")
	status := o.Status
	if o.Code != "" {
		status += " " + string(o.Code)
	}
	field(w, "", "status", status)
	if o.Message != "" {
		field(w, "", "message", redact.Secrets(oneLine(o.Message)))
	}
	children := fmt.Sprintf("%d (%s × %s): %d pass, %d fail, %d error", o.Total, count(o.Cases, "case", "cases"),
		count(len(o.Arms), "arm", "arms"), o.ByStatus[suite.Pass], o.ByStatus[suite.Fail], o.ByStatus[suite.Error])
	if n := o.ByStatus[suite.Skipped]; n > 0 {
		children += fmt.Sprintf(", %d skipped (fail_fast)", n)
	}
	field(w, "", "children", children)
	field(w, "", "spend", usdText(o.CostUSD)+", "+count(o.LiveCalls, "live call", "live calls"))
	if b := o.Budget; b != nil {
		limits := []string{}
		if b.MaxCostUSD != nil {
			limits = append(limits, "max_cost_usd "+usdText(*b.MaxCostUSD))
		}
		if b.MaxLiveCalls != nil {
			limits = append(limits, "max_live_calls "+strconv.Itoa(*b.MaxLiveCalls))
		}
		text := fmt.Sprintf("%s; %s reserved, %s spent", strings.Join(limits, ", "), count(b.LiveCalls, "live call", "live calls"), usdText(b.SpentUSD))
		if b.UnsettledUSD > 0 {
			text += ", " + usdText(b.UnsettledUSD) + " unsettled (calls lost in flight, at their worst case)"
		}
		field(w, "", "budget", text)
	}
	field(w, "", "took", (time.Duration(o.DurationMS) * time.Millisecond).String())
	if len(o.Groups) > 0 {
		fmt.Fprintln(w)
		t := newTable()
		t.row("COUNT", "VERDICT", "CODE", "CALL", "CHANGED", "ARMS", "EXAMPLE")
		for _, g := range o.Groups {
			code := g.Code
			if g.Reason != "" {
				code += " (" + g.Reason + ")"
			}
			example := ""
			if len(g.Examples) > 0 {
				example = g.Examples[0].RunID
			}
			t.row(strconv.Itoa(g.Count), g.Verdict, cell(code), cell(g.Call), cell(groupFields(g)), cell(strings.Join(g.Arms, ",")), cell(example))
		}
		if err := t.writeTo(w); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	t := newTable()
	t.row("ARM", "PASS", "FAIL", "ERROR", "COST", "LIVE", "CALLS")
	for _, a := range o.Arms {
		t.row(cell(a.Name), strconv.Itoa(a.Passed), strconv.Itoa(a.Failed), strconv.Itoa(a.Errors), usdText(a.CostUSD),
			strconv.Itoa(a.LiveCalls), provenanceText(a.Provenance))
	}
	if err := t.writeTo(w); err != nil {
		return err
	}
	for _, d := range o.ArmDiffs {
		line := fmt.Sprintf("%s against %s: %s differ", cell(d.Arm), cell(d.Against), count(d.Differ, "case", "cases"))
		if d.CostDeltaUSD != 0 {
			line += ", cost " + signedUSD(d.CostDeltaUSD)
		}
		fmt.Fprintln(w, line)
	}
	return nil
}

// groupFields is a group's input fields: changed, +added, -removed.
func groupFields(g suite.Group) string {
	var f []string
	f = append(f, g.Changed...)
	for _, p := range g.Added {
		f = append(f, "+"+p)
	}
	for _, p := range g.Removed {
		f = append(f, "-"+p)
	}
	return strings.Join(f, ", ")
}

// provenanceText is calls by provenance, "reused 12, live 3", in name order.
func provenanceText(p map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(p)) {
		if p[k] > 0 {
			parts = append(parts, k+" "+strconv.Itoa(p[k]))
		}
	}
	return strings.Join(parts, ", ")
}

// signedUSD is a difference in dollars with its sign.
func signedUSD(u replay.USD) string {
	if u > 0 {
		return "+" + usdText(u)
	}
	return "-" + usdText(-u)
}
