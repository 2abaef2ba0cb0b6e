package cli_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// diffLine is a line of case diff: manifest, call or summary.
type diffLine struct {
	Type        string            `json:"type"`
	FixtureHash map[string]string `json:"fixture_hash"`
	Changed     []string          `json:"changed"`
	Inputs      *fieldDiffOut     `json:"inputs"`
	ForkAfter   map[string]*int64 `json:"fork_after_seq"`

	Call        string             `json:"call"`
	Change      string             `json:"change"`
	Fields      []string           `json:"fields"`
	Fingerprint map[string]*string `json:"fingerprint"`
	Input       *fieldDiffOut      `json:"input"`
	Result      *fieldDiffOut      `json:"result"`
	Value       map[string]json.RawMessage
	Role        string `json:"role"`

	Identical       bool           `json:"identical"`
	ManifestChanged []string       `json:"manifest_changed"`
	Calls           map[string]int `json:"calls"`
}

type fieldDiffOut struct {
	Added, Removed, Changed []string
	Values                  map[string]map[string]json.RawMessage `json:"values"`
}

// diffOf splits case diff's output into its manifest line, call lines and
// summary.
func diffOf(t *testing.T, r result) (man diffLine, calls map[string]diffLine, order []string, sum diffLine) {
	t.Helper()
	lines := decodeLines[diffLine](t, r)
	if len(lines) < 2 || lines[0].Type != "manifest" || lines[len(lines)-1].Type != "summary" {
		t.Fatalf("want a manifest line first and a summary line last\n%s", r)
	}
	calls = map[string]diffLine{}
	for _, l := range lines[1 : len(lines)-1] {
		if l.Type != "call" {
			t.Fatalf("want call lines between\n%s", r)
		}
		calls[l.Call] = l
		order = append(order, l.Call)
	}
	return lines[0], calls, order, lines[len(lines)-1]
}

