// Package htmlreport writes the HTML report of a case command: one
// self-contained page that CI keeps as an artifact and people open from disk.
//
// The page holds everything it needs: its style and script are inlined from
// the files report.css and report.js of this package (go:embed), it loads
// nothing (its Content-Security-Policy allows no network, no other script and
// no other style), and the report itself is JSON in
// <script type="application/json" id="report-data">, escaped by
// encoding/json (<, >, &, U+2028 and U+2029 as \u escapes) so that no string
// of a bundle can close the element. The script renders that data with DOM
// calls, every string of it with textContent, never as markup. The lines the
// page renders are the command's JSON lines as printed, so the page is a
// rendering of the one record the command wrote, never a second computation.
//
// Built for size: the cases of a case test are grouped by divergence
// signature (status, code, reason, divergence call, sorted field paths), the
// passes in one group; a group's rows, a case's detail and a timeline are
// built when they are opened, rows and calls in pages with a "show more"
// button (CasePage and CallPage).
//
// Ids, classes and attributes a test can rely on:
//
//	html[data-rendered=true]          the script has drawn the page
//	#title, #command, #version        the header
//	#values-banner                    only when Report.Values: the data holds values unredacted
//	#summary .stat[data-stat=NAME]    the summary bar, one .stat (with .stat-value) per figure;
//	                                  case test: cases passed failed errors duration;
//	                                  case run: status code reason cause changed-axes live-calls cost;
//	                                  case diff: result same added removed changed manifest-changed;
//	                                  case compare: same-status same-result same-calls arms
//	#filter, #filter-count            the text filter of a case test (name, target, call, code, reason, paths)
//	#cases                            the case list of case test and case run
//	.group[data-status][data-count]   a group of a case test's cases (<details>): .group-count in its
//	                                  <summary>; .group-passed is the passes' group
//	.case-row[data-status][data-index] a case (<details>): status pass|fail|error (case test) or the
//	                                  outcome's status (case run); in its <summary>: .status, .target,
//	                                  .name, .code, .reason, .row-divergence (.div-call, .field-path)
//	.case-detail                      a case's detail, built when its row opens: .message,
//	                                  .fact[data-fact=NAME] (run-status, stop-key, cause, ...), .changes
//	.divergence[data-role]            a divergence record: .div-call, .role[data-role], .caused-by,
//	                                  .no-input, .field[data-change=added|removed|changed|ignored] with
//	                                  .field-path, .value-recorded and .value-actual (only when the data
//	                                  holds values; .absent for a side without one), .model-record
//	.model-record                     .model-parts, .model-name, .system-diff, .tools, .model-messages
//	.line-diff .line                  a line diff (system prompt, answer): .line-add, .line-del,
//	                                  .line-ctx, .line-hunk
//	.timeline[data-calls]             a call timeline: .legend, input.only-changed, button.goto-divergence,
//	                                  .call[data-provenance][data-seq] rows, .call.first-divergence,
//	                                  .call[data-role] (a changed call's role), button.call-toggle opens
//	                                  a call's record in .call-extra, button.show-more the next page
//	.arm[data-arm]                    a case compare arm column: .fact[data-fact=model|prompt-file|
//	                                  status|code|cost|live-calls|tool-calls|same-as-first], .answer (the
//	                                  first arm's), .answer-diff, .changes-vs-first (.result-diff),
//	                                  .changes-vs-recording, .arm-timeline (<details>)
//	#manifest .manifest-field[data-field][data-changed=true|false]   case diff's manifest: .side-a,
//	                                  .side-b, or a field diff
//	#diff-calls .diff-call[data-change][data-call]   a call change (case diff; compare arms too)
//	#suite .fact[data-fact=NAME]      a suite's facts (suite, target, source, message, budget, fail-fast);
//	                                  its summary bar: status code children passed failed errors skipped
//	                                  cost live-calls duration
//	#groups .suite-group[data-verdict][data-count]   a failure group of a suite (<details>): in its
//	                                  <summary> .group-count, .status, .code, .reason, .div-call,
//	                                  .field-path (changed; added with +, removed with -), .group-arms;
//	                                  in its body .message and one .example[data-run] per example child,
//	                                  which holds the child's .case-row when the report has its outcome
//	#suite-arms tr.suite-arm[data-arm] td[data-col=NAME]   a suite's arm totals: name passed failed
//	                                  errors skipped cost live-calls provenance assertions
//	#arm-diffs .arm-diff[data-arm][data-against]   an arm against the first: .differ, .hash cases, .cost-delta
//
// A suite's page (command "enqueue run_suite") draws the suite:outcome:
// its failure groups, each with its example children as case rows (their
// case:outcome lines and timelines, read from the children's events), its
// arms and the arms against the first.
//
// It imports nothing of the project: its input is the lines the commands
// print.
package htmlreport

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"io"
)

