package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/pyrula/caseworker/cli/internal/htmlreport"
	"github.com/pyrula/caseworker/explain"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/replay"
	"github.com/pyrula/caseworker/runevent"
	"github.com/pyrula/caseworker/version"
)

// The --html reports: each is a rendering (cli/internal/htmlreport) of the
// JSON lines the command printed, with the call timelines of the case runs
// read from their own journals.

// provVerified marks a recorded prefix call on a timeline: verified against
// the recording (its call:done says reused).
const provVerified = "verified"

// provStopped marks on a timeline the call that stopped the run.
const provStopped = "stopped"

// checkHTMLPath refuses an --html FILE whose directory does not exist,
// before any work; verb ("case run") starts the error.
func checkHTMLPath(verb, path string) error {
	if path == "" {
		return nil
	}
	if st, err := os.Stat(filepath.Dir(path)); err != nil || !st.IsDir() {
		return fmt.Errorf("%s: --html %s: its directory does not exist", verb, path)
	}
	return nil
}

// writeReport writes r to path atomically.
func writeReport(path string, r htmlreport.Report) error {
	r.Version = version.Version
	_, err := writeFileAtomic(path, exportPerm, func(w io.Writer) error {
		return htmlreport.Write(w, r)
	})
	return err
}

// jsonLine is v as the JSON line the CLI prints (without its newline).
func jsonLine(v any) json.RawMessage {
	raw, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage("null")
	}
	return raw
}

// timeline lists the calls of case run runID from its journal in run
// order: each call with its provenance (a prefix call "verified"), the
// change of the call lines that carry one, and the call that stopped the
// run ("stopped", with the divergence when it diverged).
func timeline(log *host.MemLog, runID string, calls []replay.CallLine, out replay.Outcome, values bool) []htmlreport.Call {
	changes := map[int]*replay.Divergence{}
	for _, c := range calls {
		if c.Change != nil {
			changes[c.Seq] = c.Change
		}
	}
	var tl []htmlreport.Call
	seqOf := map[string]int{}
	effects := map[string]string{}
	for _, ev := range log.Events(runID) {
		if ev.Call == nil {
			continue
		}
		id := ev.Call.ID()
		switch ev.Kind {
		case runevent.CallStart:
			if _, ok := seqOf[id]; !ok {
				seqOf[id] = len(seqOf)
				effects[id] = string(ev.Call.Effect)
			}
		case runevent.CallDone:
			seq := seqOf[id]
			c := htmlreport.Call{Seq: seq, Call: id, Effect: effects[id], Provenance: ev.Provenance}
			if seq < out.PrefixCalls {
				c.Provenance = provVerified
			}
			if d := changes[seq]; d != nil {
				c.Change = jsonLine(valuesIf(d, values))
			}
			tl = append(tl, c)
		}
	}
	var stop string
	if err := json.Unmarshal(out.StopKey, &stop); err == nil && stop != "" {
		c := htmlreport.Call{Seq: len(seqOf), Call: stop, Provenance: provStopped}
		if seq, ok := seqOf[stop]; ok {
			c.Seq, c.Effect = seq, effects[stop]
		}
		if out.Divergence != nil && out.Divergence.Call == stop {
			c.Change = jsonLine(valuesIf(out.Divergence, values))
		}
		tl = append(tl, c)
	}
	return tl
}

// runReport is the report of one case run.
func runReport(title string, values bool, log *host.MemLog, runID string, rep replay.Report) htmlreport.Report {
	out := jsonLine(rep.Outcome)
	return htmlreport.Report{Command: "case run", Title: title, Values: values, Summary: out,
		Cases: []htmlreport.Case{{Line: out, Timeline: timeline(log, runID, rep.Calls, rep.Outcome, values)}}}
}

// valuesIf is d, or without --values a copy of d without the values of its
// field diff (a case compare's runs keep values to compare results).
func valuesIf(d *replay.Divergence, values bool) *replay.Divergence {
	if d == nil || values || d.Diff == nil || d.Diff.Values == nil {
		return d
	}
	c, diff := *d, *d.Diff
	diff.Values = nil
	c.Diff = &diff
	return &c
}

// suiteReport is the report of a case test: a case per line, with the
// timeline of each case that did not pass.
func suiteReport(title string, values bool, lines []suiteLine, sum suiteSummary) htmlreport.Report {
	r := htmlreport.Report{Command: "case test", Title: title, Values: values, Summary: jsonLine(sum),
		Cases: make([]htmlreport.Case, 0, len(lines))}
	for _, l := range lines {
		r.Cases = append(r.Cases, htmlreport.Case{Line: jsonLine(l), Timeline: l.timeline})
	}
	return r
}

// diffReport is the report of a case diff.
func diffReport(title string, values bool, man diffManifest, calls []callChange, sum diffSummary) htmlreport.Report {
	d := &htmlreport.Diff{Manifest: jsonLine(man)}
	for _, c := range calls {
		c.Type = "call"
		d.Calls = append(d.Calls, jsonLine(c))
	}
	return htmlreport.Report{Command: "case diff", Title: title, Values: values, Summary: jsonLine(sum), Diff: d}
}

// compareReport is the report of a case compare: each arm's line, its
// answer and the line diff of its answer against the first arm's, its
// tool calls and its timeline.
func compareReport(title string, values bool, arms []compareArm, lines []armLine, cmp comparisonLine) htmlreport.Report {
	r := htmlreport.Report{Command: "case compare", Title: title, Values: values, Summary: jsonLine(cmp)}
	first := ""
	for i, arm := range arms {
		answer := indentedJSON(arm.report.Outcome.Result)
		a := htmlreport.Arm{Line: jsonLine(lines[i]), Answer: answer, Timeline: arm.timeline}
		if i == 0 {
			first = answer
		} else {
			a.AnswerDiff = explain.LineDiff(first, answer)
			if a.AnswerDiff == nil {
				a.AnswerDiff = []string{}
			}
		}
		for _, c := range arm.report.Calls {
			if c.Kind == string(host.KindTool) {
				a.ToolCalls++
			}
		}
		if !values {
			a.Answer = ""
			if a.AnswerDiff != nil {
				a.AnswerDiff = pathsOnly(a.AnswerDiff)
			}
		}
		r.Arms = append(r.Arms, a)
	}
	return r
}

// pathsOnly keeps a line diff's hunk headers and drops the lines
// themselves (values), saying how many each side has.
func pathsOnly(lines []string) []string {
	out := []string{}
	for _, l := range lines {
		if strings.HasPrefix(l, "@@") {
			out = append(out, l)
		}
	}
	if len(out) > 0 {
		out = append(out, "@@ the answers differ; --values shows the lines @@")
	}
	return out
}

// indentedJSON is a JSON value indented by two spaces, "" for none.
func indentedJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return string(raw)
	}
	return string(out)
}
