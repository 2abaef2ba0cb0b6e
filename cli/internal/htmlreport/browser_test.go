package htmlreport_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pyrula/caseworker/cli/internal/htmlreport"
	"github.com/pyrula/caseworker/internal/testbrowser"
	"github.com/pyrula/caseworker/internal/testwait"
)

// These tests open the pages in a real headless Chromium (internal/testbrowser):
// a page that logs an error, throws, opens a dialog or reaches for the
// network fails its test.

// page is the report r written to a file and opened in the browser.
type page struct {
	*testbrowser.Page
	t testing.TB
}

func open(t testing.TB, r htmlreport.Report) page {
	t.Helper()
	path := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(path, write(t, r), 0o644); err != nil {
		t.Fatal(err)
	}
	p := page{testbrowser.Open(t, testbrowser.FileURL(t, path)), t}
	var rendered string
	p.Eval(t, "document.documentElement.dataset.rendered || ''", &rendered)
	if rendered != "true" {
		t.Fatal("the page did not finish rendering")
	}
	return p
}

// js is s as a JavaScript string literal.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// count is the number of elements that match sel.
func (p page) count(sel string) int {
	p.t.Helper()
	return p.Count(p.t, sel)
}

// text is the rendered text of the first element that matches sel; no such
// element fails the test.
func (p page) text(sel string) string {
	p.t.Helper()
	var s *string
	p.Eval(p.t, "(e => e ? e.innerText : null)(document.querySelector("+js(sel)+"))", &s)
	if s == nil {
		p.t.Fatalf("no element matches %s", sel)
		return ""
	}
	return *s
}

// texts are the texts (textContent) of every element that matches sel.
func (p page) texts(sel string) []string {
	p.t.Helper()
	return p.Texts(p.t, sel)
}

// attrs are the values of attribute name of every element that matches sel.
func (p page) attrs(sel, name string) []string {
	p.t.Helper()
	var out []string
	p.Eval(p.t, "Array.from(document.querySelectorAll("+js(sel)+"), e => e.getAttribute("+js(name)+") || '')", &out)
	return out
}

func (p page) wantCount(sel string, want int) {
	p.t.Helper()
	if got := p.count(sel); got != want {
		p.t.Errorf("%d elements match %s, want %d", got, sel, want)
	}
}

