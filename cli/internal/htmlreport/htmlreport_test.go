package htmlreport_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/cli/internal/htmlreport"
)

func write(t testing.TB, r htmlreport.Report) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := htmlreport.Write(&b, r); err != nil {
		t.Fatalf("Write: %v", err)
	}
	return b.Bytes()
}

// allReports is one report of each command, and the hostile one.
func allReports(t testing.TB) map[string]htmlreport.Report {
	big, _ := longRunReport(t, 2000, 1500)
	return map[string]htmlreport.Report{
		"case test":         caseTestReport(t, true),
		"case test 1000":    bigCaseTestReport(t),
		"case run":          big,
		"case compare":      compareReport(t),
		"case diff":         diffReport(t),
		"enqueue run_suite": suiteReport(t),
		"hostile strings":   hostileReport(t),
		"case test values":  caseTestReport(t, false),
	}
}

// The page loads nothing: no http:// or https:// reference anywhere in it.
func TestNoNetworkReferences(t *testing.T) {
	for name, r := range allReports(t) {
		page := strings.ToLower(string(write(t, r)))
		for _, ref := range []string{"http://", "https://", "//cdn", "@import", "url("} {
			if strings.Contains(page, ref) {
				t.Errorf("%s: the page holds %q", name, ref)
			}
		}
	}
}

// The same Report gives the same bytes.
func TestWriteIsDeterministic(t *testing.T) {
	for name, r := range allReports(t) {
		if a, b := write(t, r), write(t, r); !bytes.Equal(a, b) {
			t.Errorf("%s: two writes of the same report differ", name)
		}
	}
}

// No string of the data can end the data's script element or start markup:
// the page has exactly two script elements, and the data reads back as
// written.
func TestDataIsEscaped(t *testing.T) {
	r := hostileReport(t)
	page := string(write(t, r))
	if n := strings.Count(strings.ToLower(page), "</script"); n != 2 {
		t.Errorf("the page has %d </script, want 2 (the data's and the script's)", n)
	}
	if n := strings.Count(strings.ToLower(page), "<script"); n != 2 {
		t.Errorf("the page has %d <script, want 2", n)
	}
	for _, bad := range []string{"<img", "<!--", "\u2028", "\u2029"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page holds %q unescaped", bad)
		}
	}
	const open = `<script type="application/json" id="report-data">`
	_, rest, ok := strings.Cut(page, open)
	if !ok {
		t.Fatal("no report-data element")
	}
	text, _, _ := strings.Cut(rest, "</script>")
	var got struct {
		Title string `json:"title"`
		Cases []struct {
			Line struct {
				Message string `json:"message"`
			} `json:"line"`
		} `json:"cases"`
	}
	if err := json.Unmarshal([]byte(text), &got); err != nil {
		t.Fatalf("the data does not decode: %v", err)
	}
	if got.Title != r.Title {
		t.Errorf("title read back = %q, want %q", got.Title, r.Title)
	}
	var line struct {
		Message string `json:"message"`
	}
	if err := json.Unmarshal(r.Cases[0].Line, &line); err != nil {
		t.Fatal(err)
	}
	if len(got.Cases) != 1 || got.Cases[0].Line.Message != line.Message {
		t.Errorf("message read back = %+v, want %q", got.Cases, line.Message)
	}
	if !strings.Contains(page, "<title>pyrula case test &lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=&#34;alert(2);window.pwned=1&#34;&gt;</title>") {
		t.Error("the title is not escaped as text")
	}
}

func TestWriteRefuses(t *testing.T) {
	var b bytes.Buffer
	if err := htmlreport.Write(&b, htmlreport.Report{Command: "case show"}); err == nil || !strings.Contains(err.Error(), `unknown command "case show"`) {
		t.Errorf("an unknown command: err = %v", err)
	}
	r := caseTestReport(t, false)
	r.Cases[0].Line = json.RawMessage(`{"type":`)
	if err := htmlreport.Write(&b, r); err == nil || !strings.Contains(err.Error(), "encode the report data") {
		t.Errorf("an invalid line: err = %v", err)
	}
	if err := htmlreport.Write(failingWriter{}, caseTestReport(t, false)); !errors.Is(err, errWrite) {
		t.Errorf("a failing writer: err = %v", err)
	}
}

var errWrite = errors.New("disk full")

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errWrite }