// CasePage and CallPage are how many case rows and timeline calls the page
// renders at once; "show more" renders the next as many.
const (
	CasePage = 200
	CallPage = 500
)

// Report is one report page.
type Report struct {
	Command string          // "case test", "case run", "case diff", "case compare" or "enqueue run_suite"
	Title   string          // the page title, e.g. "pyrula case test tests/cases"
	Version string          // the pyrula version that wrote it
	Values  bool            // the data holds call values (--values); the page says so in a banner ("holds inputs and outputs unredacted")
	Summary json.RawMessage // the command's last JSON line as printed: case test's {"type":"summary",...}, case run's {"type":"outcome",...}, case diff's {"type":"summary",...}, case compare's {"type":"comparison",...}, a suite's suite:outcome event
	Plan    json.RawMessage // a suite's suite:plan event (nil for the case commands)
	Cases   []Case          // case test: one per case, in order; case run: exactly one; a suite: its example children that did not pass, any order
	Arms    []Arm           // case compare: one per arm
	Diff    *Diff           // case diff only
}

// Case is one case of a case test or case run.
type Case struct {
	Line     json.RawMessage // its JSON line as printed (case test's {"type":"case",...} line; case run's outcome line; a suite child's case:outcome event)
	Timeline []Call          // every call the case run made, in run order (may be 10,000+)
}

// Call is one call on a timeline.
type Call struct {
	Seq        int             `json:"seq"`
	Call       string          `json:"call"`             // "kind:key", e.g. "step:charge:0", "model:0", "tool:lookup_order:0"
	Effect     string          `json:"effect"`           // read, write, pure, or ""
	Provenance string          `json:"provenance"`       // verified (a recorded prefix call checked), reused, simulated, live, changed, stopped (the call that stopped the run)
	Change     json.RawMessage `json:"change,omitempty"` // the divergence record of a call that changed or diverged (shape below)
}

// Arm is one arm of a case compare.
type Arm struct {
	Line       json.RawMessage // its {"type":"arm",...} line as printed
	Answer     string          // the arm's result as indented JSON text ("" when it has none)
	AnswerDiff []string        // line diff of Answer against the first arm's ("" prefix " ", "-", "+" per line; "@@" lines separate hunks); nil for the first arm
	ToolCalls  int             // tool calls the arm made
	Timeline   []Call
}

// Diff is a case diff.
type Diff struct {
	Manifest json.RawMessage   // the {"type":"manifest",...} line
	Calls    []json.RawMessage // the {"type":"call",...} lines
}

// The commands a Report can be of.
var commands = map[string]bool{"case test": true, "case run": true, "case diff": true, "case compare": true, CommandSuite: true}

// CommandSuite is the Command of a suite's report.
const CommandSuite = "enqueue run_suite"

var (
	//go:embed report.css
	css string
	//go:embed report.js
	js string
)