// (a) A case test with one failing case among passes.
func TestCaseTestPage(t *testing.T) {
	for _, values := range []bool{false, true} {
		name := "without values"
		if values {
			name = "with values"
		}
		t.Run(name, func(t *testing.T) {
			p := open(t, caseTestReport(t, values))
			if got := p.text("#title"); got != "pyrula case test tests/cases" {
				t.Errorf("title = %q", got)
			}
			if got := p.text("#version"); !strings.Contains(got, "0.9.0") {
				t.Errorf("version = %q", got)
			}
			for stat, want := range map[string]string{"cases": "3", "passed": "2", "failed": "1", "errors": "0"} {
				if got := p.text(`#summary .stat[data-stat="` + stat + `"] .stat-value`); got != want {
					t.Errorf("summary %s = %q, want %q", stat, got, want)
				}
			}
			p.wantCount("#values-banner", map[bool]int{false: 0, true: 1}[values])
			if values && !strings.Contains(p.text("#values-banner"), "holds inputs and outputs unredacted") {
				t.Errorf("banner = %q", p.text("#values-banner"))
			}

			// The failing group is open, the passes are one closed group.
			p.wantCount(".group", 2)
			if got := p.attrs(".group-passed", "data-count"); !slices.Equal(got, []string{"2"}) {
				t.Errorf("passed group count = %v", got)
			}
			p.wantCount(".group-passed[open]", 0)
			p.wantCount(".case-row", 1)
			row := p.text(".case-row[data-status=fail] > summary")
			if m := missing(row, "fail", "checkout", "tests/cases/b.case", "replay_diverged", "input_changed", "step:charge:0", "$.currency", "$.amount"); m != nil {
				t.Errorf("the failing row %q lacks %q", row, m)
			}
			p.wantCount(".case-row[data-status=fail] > summary .field-path", 2)
			p.wantCount(".case-detail", 0)

			// Expanded: the detail, its divergence, the timeline.
			p.Click(t, ".case-row[data-status=fail] > summary")
			p.wantCount(".case-detail", 1)
			if got := p.text(".case-detail .message"); got != "the run diverged from the recording" {
				t.Errorf("message = %q", got)
			}
			div := ".case-detail > .divergence"
			if got := p.texts(div + " .div-call"); !slices.Equal(got, []string{"step:charge:0"}) {
				t.Errorf("divergence call = %v", got)
			}
			if got := p.attrs(div, "data-role"); !slices.Equal(got, []string{"cause"}) {
				t.Errorf("divergence role = %v", got)
			}
			for kind, want := range map[string][]string{"added": {"$.currency"}, "changed": {"$.amount"}, "ignored": {"$.ts"}, "removed": nil} {
				if got := p.texts(div + ` .field[data-change="` + kind + `"] .field-path`); !slices.Equal(got, want) {
					t.Errorf("%s paths = %v, want %v", kind, got, want)
				}
			}
			if values {
				if got := p.texts(div + " .value-recorded"); !slices.Equal(got, []string{"100"}) {
					t.Errorf("recorded values = %v", got)
				}
				if got := p.texts(div + " .value-actual"); !slices.Equal(got, []string{`"EUR"`, "120"}) {
					t.Errorf("actual values = %v", got)
				}
			} else {
				p.wantCount(".value-recorded, .value-actual, .absent", 0)
			}

			tl := ".case-detail .timeline"
			p.wantCount(tl+" .call", 6)
			if got := p.attrs(tl+" .call", "data-provenance"); !slices.Equal(got, []string{"verified", "reused", "changed", "changed", "changed", "stopped"}) {
				t.Errorf("provenances = %v", got)
			}
			p.wantCount(tl+" .legend .prov", 6)
			if got := p.attrs(tl+" .call.first-divergence", "data-seq"); !slices.Equal(got, []string{"3"}) {
				t.Errorf("first divergence rows = %v, want seq 3", got)
			}
			if got := p.attrs(tl+" .call[data-role]", "data-role"); !slices.Equal(got, []string{"cause", "consequent", "independent"}) {
				t.Errorf("roles = %v", got)
			}
			if got := p.text(tl + ` .call[data-seq="4"]`); !strings.Contains(got, "step:charge:0") || !strings.Contains(got, "$.total") {
				t.Errorf("the consequent's row = %q, want its cause and path", got)
			}

			// One click reaches the first divergence: its record opens.
			p.Click(t, tl+" .goto-divergence")
			p.wantCount(tl+" .call.first-divergence.focused .call-extra .divergence", 1)

			// The model call's record: parts, models, system prompt diff, tools, messages.
			p.Click(t, tl+` .call[data-seq="5"] .call-toggle`)
			m := tl + ` .call[data-seq="5"] .model-record`
			if got := p.text(m + " .model-name"); got != `model: m1 → m2` {
				t.Errorf("model = %q", got)
			}
			if got := p.texts(m + " .model-parts .field-path"); !slices.Equal(got, []string{"system", "model", "tools"}) {
				t.Errorf("parts = %v", got)
			}
			if got := p.texts(m + " .system-diff .line-add"); !slices.Equal(got, []string{"+Be thorough."}) {
				t.Errorf("system prompt added lines = %v", got)
			}
			if got := p.texts(m + " .system-diff .line-del"); !slices.Equal(got, []string{"-Be terse."}) {
				t.Errorf("system prompt removed lines = %v", got)
			}
			p.wantCount(m+" .system-diff .line-hunk", 1)
			if got := p.text(m + " .tools"); got != "tools: +refund −escalate" {
				t.Errorf("tools = %q", got)
			}
			if got := p.texts(m + " .model-messages .field-path"); !slices.Equal(got, []string{"$.messages[0].content"}) {
				t.Errorf("messages = %v", got)
			}
			if got := p.text(tl + ` .call[data-seq="5"] .no-input`); got != "the model request is compared part by part" {
				t.Errorf("no_input = %q", got)
			}

			// A passing case opens too.
			p.Click(t, ".group-passed > summary")
			p.wantCount(".case-row[data-status=pass]", 2)
		})
	}
}