// TestCaseDiff: the same case (a file, its hash in the store) is
// identical, exit 0; two recordings of checkout with another qty differ in
// their manifests' inputs and in the calls qty reaches, with JSON-path
// diffs of inputs and results and no values unless --values; calls only
// one side has are added or removed; --format table says the same for
// people; exit 4 tells different.
func TestCaseDiff(t *testing.T) {
	t.Parallel()
	f := setup(t)
	sample := sampleCase("checkout-recorded.json")
	h := f.importFile(sample)

	for _, args := range [][]string{{sample, sample}, {h, sample}} {
		r := f.run(append([]string{"case", "diff"}, args...)...)
		wantOK(t, r)
		man, calls, _, sum := diffOf(t, r)
		if len(man.Changed) != 0 || len(calls) != 0 || !sum.Identical || sum.Calls["same"] != 9 || sum.FixtureHash["a"] != h || sum.FixtureHash["b"] != h {
			t.Fatalf("identical\n%s", r)
		}
	}

	// Two recordings forked after quote (its input is in the history).
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, rec := range []struct{ dir, qty string }{{a, "2"}, {b, "3"}} {
		if r, _, out := dev(t, rec.dir, "checkout", "--dir", rec.dir, "--input", "delay_ms=1", "--input", "qty="+rec.qty, "--fork-after-seq", "4"); out.Status != "complete" {
			t.Fatalf("record\n%s", r)
		}
	}
	ca, cb := filepath.Join(a, "checkout.case"), filepath.Join(b, "checkout.case")
	r := run(t, invocation{args: []string{"case", "diff", ca, cb}})
	if r.code != 4 || r.stderr != "" {
		t.Fatalf("want exit 4 and a quiet stderr\n%s", r)
	}
	man, calls, order, sum := diffOf(t, r)
	if fmt.Sprint(man.Changed) != "[inputs]" || fmt.Sprint(man.Inputs.Changed) != "[$.qty]" || man.Inputs.Values != nil || sum.Identical ||
		fmt.Sprint(sum.ManifestChanged) != "[inputs]" {
		t.Errorf("manifest %+v, summary %+v\n%s", man, sum, r)
	}
	quote := calls["step:quote:0"]
	if quote.Change != "changed" || fmt.Sprint(quote.Fields) != "[fingerprint input result]" ||
		fmt.Sprint(quote.Input.Changed) != "[$.qty]" || fmt.Sprint(quote.Result.Changed) != "[$.total_minor]" ||
		*quote.Fingerprint["a"] == *quote.Fingerprint["b"] || quote.Input.Values != nil || quote.Value != nil {
		t.Errorf("step:quote:0 %+v", quote)
	}
	if order[0] != "step:quote:0" {
		t.Errorf("calls in run order start with the prefix's quote, got %v", order)
	}
	// reserve's input holds qty (its result does not): a call after the
	// fork, whose input the case keeps on its result; it got qty from the
	// inputs, not from quote's result, so it is independent of the cause.
	// now and random are the same calls with other results.
	if c := calls["step:reserve:0"]; fmt.Sprint(c.Fields) != "[fingerprint input]" || fmt.Sprint(c.Input.Changed) != "[$.qty]" ||
		c.Role != "independent" || calls["step:quote:0"].Role != "cause" {
		t.Errorf("step:reserve:0 %+v", c)
	}
	if c := calls["random:0"]; fmt.Sprint(c.Fields) != "[result]" || fmt.Sprint(c.Result.Changed) != "[$]" {
		t.Errorf("random:0 %+v", c)
	}
	if sum.Calls["changed"] != len(calls) || sum.Calls["added"]+sum.Calls["removed"] != 0 || sum.Calls["same"]+len(calls) != 9 {
		t.Errorf("counts %v for %d call lines", sum.Calls, len(calls))
	}
	if text := withoutHex(r.stdout); strings.Contains(text, "5997") || strings.Contains(text, "SKU-42") {
		t.Errorf("values without --values\n%s", r)
	}

	// --values: the values at each path, and the warning.
	r = run(t, invocation{args: []string{"case", "diff", ca, cb, "--values"}})
	if r.code != 4 || !strings.HasPrefix(r.stderr, "warning: ") || !strings.Contains(r.stderr, "unredacted") {
		t.Fatalf("--values: want exit 4 and a warning\n%s", r)
	}
	man, calls, _, _ = diffOf(t, r)
	if v := man.Inputs.Values["$.qty"]; string(v["a"]) != "2" || string(v["b"]) != "3" {
		t.Errorf("--values inputs %+v", man.Inputs)
	}
	if v := calls["step:quote:0"].Result.Values["$.total_minor"]; string(v["a"]) != "3998" || string(v["b"]) != "5997" {
		t.Errorf("--values result %+v", calls["step:quote:0"].Result)
	}

	// Calls one side lacks: a recorded call removed, another added.
	edited := editedSample(t, "checkout-recorded.json", func(b map[string]any) {
		var keep []any
		for _, res := range b["results"].([]any) {
			if res.(map[string]any)["key"] != "sigsend:0" {
				keep = append(keep, res)
			}
		}
		b["results"] = append(keep, map[string]any{"kind": "step", "key": "notify:0", "fingerprint": strings.Repeat("0", 64), "error": map[string]any{"type": "Boom", "message": "x"}})
	})
	r = run(t, invocation{args: []string{"case", "diff", sample, edited, "--values"}})
	_, calls, _, sum = diffOf(t, r)
	removed, added := calls["step:sigsend:0"], calls["step:notify:0"]
	if r.code != 4 || len(calls) != 2 || removed.Change != "removed" || removed.Fingerprint["b"] != nil || added.Change != "added" ||
		added.Fingerprint["a"] != nil || !strings.Contains(string(added.Value["b"]), "Boom") || sum.Calls["added"] != 1 || sum.Calls["removed"] != 1 {
		t.Errorf("added and removed\n%s", r)
	}

	// The table for people.
	r = run(t, invocation{args: []string{"case", "diff", ca, cb, "--format", "table"}})
	if r.code != 4 || !strings.Contains(r.stdout, "CALL") || !regexpLine(r.stdout, `^step:quote:0 +[0-9a-f]{12} +[0-9a-f]{12} +changed fingerprint, input \(\$\.qty\), result \(\$\.total_minor\) · cause$`) ||
		!strings.Contains(r.stdout, "different: ") || strings.Contains(withoutHex(r.stdout), "5997") {
		t.Errorf("table\n%s", r)
	}
	r = run(t, invocation{args: []string{"case", "diff", ca, ca, "--format", "table"}})
	if r.code != 0 || !strings.Contains(r.stdout, "identical: 0 call(s) changed") {
		t.Errorf("identical table\n%s", r)
	}

	// Invalid input and refusals.
	wantError(t, run(t, invocation{args: []string{"case", "diff", ca}}), "missing argument B")
	wantError(t, run(t, invocation{args: []string{"case", "diff", ca, filepath.Join(dir, "gone.case")}}), "no bundle file")
	wantError(t, run(t, invocation{args: []string{"case", "diff", ca, cb, "--format", "xml"}}), "--format xml: want json or table")
	wantRefusal(t, run(t, invocation{args: []string{"case", "diff", ca, "abc"}}), "invalid_fixture_hash")
	wantRefusal(t, run(t, invocation{args: []string{"case", "diff", ca, h}}), "no_fixture_store")
	wantRefusal(t, f.run("case", "diff", h, strings.Repeat("0", 64)), "bundle_missing")
}

// regexpLine says that a line of s matches the pattern.
func regexpLine(s, pattern string) bool {
	for _, line := range strings.Split(s, "\n") {
		if matched, _ := regexp.MatchString(pattern, strings.TrimRight(line, " ")); matched {
			return true
		}
	}
	return false
}

// withoutHex replaces the hashes, fingerprints and run ids of a diff's
// output (hex, which may hold any digits) so that a check for a value's
// digits looks past them.
func withoutHex(s string) string {
	return regexp.MustCompile(`[0-9a-f]{12,}`).ReplaceAllString(s, "<hex>")
}