// The page's Content-Security-Policy: nothing but its own inline style and
// script (by their hashes) and data: images, so that even markup smuggled
// into the page could neither run nor load anything.
var csp = "default-src 'none'; img-src data:; style-src '" + hash(css) + "'; script-src '" + hash(js) + "'; base-uri 'none'; form-action 'none'"

func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}

// The report data as the script reads it.
type (
	pageData struct {
		Command  string          `json:"command"`
		Title    string          `json:"title"`
		Version  string          `json:"version"`
		Values   bool            `json:"values"`
		Summary  json.RawMessage `json:"summary"`
		Plan     json.RawMessage `json:"plan,omitempty"`
		Cases    []pageCase      `json:"cases"`
		Arms     []pageArm       `json:"arms"`
		Diff     *pageDiff       `json:"diff"`
		CasePage int             `json:"case_page"`
		CallPage int             `json:"call_page"`
	}
	pageCase struct {
		Line     json.RawMessage `json:"line"`
		Timeline []Call          `json:"timeline"`
	}
	pageArm struct {
		Line       json.RawMessage `json:"line"`
		Answer     string          `json:"answer"`
		AnswerDiff []string        `json:"answer_diff"`
		ToolCalls  int             `json:"tool_calls"`
		Timeline   []Call          `json:"timeline"`
	}
	pageDiff struct {
		Manifest json.RawMessage   `json:"manifest"`
		Calls    []json.RawMessage `json:"calls"`
	}
)

// Write writes the report page of r to w. The same r gives the same bytes.
// It returns an error when r.Command is not one of the five commands, when a
// raw line is not valid JSON, or when w fails.
func Write(w io.Writer, r Report) error {
	if !commands[r.Command] {
		return fmt.Errorf("htmlreport: unknown command %q (want case test, case run, case diff, case compare or enqueue run_suite)", r.Command)
	}
	d := pageData{
		Command: r.Command, Title: r.Title, Version: r.Version, Values: r.Values, Summary: r.Summary, Plan: r.Plan,
		Cases: make([]pageCase, len(r.Cases)), Arms: make([]pageArm, len(r.Arms)),
		CasePage: CasePage, CallPage: CallPage,
	}
	// The page types are the input types with JSON names: conversions,
	// which stop compiling when the two drift apart.
	for i, c := range r.Cases {
		d.Cases[i] = pageCase(c)
	}
	for i, a := range r.Arms {
		d.Arms[i] = pageArm(a)
	}
	if r.Diff != nil {
		diff := pageDiff(*r.Diff)
		d.Diff = &diff
	}
	// json.Marshal escapes <, >, & and U+2028/2029 in every string, the raw
	// lines' included (it compacts a json.RawMessage with the same
	// escaping), so no value can end the script element it goes in.
	data, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("htmlreport: encode the report data: %w", err)
	}
	title := r.Title
	if title == "" {
		title = "pyrula " + r.Command
	}

	var b bytes.Buffer
	b.Grow(len(data) + len(css) + len(js) + 1024)
	b.WriteString("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n")
	b.WriteString("<meta http-equiv=\"Content-Security-Policy\" content=\"" + csp + "\">\n")
	b.WriteString("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n")
	b.WriteString("<meta name=\"generator\" content=\"pyrula " + html.EscapeString(r.Version) + "\">\n")
	b.WriteString("<title>" + html.EscapeString(title) + "</title>\n")
	b.WriteString("<style>" + css + "</style>\n</head>\n<body>\n")
	b.WriteString("<noscript><p>This report is drawn by its script: allow JavaScript to see it. Its data is the JSON in the report-data element of this file.</p></noscript>\n")
	b.WriteString("<div id=\"app\"></div>\n")
	b.WriteString("<script type=\"application/json\" id=\"report-data\">")
	b.Write(data)
	b.WriteString("</script>\n<script>" + js + "</script>\n</body>\n</html>\n")
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("htmlreport: write: %w", err)
	}
	return nil
}