// (b) 1,000 cases: three failing groups with their counts, the passes in
// one closed group; rows are built only for what is open.
func TestThousandCases(t *testing.T) {
	start := time.Now()
	p := open(t, bigCaseTestReport(t))
	t.Logf("opened 1,000 cases in %v", time.Since(start))

	if got := p.attrs(".group:not(.group-passed)", "data-count"); !slices.Equal(got, []string{"15", "10", "5"}) {
		t.Errorf("failing groups = %v, want 15, 10 and 5 cases", got)
	}
	if got := p.attrs(".group:not(.group-passed)", "data-status"); !slices.Equal(got, []string{"fail", "fail", "error"}) {
		t.Errorf("failing groups' status = %v", got)
	}
	if got := p.texts(".group:not(.group-passed) > summary .group-count"); !slices.Equal(got, []string{"15", "10", "5"}) {
		t.Errorf("group counts shown = %v", got)
	}
	g2 := p.text(".group:nth-child(2) > summary")
	if m := missing(g2, "step:quote:0", "$.qty", "$.sku", "replay_diverged"); m != nil {
		t.Errorf("the second group %q lacks %q", g2, m)
	}
	if got := p.text(".group-passed > summary"); got != "970 passed" {
		t.Errorf("passed group = %q", got)
	}
	p.wantCount(".group-passed[open]", 0)
	if n := p.count(".case-row"); n != 30 {
		t.Errorf("%d case rows before the passes open, want the 30 failures", n)
	}
	p.wantCount(".case-detail, .timeline", 0)

	// The passes open a page at a time.
	p.Click(t, ".group-passed > summary")
	p.wantCount(".case-row[data-status=pass]", htmlreport.CasePage)
	p.Click(t, ".group-passed .show-more")
	p.wantCount(".case-row[data-status=pass]", 2*htmlreport.CasePage)
	p.Click(t, ".group-passed > summary") // closes it again

	// The filter.
	p.Eval(t, `(f => { f.value = "case-0457"; f.dispatchEvent(new Event("input")); })(document.getElementById("filter"))`, nil)
	testwait.Eventually(t, 5*time.Second, "the filter", func() bool { return p.text("#filter-count") != "" })
	if got := p.text("#filter-count"); got != "1 of 1000 cases match" {
		t.Errorf("filter count = %q", got)
	}
	if got := p.texts(".group:not([hidden]) > summary .group-count"); !slices.Equal(got, []string{"1 of 15"}) {
		t.Errorf("groups left = %v", got)
	}
	if got := p.texts(".group:not([hidden]) .case-row .name"); !slices.Equal(got, []string{"tests/big/case-0457.case"}) {
		t.Errorf("rows left = %v", got)
	}
}

