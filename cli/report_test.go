package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/internal/testbrowser"
)

// The --html reports, written by the binary and opened in a real headless
// Chromium (internal/testbrowser): a page that logs a script error or
// reaches for the network fails its test.

// reportPage is an --html report opened in the browser, rendered.
type reportPage struct {
	*testbrowser.Page
	t *testing.T
}

func openReport(t *testing.T, path string) reportPage {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no report: %v", err)
	}
	p := reportPage{testbrowser.Open(t, testbrowser.FileURL(t, path)), t}
	var rendered string
	p.Eval(t, "document.documentElement.dataset.rendered || ''", &rendered)
	if rendered != "true" {
		t.Fatal("the report did not finish rendering")
	}
	return p
}

// count is the number of elements that match sel.
func (p reportPage) count(sel string) int {
	p.t.Helper()
	return p.Count(p.t, sel)
}

// attrs are the values of attribute name of every element that matches sel.
func (p reportPage) attrs(sel, name string) []string {
	p.t.Helper()
	var out []string
	q, _ := json.Marshal(sel)
	n, _ := json.Marshal(name)
	p.Eval(p.t, "Array.from(document.querySelectorAll("+string(q)+"), e => e.getAttribute("+string(n)+") || '')", &out)
	return out
}

// texts are the texts of the elements that match sel.
func (p reportPage) texts(sel string) []string {
	p.t.Helper()
	return p.Texts(p.t, sel)
}

// case diff --html: the page shows the changed call with the input path
// added and its role, and the manifest's changed code version.
func TestReportCaseDiffHTML(t *testing.T) {
	t.Parallel()
	bin := divergeBinary(t)
	dir, before := devCase(t, bin, "charge")
	_, after := devCase(t, bin, "charge_v2")
	html := filepath.Join(dir, "diff.html")
	r := runIn(t, bin, dir, "case", "diff", before, after, "--html", html)
	if r.code != 4 {
		t.Fatalf("want exit 4 (different)\n%s", r)
	}
	p := openReport(t, html)
	calls := p.texts(`#diff-calls .diff-call[data-call="step:charge:0"]`)
	if len(calls) != 1 || !strings.Contains(calls[0], "$.currency") || !strings.Contains(calls[0], "cause") {
		t.Fatalf("the changed call: %q", calls)
	}
	if n := p.count(`#manifest .manifest-field[data-field="code_version"][data-changed="true"]`); n != 1 {
		t.Errorf("code_version marked changed %d times, want 1", n)
	}
	if strings.Contains(p.Text(t), "EUR") {
		t.Error("the page shows a value without --values")
	}

	// A directory that does not exist is refused before any work.
	r = runIn(t, bin, dir, "case", "diff", before, after, "--html", filepath.Join(dir, "no", "diff.html"))
	if r.code != 1 || !strings.Contains(r.stderr, "--html") {
		t.Fatalf("want exit 1 naming --html\n%s", r)
	}
}

