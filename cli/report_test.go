package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
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
	var n int
	p.Eval(p.t, "document.querySelectorAll("+jsString(sel)+").length", &n)
	return n
}

// texts are the rendered texts of the elements that match sel.
func (p reportPage) texts(sel string) []string {
	p.t.Helper()
	var out []string
	p.Eval(p.t, "Array.from(document.querySelectorAll("+jsString(sel)+"), e => e.innerText)", &out)
	return out
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
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