// (c) A case run with a 10,000-call timeline: pages of rows, "show more",
// the "only changed" toggle, the first divergence one click away.
func TestLongTimeline(t *testing.T) {
	const n, first = 10000, 7400
	r, notable := longRunReport(t, n, first)
	p := open(t, r)

	for stat, want := range map[string]string{"status": "complete", "cause": "step:charge:7400", "live-calls": "100", "cost": "$0.0012", "changed-axes": "inputs"} {
		if got := p.text(`#summary .stat[data-stat="` + stat + `"] .stat-value`); got != want {
			t.Errorf("summary %s = %q, want %q", stat, got, want)
		}
	}
	// The run's one case is open, its timeline shows one page.
	p.wantCount(".case-row[open]", 1)
	if got := p.attrs(".timeline", "data-calls"); !slices.Equal(got, []string{"10000"}) {
		t.Errorf("timeline calls = %v", got)
	}
	tl := ".timeline"
	p.wantCount(tl+" .call", htmlreport.CallPage)
	p.Click(t, tl+" .show-more")
	p.wantCount(tl+" .call", 2*htmlreport.CallPage)
	p.wantCount(tl+" .call.first-divergence", 0)

	// One click: the rows through the divergence, the row marked, in view.
	p.Click(t, tl+" .goto-divergence")
	if got := p.attrs(tl+" .call.first-divergence", "data-seq"); !slices.Equal(got, []string{"7400"}) {
		t.Errorf("first divergence = %v", got)
	}
	p.wantCount(tl+" .call", 7500)
	p.wantCount(tl+" .call.first-divergence .call-extra .divergence", 1)
	var inView bool
	p.Eval(t, `(r => r.top >= 0 && r.bottom <= window.innerHeight)(document.querySelector(".call.first-divergence").getBoundingClientRect())`, &inView)
	if !inView {
		t.Error("the first divergence is not scrolled into view")
	}

	// Only the changed and stopped calls.
	p.Click(t, tl+" .only-changed")
	p.wantCount(tl+" .call", notable)
	for _, prov := range p.attrs(tl+" .call", "data-provenance") {
		if prov != "changed" && prov != "stopped" {
			t.Errorf("a %s call shows among the changed ones", prov)
		}
	}
	p.wantCount(tl+` .call[data-provenance="stopped"][data-seq="10000"]`, 1)
	p.Click(t, tl+" .goto-divergence")
	p.wantCount(tl+" .call.first-divergence.focused", 1)
	p.Click(t, tl+" .only-changed")
	p.wantCount(tl+" .call", htmlreport.CallPage)

	// The outcome's changes and result are in the detail.
	if got := p.texts(".case-detail .changes .div-call"); !slices.Equal(got, []string{"step:charge:7400", "step:format_receipt:0"}) {
		t.Errorf("changes = %v", got)
	}
}

// (d) A compare of two arms: side by side, with costs and the answer diff.
func TestComparePage(t *testing.T) {
	p := open(t, compareReport(t))
	for stat, want := range map[string]string{"same-status": "yes", "same-result": "no", "same-calls": "no", "arms": "2"} {
		if got := p.text(`#summary .stat[data-stat="` + stat + `"] .stat-value`); got != want {
			t.Errorf("summary %s = %q, want %q", stat, got, want)
		}
	}
	if got := p.attrs(".arm", "data-arm"); !slices.Equal(got, []string{"1", "2"}) {
		t.Fatalf("arms = %v", got)
	}
	var sideBySide bool
	p.Eval(t, `(([a, b]) => a.getBoundingClientRect().top === b.getBoundingClientRect().top && a.getBoundingClientRect().right <= b.getBoundingClientRect().left)(document.querySelectorAll(".arm"))`, &sideBySide)
	if !sideBySide {
		t.Error("the arms are not side by side")
	}
	for fact, want := range map[string][2]string{
		"model":         {"m1", "m2"},
		"prompt-file":   {"(recorded)", "prompts/thorough.txt"},
		"status":        {"complete", "complete"},
		"cost":          {"$0.01", "$0.02"},
		"live-calls":    {"3", "4"},
		"tool-calls":    {"1", "2"},
		"same-as-first": {"(first arm)", "no"},
	} {
		for i, arm := range []string{"1", "2"} {
			if got := p.text(`.arm[data-arm="` + arm + `"] .fact[data-fact="` + fact + `"]`); got != want[i] {
				t.Errorf("arm %s %s = %q, want %q", arm, fact, got, want[i])
			}
		}
	}
	if got := p.text(`.arm[data-arm="1"] .answer`); !strings.Contains(got, `"amount": 100`) {
		t.Errorf("first answer = %q", got)
	}
	a2 := `.arm[data-arm="2"] .answer-diff`
	if got := p.texts(a2 + " .line-del"); !slices.Equal(got, []string{`-  "amount": 100,`, `-  "refund": false`}) {
		t.Errorf("removed answer lines = %v", got)
	}
	if got := p.texts(a2 + " .line-add"); !slices.Equal(got, []string{`+  "amount": 120,`, `+  "refund": true`}) {
		t.Errorf("added answer lines = %v", got)
	}
	p.wantCount(a2+" .line-hunk", 1)
	p.wantCount(a2+" .line-ctx", 2)

	vsFirst := `.arm[data-arm="2"] .changes-vs-first`
	if got := p.attrs(vsFirst+" .diff-call", "data-call"); !slices.Equal(got, []string{"tool:refund:0", "model:0"}) {
		t.Errorf("changes vs the first arm = %v", got)
	}
	if got := p.text(vsFirst + " h3"); !strings.Contains(got, "added 1") || !strings.Contains(got, "changed 2") {
		t.Errorf("counts vs the first arm = %q", got)
	}
	if got := p.texts(vsFirst + ` > .result-diff .field[data-change="changed"] .field-path`); !slices.Equal(got, []string{"$.refund", "$.amount"}) {
		t.Errorf("result paths vs the first arm = %v", got)
	}
	if got := p.text(vsFirst + ` .diff-call[data-call="tool:refund:0"]`); !strings.Contains(got, "consequent") || !strings.Contains(got, "model:0") {
		t.Errorf("the added tool call = %q, want its role and cause", got)
	}
	if got := p.attrs(`.arm[data-arm="1"] .changes-vs-recording .diff-call`, "data-call"); !slices.Equal(got, []string{"model:0"}) {
		t.Errorf("arm 1 vs the recording = %v", got)
	}
	p.wantCount(`.arm[data-arm="2"] .changes-vs-recording .empty`, 1)

	// An arm's timeline opens on demand.
	p.wantCount(".arm .timeline", 0)
	p.Click(t, `.arm[data-arm="2"] .arm-timeline > summary`)
	p.wantCount(`.arm[data-arm="2"] .timeline .call`, 3)
}

