package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/internal/redact"
	"github.com/pyrula/caseworker/replay"
)

// formatTable is the --format of tables for people; formatJSON (JSON
// lines) is the default. A table is a rendering of the same records as the
// JSON lines, never a second computation: the divergence detail of every
// table is writeDivergence, the outcome of case run and of a followed case
// run is writeOutcome.
const formatTable = "table"

// checkFormat checks a --format flag; verb ("case run") starts its error.
func checkFormat(verb, format string) error {
	if format != formatJSON && format != formatTable {
		return fmt.Errorf("%s: --format %s: want json or table", verb, plainOrQuoted(format))
	}
	return nil
}

// table is the columns of every table: cells two spaces apart, rows
// without trailing spaces.
type table struct {
	buf bytes.Buffer
	tw  *tabwriter.Writer
}

func newTable() *table {
	t := &table{}
	t.tw = tabwriter.NewWriter(&t.buf, 2, 8, 2, ' ', 0)
	return t
}

// row adds a row of cells (already made cells: see cell).
func (t *table) row(cells ...string) {
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

// writeTo writes the table to w.
func (t *table) writeTo(w io.Writer) error {
	if err := t.tw.Flush(); err != nil {
		return err
	}
	for line := range strings.Lines(t.buf.String()) {
		if _, err := io.WriteString(w, strings.TrimRight(line, " \n")+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// cellReplacer keeps a value on one line and in one cell of a table.
var cellReplacer = strings.NewReplacer("\t", " ", "\n", " ", "\r", " ")

// cell is s as one table cell: tabs and line ends become spaces, and an
// empty value is "-".
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return cellReplacer.Replace(s)
}

// labelWidth is the width of the labels of a detail block ("fingerprint:").
const labelWidth = 16

// field writes one "label: value" line of a detail block; more lines of
// the same value follow it aligned under the value. Without a value it
// writes "label:" alone, the heading of what follows.
func field(w io.Writer, indent, label string, lines ...string) {
	if len(lines) == 0 {
		fmt.Fprintf(w, "%s%s:\n", indent, label)
	}
	for i, l := range lines {
		if i > 0 {
			label = ""
		} else {
			label += ":"
		}
		fmt.Fprintf(w, "%s%-*s%s\n", indent, labelWidth, label, strings.TrimRight(l, " "))
	}
}

// writeDivergence writes the detail of a divergence or of a changed call,
// one "label: value" line each, at indent: the call (and the recorded one
// when it differs), its role, both fingerprints (first 12 characters), the
// input's field paths added, removed, changed and ignored as volatile, the
// values at each path (--values), what changed in a model call (its parts,
// the model, the system prompt's line diff as it is, the tools, the
// message paths), why the case cannot tell (no_input) and the volatile
// rules when the code's differ from the recorded ones. Every table that
// shows a divergence shows it through this function.
func writeDivergence(w io.Writer, d *replay.Divergence, indent string) {
	if d == nil {
		return
	}
	call := d.Call
	if call == "" {
		call = "(none: the target made no further call)"
	}
	field(w, indent, "call", fmt.Sprintf("%s (seq %d)", cell(call), d.Seq))
	if d.RecordedCall != "" && d.RecordedCall != d.Call {
		field(w, indent, "recorded call", cell(d.RecordedCall))
	}
	if d.Role != "" {
		field(w, indent, "role", roleText(d.Role, d.CausedBy))
	}
	fp := func(s string) string {
		if s == "" {
			return "-"
		}
		return short(&s)
	}
	field(w, indent, "fingerprint", fmt.Sprintf("recorded %s, actual %s", fp(d.RecordedFingerprint), fp(d.ActualFingerprint)))
	if diff := d.Diff; diff != nil {
		for _, l := range []struct {
			label string
			paths []string
		}{{"added", diff.Added}, {"removed", diff.Removed}, {"changed", diff.Changed}, {"ignored", diff.Ignored}} {
			if len(l.paths) > 0 {
				field(w, indent, l.label, cell(strings.Join(l.paths, ", ")))
			}
		}
		if len(diff.Paths()) == 0 {
			field(w, indent, "fields", "no field differs that counts")
		}
		if len(diff.Values) > 0 {
			var lines []string
			for _, p := range diff.Paths() {
				if v, ok := diff.Values[p]; ok {
					lines = append(lines, fmt.Sprintf("%s: %s → %s", cell(p), rawText(v.Recorded), rawText(v.Actual)))
				}
			}
			field(w, indent, "values", lines...)
		}
	}
	if m := d.Model; m != nil && len(m.Parts) > 0 {
		field(w, indent, "model parts", strings.Join(m.Parts, ", "))
		if m.Model != nil {
			field(w, indent, "model", fmt.Sprintf("%s → %s", cell(m.Model.Recorded), cell(m.Model.Actual)))
		}
		if len(m.SystemDiff) > 0 {
			field(w, indent, "system prompt", m.SystemDiff...)
		}
		if m.Tools != nil {
			field(w, indent, "tools", fmt.Sprintf("added %s; removed %s", listText(m.Tools.Added), listText(m.Tools.Removed)))
		}
		if len(m.Messages) > 0 {
			field(w, indent, "messages", cell(strings.Join(m.Messages, ", ")))
		}
	}
	if d.NoInput != "" {
		field(w, indent, "no input", cell(d.NoInput))
	}
	if rc := d.RulesChanged; rc != nil {
		rec, _ := json.Marshal(rc.Recorded)
		cur, _ := json.Marshal(rc.Current)
		field(w, indent, "volatile rules", "recorded "+string(rec), "current "+string(cur))
	}
}

// listText is a list of names joined by ", ", or "-" when empty.
func listText(l []string) string {
	if len(l) == 0 {
		return "-"
	}
	return cell(strings.Join(l, ", "))
}

// roleText words a role: "cause", "independent", "consequent, caused by
// step:quote:0".
func roleText(role, causedBy string) string {
	if causedBy != "" {
		return role + ", caused by " + cell(causedBy)
	}
	return role
}

// changeText is the CHANGE cell of a changed call: its role and what
// changed, "cause: input fields changed $.qty".
func changeText(d *replay.Divergence) string {
	if d == nil {
		return ""
	}
	s := roleText(cell(d.Role), d.CausedBy)
	if what := d.What(); what != "" {
		s += ": " + cell(what)
	}
	return s
}

// usdText is an amount as the JSON lines print it, with a dollar sign.
func usdText(u replay.USD) string {
	raw, _ := u.MarshalJSON()
	return "$" + string(raw)
}

// writeOutcome writes a case run's outcome for people, one "label: value"
// line each at indent: the run, status and code (with the reason), the
// message, where it stopped, the cause and every change with its role, the
// changed axes, the counts (prefix calls verified, call lines by
// provenance, live calls), the cost and whether it is observable, the
// model client, the code versions, the recorded calls never made and the
// supplied answers never used. An outcome without counts (a case run that
// never started) stops after the cause.
func writeOutcome(w io.Writer, o replay.Outcome, indent string) {
	run := cell(o.RunID)
	if o.Target != "" {
		run += " (" + cell(o.Target) + ")"
	}
	field(w, indent, "run", run)
	status := string(o.Status)
	if o.Code != "" {
		status += " " + o.Code
	}
	if o.Reason != "" {
		status += " (" + o.Reason + ")"
	}
	field(w, indent, "status", status)
	if o.Message != "" {
		field(w, indent, "message", redact.Secrets(oneLine(o.Message)))
	}
	if stop := rawString(o.StopKey); stop != "" {
		if token := rawString(o.StopToken); token != "" {
			stop += " (allow it with --allow-write " + token + ")"
		}
		field(w, indent, "stopped at", cell(stop))
	}
	if o.Cause != "" {
		field(w, indent, "cause", cell(o.Cause))
	}
	if len(o.Changes) > 0 {
		lines := make([]string, len(o.Changes))
		width := 0
		for _, c := range o.Changes {
			width = max(width, utf8.RuneCountInString(cell(c.Call)))
		}
		for i, c := range o.Changes {
			lines[i] = fmt.Sprintf("%-*s  %s", width, cell(c.Call), roleText(c.Role, c.CausedBy))
		}
		field(w, indent, "changes", lines...)
	}
	if o.Provenance == nil {
		// A case run that never started (a worker's case:outcome of a
		// source it could not read) has no counts, cost or code versions.
		return
	}
	field(w, indent, "changed", listText(o.ChangedAxes))
	p := o.Provenance
	field(w, indent, "calls", fmt.Sprintf("%d prefix call(s) verified; %d reused, %d simulated, %d live, %d changed; %d live call(s)",
		o.PrefixCalls, p[replay.ProvReused], p[replay.ProvSimulated], p[replay.ProvLive], p[replay.ProvChanged], o.LiveCalls))
	cost := usdText(o.CostUSD)
	if o.CostObservable {
		cost += " (observable)"
	} else {
		cost += " (not observable: a live model call reported no usage or has no price)"
	}
	field(w, indent, "cost", cost)
	if o.LLMRef != nil {
		field(w, indent, "llm ref", cell(*o.LLMRef))
	}
	field(w, indent, "code version", fmt.Sprintf("%s recorded, %s current", cell(o.CodeVersion.Recorded), cell(o.CodeVersion.Current)))
	if o.FixtureHash != "" {
		field(w, indent, "fixture", o.FixtureHash)
	}
	if o.UnconsumedKeys != nil && len(*o.UnconsumedKeys) > 0 {
		field(w, indent, "never made", listText(*o.UnconsumedKeys))
	}
	if len(o.UnusedSupply) > 0 {
		field(w, indent, "unused supply", listText(o.UnusedSupply))
	}
}

// rawString is a JSON string's value; "" for null, absent or not a string.
func rawString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// writeCaseRunTable writes case run's lines as a table for people: one row
// per call line (SEQ, CALL, EFFECT, PROVENANCE, CHANGE: the role and what
// changed), then the outcome (writeOutcome) and the detail of the
// divergence, or, when the run did not diverge, of the cause's change.
func writeCaseRunTable(w io.Writer, calls []replay.CallLine, o replay.Outcome) error {
	t := newTable()
	t.row("SEQ", "CALL", "EFFECT", "PROVENANCE", "CHANGE")
	var cause *replay.Divergence
	for _, c := range calls {
		t.row(strconv.Itoa(c.Seq), cell(c.Kind+":"+c.Key), cell(c.Effect), cell(c.Provenance), changeText(c.Change))
		if c.Change != nil && c.Change.Role == replay.RoleCause && cause == nil {
			cause = c.Change
		}
	}
	if len(calls) == 0 {
		t.row("-", "(no call line)")
	}
	if err := t.writeTo(w); err != nil {
		return err
	}
	fmt.Fprintln(w)
	writeOutcome(w, o, "")
	switch {
	case o.Divergence != nil:
		fmt.Fprintln(w)
		fmt.Fprintln(w, "divergence:")
		writeDivergence(w, o.Divergence, "  ")
	case cause != nil:
		fmt.Fprintln(w)
		fmt.Fprintf(w, "cause %s:\n", cell(cause.Call))
		writeDivergence(w, cause, "  ")
	}
	return nil
}

// writeRefusalTable writes a case run refused before start
// (prefix_diverged) for people: the code, the message, the call it stopped
// at and the divergence's detail.
func writeRefusalTable(w io.Writer, code, message string, stopKey json.RawMessage, d *replay.Divergence) {
	field(w, "", "refused", code)
	field(w, "", "message", message)
	if stop := rawString(stopKey); stop != "" {
		field(w, "", "stopped at", cell(stop))
	}
	if d != nil {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "divergence:")
		writeDivergence(w, d, "  ")
	}
}

// count is n with the noun in the singular or the plural: "1 case", "3
// cases".
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// toolCalls counts the call lines of tool calls.
func toolCalls(calls []replay.CallLine) int {
	n := 0
	for _, c := range calls {
		if c.Kind == string(host.KindTool) {
			n++
		}
	}
	return n
}