// exportJSON returns the readable JSON of a case file, as a user's export.
func exportJSON(t *testing.T, bin, dir, file string) map[string]any {
	t.Helper()
	store := "--fixture-store=" + filepath.Join(dir, "store")
	imported := runIn(t, bin, dir, "case", "import", file, store)
	var in struct {
		FixtureHash string `json:"fixture_hash"`
	}
	if err := json.Unmarshal([]byte(imported.stdout), &in); err != nil || imported.code != 0 {
		t.Fatalf("import\n%s", imported)
	}
	out := filepath.Join(dir, "export.json")
	if r := runIn(t, bin, dir, "case", "export", in.FixtureHash, "--out", out, "--json", store); r.code != 0 {
		t.Fatalf("export\n%s", r)
	}
	var doc map[string]any
	if err := json.Unmarshal(readFile(t, out), &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// case test --html over 1,000 cases: the failures are grouped by their
// divergence with their counts, the passes in one group, and no case row
// is built before its group opens; a failing case opens to its divergence
// (the field path) and its timeline with the first divergence marked.
func TestReportCaseTestHTML(t *testing.T) {
	t.Parallel()
	bin := divergeBinary(t)
	dir, file := devCase(t, bin, "charge")
	doc := exportJSON(t, bin, dir, file)
	variant := func(input string, value any) []byte {
		var d map[string]any
		raw, _ := json.Marshal(doc)
		_ = json.Unmarshal(raw, &d)
		if input != "" {
			d["manifest"].(map[string]any)["inputs"].(map[string]any)[input] = value
		}
		out, _ := json.Marshal(d)
		return out
	}
	cases := filepath.Join(dir, "cases")
	if err := os.MkdirAll(cases, 0o755); err != nil {
		t.Fatal(err)
	}
	kinds := []struct {
		name string
		data []byte
		n    int
	}{{"pass", variant("", nil), 970}, {"sku", variant("sku", "SKU-9"), 10}, {"qty", variant("qty", 7), 10}, {"extra", variant("note", "gift"), 10}}
	for _, k := range kinds {
		for i := range k.n {
			if err := os.WriteFile(filepath.Join(cases, k.name+"-"+strconv.Itoa(i)+".json"), k.data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	html := filepath.Join(dir, "report.html")
	r := runIn(t, bin, dir, "case", "test", cases, "--html", html)
	if r.code != 3 {
		t.Fatalf("want exit 3 (failures)\n%s", r.stdout[max(0, len(r.stdout)-400):])
	}
	p := openReport(t, html)
	var groups []struct {
		Status string `json:"status"`
		Count  string `json:"count"`
		Text   string `json:"text"`
	}
	p.Eval(t, `Array.from(document.querySelectorAll(".group"), g => ({status: g.dataset.status, count: g.dataset.count, text: g.querySelector("summary").innerText}))`, &groups)
	counts := map[string]int{}
	for _, g := range groups {
		counts[g.Status+" "+g.Count]++
	}
	// The note input is one the target does not accept: those cases are
	// errors, a group of their own.
	if counts["fail 10"] != 2 || counts["error 10"] != 1 || counts["pass 970"] != 1 || len(groups) != 4 {
		t.Fatalf("groups %+v, want two failing groups of 10, ten errors and the 970 passes", groups)
	}
	if n := p.count(".case-row"); n > 200 {
		t.Errorf("%d case rows built before any group opened", n)
	}
	p.Eval(t, `(() => { const g = Array.from(document.querySelectorAll(".group[data-status=fail]")).find(g => g.innerText.includes("$.sku")); g.id = "sku-group"; g.open = true; g.dispatchEvent(new Event("toggle")); return true })()`, nil)
	p.Click(t, `#sku-group .case-row[data-status=fail] > summary`)
	if got := strings.Join(p.texts("#sku-group .case-row[open] .divergence .field-path"), " "); !strings.Contains(got, "$.sku") {
		t.Fatalf("the opened case's divergence shows %q, want $.sku", got)
	}
	if p.count("#sku-group .case-row[open] .timeline .call.first-divergence") != 1 {
		t.Error("the opened case's timeline does not mark its first divergence")
	}
	if strings.Contains(p.Text(t), "SKU-9") {
		t.Error("the page shows a value without --values")
	}
}

// case run --html of a 10,000-call case that diverges near its end: the
// timeline renders one page, shows more on request, and reaches the first
// divergence with one click.
func TestReportCaseRunHTML(t *testing.T) {
	t.Parallel()
	bin := divergeBinary(t)
	dir, file := devCase(t, bin, "loop", "--input", "n=10000")
	html := filepath.Join(dir, "run.html")
	r := runIn(t, bin, dir, "case", "run", file, "--replay-only", "--target", "loop_v2", "--html", html)
	if r.code != 3 {
		t.Fatalf("want exit 3 (replay_diverged)\n%s", r.stdout[max(0, len(r.stdout)-400):])
	}
	p := openReport(t, html)
	var open bool
	p.Eval(t, `document.querySelector(".case-row").open`, &open)
	if !open {
		p.Click(t, ".case-row > summary")
	}
	rows := p.count(".timeline .call")
	if rows == 0 || rows > 600 {
		t.Fatalf("%d timeline rows after opening, want one page", rows)
	}
	p.Click(t, ".timeline button.show-more")
	if more := p.count(".timeline .call"); more <= rows {
		t.Errorf("show more: %d rows, had %d", more, rows)
	}
	p.Click(t, ".timeline button.goto-divergence")
	var first struct {
		Seq  string `json:"seq"`
		Text string `json:"text"`
	}
	p.Eval(t, `(() => { const c = document.querySelector(".timeline .call.first-divergence"); return c ? {seq: c.dataset.seq, text: c.innerText} : null })()`, &first)
	if first.Seq != "9990" || !strings.Contains(first.Text, "step:read:9990") {
		t.Fatalf("first divergence %+v, want step:read:9990", first)
	}
	if !strings.Contains(p.Text(t), "$.mode") {
		t.Error("the page does not name the changed field $.mode")
	}
}

// case compare --html: an arm per column with its model and status, and
// each arm's changes against the recording.
func TestReportCaseCompareHTML(t *testing.T) {
	t.Parallel()
	bin := divergeBinary(t)
	dir, file := devCase(t, bin, "helpdesk")
	html := filepath.Join(dir, "compare.html")
	r := runIn(t, bin, dir, "case", "compare", file, "--model", "model-a", "--model", "model-b", "--html", html)
	if r.code != 0 {
		t.Fatalf("want exit 0\n%s", r)
	}
	p := openReport(t, html)
	if n := p.count(".arm"); n != 2 {
		t.Fatalf("%d arm columns, want 2", n)
	}
	models := p.texts(`.arm .fact[data-fact="model"]`)
	if len(models) != 2 || !strings.Contains(models[0], "model-a") || !strings.Contains(models[1], "model-b") {
		t.Errorf("arm models %q", models)
	}
	if got := strings.Join(p.texts(".arm .changes-vs-recording"), " "); !strings.Contains(got, "model:0") || !strings.Contains(got, "$.model") {
		t.Errorf("changes vs the recording %q, want model:0 and $.model", got)
	}
}