// (e) A case diff: the manifest side by side, then each call that differs.
func TestDiffPage(t *testing.T) {
	p := open(t, diffReport(t))
	for stat, want := range map[string]string{"result": "different", "same": "2", "added": "1", "removed": "1", "changed": "1", "manifest-changed": "inputs, code_version"} {
		if got := p.text(`#summary .stat[data-stat="` + stat + `"] .stat-value`); got != want {
			t.Errorf("summary %s = %q, want %q", stat, got, want)
		}
	}
	if got := p.attrs(`#manifest .manifest-field[data-changed="true"]`, "data-field"); !slices.Equal(got, []string{"code_version", "inputs"}) {
		t.Errorf("changed manifest fields = %v", got)
	}
	if got := p.texts(`#manifest .manifest-field[data-field="code_version"] td`); !slices.Equal(got, []string{"v1", "v2"}) {
		t.Errorf("code_version sides = %v", got)
	}
	if got := p.texts(`#manifest .manifest-field[data-field="target_name"] td`); !slices.Equal(got, []string{"checkout", "checkout"}) {
		t.Errorf("target_name sides = %v", got)
	}
	if got := p.attrs(`#manifest .manifest-field[data-field="target_name"]`, "data-changed"); !slices.Equal(got, []string{"false"}) {
		t.Errorf("target_name changed = %v", got)
	}
	inputs := `#manifest .manifest-field[data-field="inputs"]`
	if got := p.texts(inputs + " .field-path"); !slices.Equal(got, []string{"$.qty"}) {
		t.Errorf("inputs paths = %v", got)
	}
	if got := p.texts(inputs + " .value-recorded, " + inputs + " .value-actual"); !slices.Equal(got, []string{"2", "5"}) {
		t.Errorf("inputs values = %v", got)
	}

	if got := p.attrs("#diff-calls .diff-call", "data-change"); !slices.Equal(got, []string{"changed", "removed", "added"}) {
		t.Errorf("call changes = %v", got)
	}
	q := `#diff-calls .diff-call[data-call="step:quote:0"]`
	row := p.text(q)
	if m := missing(row, "changed", "step:quote:0", "cause", "fingerprint, input, result", "input", "result"); m != nil {
		t.Errorf("the quote row %q lacks %q", row, m)
	}
	if got := p.texts(q + " .field-path"); !slices.Equal(got, []string{"$.qty", "$.total"}) {
		t.Errorf("quote paths = %v", got)
	}
	if got := p.texts(q + " .value-recorded"); !slices.Equal(got, []string{"2", "20"}) {
		t.Errorf("quote a values = %v", got)
	}
	if got := p.texts(q + " .value-actual"); !slices.Equal(got, []string{"5", "50"}) {
		t.Errorf("quote b values = %v", got)
	}
	removed := p.text(`#diff-calls .diff-call[data-change="removed"]`)
	if m := missing(removed, "step:format_receipt:0", "consequent", "caused by", "step:quote:0", `value: "receipt #1" → null`); m != nil {
		t.Errorf("the removed row %q lacks %q", removed, m)
	}
	if got := p.texts(`#diff-calls .diff-call[data-call="model:0"] .system-diff .line`); !slices.Equal(got, []string{"-Be terse.", "+Be thorough."}) {
		t.Errorf("model system diff = %v", got)
	}
}

// (f) Markup in the data shows as text and runs nothing: no dialog, no
// error (testbrowser fails the test on either), no element made from it.
func TestHostileStrings(t *testing.T) {
	p := open(t, hostileReport(t))
	p.Click(t, ".case-row > summary")
	p.Eval(t, `document.querySelectorAll(".call-toggle").forEach(b => b.click())`, nil)

	p.wantCount("img", 0)
	p.wantCount("script", 2)
	p.wantCount("b", 0)
	p.wantCount("[onerror]", 0)
	var pwned bool
	p.Eval(t, "window.pwned === 1", &pwned)
	if pwned {
		t.Error("the onerror handler ran")
	}
	if got := p.text("#title"); got != "pyrula case test "+scriptBreak+imgOnerror {
		t.Errorf("title = %q", got)
	}
	var title string
	p.Eval(t, "document.title", &title)
	if title != "pyrula case test "+scriptBreak+imgOnerror {
		t.Errorf("document.title = %q", title)
	}
	text := p.Text(t)
	if m := missing(text, scriptBreak, imgOnerror, "boom "+scriptBreak+" "+imgOnerror+" <!-- <b>bold</b>", "tests/"+scriptBreak+".case", "$.note"+imgOnerror, "step:"+scriptBreak+":0"); m != nil {
		t.Errorf("the page's text lacks %q", m)
	}
	// The value is shown as JSON text: quoted, its quotes escaped.
	want := `"` + strings.ReplaceAll(imgOnerror, `"`, `\"`) + "\u2028" + scriptBreak + `"`
	if got := p.texts(".case-detail > .divergence .value-actual"); len(got) != 1 || got[0] != want {
		t.Errorf("hostile value = %q", got)
	}
}

// (g) A suite: the summary bar, its facts, a failure group named by the
// call and fields with its example children (one with its outcome and
// timeline, one named only), the arms with their assertions, the arm
// against the first.
func TestSuitePage(t *testing.T) {
	p := open(t, suiteReport(t))
	for stat, want := range map[string]string{"status": "fail", "code": "suite_failed", "children": "6", "passed": "3", "failed": "2",
		"errors": "0", "skipped": "1", "cost": "$0.25", "live-calls": "4", "duration": "1234 ms"} {
		if got := p.text(`#summary .stat[data-stat="` + stat + `"] .stat-value`); got != want {
			t.Errorf("summary %s = %q, want %q", stat, got, want)
		}
	}
	if got := p.text(`#suite .fact[data-fact="budget"]`); got != "max_cost_usd $2; 4 live calls reserved, $0.25 spent" {
		t.Errorf("budget = %q", got)
	}
	if got := p.text(`#suite .fact[data-fact="source"]`); got != "journal (3 cases)" {
		t.Errorf("source = %q", got)
	}
	p.wantCount(`#suite .fact[data-fact="fail-fast"]`, 1)
	if got := p.text("#suite .message"); got != "2 of 6 children did not pass" {
		t.Errorf("message = %q", got)
	}

	// One group, open (the first groups are), with its examples.
	if got := p.attrs("#groups .suite-group", "data-count"); !slices.Equal(got, []string{"2"}) {
		t.Fatalf("groups = %v", got)
	}
	p.wantCount("#groups .suite-group[open]", 1)
	if got := p.texts("#groups .suite-group > summary .field-path"); !slices.Equal(got, []string{"$.amount", "+$.currency"}) {
		t.Errorf("group paths = %v", got)
	}
	g := p.text("#groups .suite-group > summary")
	if m := missing(g, "2", "fail", "replay_diverged", "input_changed", "step:charge:0", "arms: eur"); m != nil {
		t.Errorf("the group %q lacks %q", g, m)
	}
	if got := p.attrs("#groups .example", "data-run"); !slices.Equal(got, []string{"suite_1:eur:run_a", "suite_1:eur:run_b"}) {
		t.Errorf("examples = %v", got)
	}
	p.wantCount(`#groups .example[data-run="suite_1:eur:run_a"] .case-row`, 1)
	p.wantCount(`#groups .example[data-run="suite_1:eur:run_b"] .case-row`, 0)
	if got := p.text(`#groups .example[data-run="suite_1:eur:run_b"]`); !strings.Contains(got, "its events are gone from Valkey") {
		t.Errorf("the example without its outcome = %q", got)
	}
	p.Click(t, `#groups .example[data-run="suite_1:eur:run_a"] .case-row > summary`)
	if got := p.texts("#groups .case-detail > .divergence .div-call"); !slices.Equal(got, []string{"step:charge:0"}) {
		t.Errorf("the child's divergence = %v", got)
	}
	if got := p.attrs("#groups .case-detail .timeline .call", "data-provenance"); !slices.Equal(got, []string{"verified", "reused", "changed"}) {
		t.Errorf("the child's timeline = %v", got)
	}

	// The arms and the arm against the first.
	if got := p.attrs("#suite-arms tr.suite-arm", "data-arm"); !slices.Equal(got, []string{"as-recorded", "eur"}) {
		t.Fatalf("arms = %v", got)
	}
	eur := `#suite-arms tr.suite-arm[data-arm="eur"] td`
	for col, want := range map[string]string{"failed": "2", "skipped": "1", "cost": "$0.25", "live-calls": "4",
		"provenance": "changed 2, live 4, reused 6", "assertions": `$.currency equals "EUR"; max_cost_usd 0.5`} {
		if got := p.text(eur + `[data-col="` + col + `"]`); got != want {
			t.Errorf("arm eur %s = %q, want %q", col, got, want)
		}
	}
	d := `#arm-diffs .arm-diff[data-arm="eur"][data-against="as-recorded"]`
	if got := p.text(d + " .differ"); got != "2 cases differ" {
		t.Errorf("differ = %q", got)
	}
	if got := p.text(d + " .cost-delta"); got != ", cost +$0.25" {
		t.Errorf("cost delta = %q", got)
	}
	p.wantCount(d+" .hash", 2)
}

// A suite whose children all passed says so and draws no group.
func TestSuitePagePassed(t *testing.T) {
	r := suiteReport(t)
	r.Summary = raw(t, `{"type":"suite_outcome","suite_id":"s","target":"checkout","status":"pass","cases":1,"total":1,"by_status":{"pass":1,"fail":0,"error":0,"skipped":0},`+
		`"groups":[],"arms":[{"name":"a","passed":1,"failed":0,"errors":0,"skipped":0,"cost_usd":0,"live_calls":0,"prefix_calls":0,"provenance":{"reused":3}}],"arm_diffs":[],"cost_usd":0,"live_calls":0,"duration_ms":5,"budget":null}`)
	r.Cases = nil
	p := open(t, r)
	p.wantCount("#groups .suite-group", 0)
	if got := p.text("#groups .empty"); got != "no failures: every child passed" {
		t.Errorf("groups = %q", got)
	}
	p.wantCount(`#summary .stat[data-stat="skipped"]`, 0)
	p.wantCount(`#suite .fact[data-fact="budget"]`, 0)
	if got := p.text(`#summary .stat[data-stat="status"]`); !strings.Contains(got, "pass") {
		t.Errorf("status = %q", got)
	}
}
