package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// demoLine is one labelled line of `worker demo`: a word, then JSON.
type demoLine struct {
	label string
	raw   json.RawMessage
}

func demoLines(t *testing.T, r result) []demoLine {
	t.Helper()
	var out []demoLine
	for _, l := range lines(r.stdout) {
		if l == "" {
			continue
		}
		label, rest, _ := strings.Cut(l, " ")
		rest = strings.TrimSpace(rest)
		if label == "step" {
			continue // narration: "step   N. text"
		}
		if !json.Valid([]byte(rest)) {
			t.Fatalf("line %q is not a label and JSON\n%s", l, r)
		}
		out = append(out, demoLine{label, json.RawMessage(rest)})
	}
	return out
}

// TestDemo runs `worker demo --format json` with no server at all
// (PYRULA_VALKEY_URL points at a closed port, which the demo must not use)
// and checks the replies and how each run ended, as docs/worker.md and the
// product page say: a recorded run completes; it saves at the fork; the bundle run
// replay-only completes; the bundle run with
// a changed input that the recorded prefix consumed stops prefix_diverged;
// the same change from the start with its writes allowed completes; the
// journal run of a source that aged out ends whatif_source_missing.
func TestDemo(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "cases")
	start := time.Now()
	r := runDemo(t, 60*time.Second, []string{"PYRULA_VALKEY_URL=redis://127.0.0.1:" + closedPort(t) + "/0"}, "demo", "--store", dir, "--target", "checkout", "--change", "qty=5", "--format", "json")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("want exit 0 and nothing on stderr\n%s", r)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the demo took %v; it should take a few seconds", d)
	}
	type reply struct {
		MessageID string `json:"message_id"`
		Type      string `json:"type"`
		Status    string `json:"status"`
		Result    struct {
			FixtureHash string `json:"fixture_hash"`
			RunID       string `json:"run_id"`
			Events      string `json:"events"`
		} `json:"result"`
	}
	type end struct {
		RunID  string `json:"run_id"`
		Status string `json:"status"`
		Code   string `json:"code"`
	}
	type event struct {
		RunSeq     int64  `json:"run_seq"`
		Kind       string `json:"kind"`
		Code       string `json:"code"`
		Divergence *struct {
			Diff struct {
				Changed []string `json:"changed"`
			} `json:"diff"`
		} `json:"divergence"`
	}
	var replies []reply
	var ends []end
	var runs [][]event // the events of each run, in order
	var current []event
	for _, l := range demoLines(t, r) {
		switch l.label {
		case "reply":
			var rp reply
			if err := json.Unmarshal(l.raw, &rp); err != nil {
				t.Fatal(err)
			}
			replies = append(replies, rp)
		case "event":
			var ev event
			if err := json.Unmarshal(l.raw, &ev); err != nil {
				t.Fatal(err)
			}
			if want := int64(len(current) + 1); ev.RunSeq != want {
				t.Fatalf("event %s has run_seq %d, want %d (in order, as they arrive)\n%s", l.raw, ev.RunSeq, want, r)
			}
			current = append(current, ev)
		case "end":
			var e end
			if err := json.Unmarshal(l.raw, &e); err != nil {
				t.Fatal(err)
			}
			ends = append(ends, e)
			runs, current = append(runs, current), nil
		}
	}
	wantTypes := []string{"start_run", "save_case", "run_case", "run_case", "run_case", "run_case"}
	if len(replies) != len(wantTypes) {
		t.Fatalf("%d replies, want %d\n%s", len(replies), len(wantTypes), r)
	}
	for i, rp := range replies {
		if rp.Type != wantTypes[i] || rp.Status != "ok" {
			t.Errorf("reply %d: %s %s, want %s ok", i+1, rp.Type, rp.Status, wantTypes[i])
		}
	}
	wantEnds := []end{{Status: "complete"}, {Status: "complete"}, {Status: "error", Code: "prefix_diverged"}, {Status: "complete"}, {Status: "error", Code: "whatif_source_missing"}}
	if len(ends) != len(wantEnds) {
		t.Fatalf("%d runs ended, want %d\n%s", len(ends), len(wantEnds), r)
	}
	for i, e := range ends {
		if e.Status != wantEnds[i].Status || e.Code != wantEnds[i].Code {
			t.Errorf("run %d ended %s %q, want %s %q", i+1, e.Status, e.Code, wantEnds[i].Status, wantEnds[i].Code)
		}
		evs := runs[i]
		if len(evs) == 0 || evs[0].Kind != "run:submitted" {
			t.Fatalf("run %d: events %+v", i+1, evs)
		}
		wantKind := "run:complete"
		if wantEnds[i].Code != "" {
			wantKind = "run:error"
		}
		if last := evs[len(evs)-1]; last.Kind != wantKind || last.Code != wantEnds[i].Code {
			t.Errorf("run %d: last event %+v, want %s %q", i+1, last, wantKind, wantEnds[i].Code)
		}
	}
	// The changed input diverges at the quote's qty.
	if d := runs[2][len(runs[2])-1].Divergence; d == nil || len(d.Diff.Changed) != 1 || d.Diff.Changed[0] != "$.qty" {
		t.Errorf("prefix_diverged without the $.qty divergence: %+v", runs[2][len(runs[2])-1])
	}
	// The bundle is in the --store directory, which is kept.
	h := replies[1].Result.FixtureHash
	if len(h) != 64 {
		t.Fatalf("save_case result %+v", replies[1].Result)
	}
	if _, err := os.Stat(filepath.Join(dir, h[:2], h+".case")); err != nil {
		t.Errorf("the saved bundle is not in --store: %v", err)
	}
}

// TestDemoText runs `worker demo` with its default output, the readable
// summary, and a temporary fixture store: one numbered line per step, then
// what happened (the recorded run, the saved case with its hash, each case
// run's outcome with its provenance counts or its divergence); no JSON
// lines; and no name of the temporary directory, which is gone after exit.
func TestDemoText(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	r := runDemo(t, 60*time.Second, []string{"TMPDIR=" + tmp, "PYRULA_VALKEY_URL=redis://127.0.0.1:" + closedPort(t) + "/0"}, "demo", "--target", "checkout", "--change", "qty=5")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("want exit 0 and nothing on stderr\n%s", r)
	}
	want := []*regexp.Regexp{
		regexp.MustCompile(`(?m)^1\. start_run: .*\n   run run_[0-9a-f]{16}: complete; [0-9]+ events, [0-9]+ calls$`),
		regexp.MustCompile(`(?m)^2\. save_case: .*\n   saved case [0-9a-f]{64}: workflow checkout, forked after run_seq [0-9]+, [0-9]+ history events, [0-9]+ recorded results$`),
		regexp.MustCompile(`(?m)^3\. run_case .*replay only.*\n   run case_[0-9a-f]{16}: complete; calls: 1 prefix \(verified\), [1-9][0-9]* reused, 0 simulated, 0 live, 0 changed$`),
		regexp.MustCompile(`(?m)^4\. run_case .*\n   run case_[0-9a-f]{16}: error prefix_diverged at step:quote:0: its input changed \$\.qty$`),
		regexp.MustCompile(`(?m)^5\. run_case .*\n   run case_[0-9a-f]{16}: complete; calls: 0 prefix \(verified\), [0-9]+ reused, 0 simulated, [0-9]+ live, [1-9][0-9]* changed$`),
		regexp.MustCompile(`(?m)^6\. run_case .*\n   run case_[0-9a-f]{16}: error whatif_source_missing: .+$`),
		regexp.MustCompile(`(?m)^Done: 6 steps, every reply ok and every run ended as announced\.$`),
	}
	for _, re := range want {
		if !re.MatchString(r.stdout) {
			t.Errorf("no line matches %s\n%s", re, r)
		}
	}
	for _, l := range lines(r.stdout) {
		if strings.HasPrefix(l, "{") || strings.HasPrefix(l, "event ") || strings.HasPrefix(l, "reply ") {
			t.Errorf("a JSON line in the text output: %s", l)
		}
	}
	if strings.Contains(r.stdout, tmp) {
		t.Errorf("the output names the temporary directory %s, which the demo deletes\n%s", tmp, r)
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("left in TMPDIR after exit: %s", e.Name())
	}
}

func TestDemoUsage(t *testing.T) {
	t.Parallel()
	r := runDemo(t, 30*time.Second, nil, "demo", "extra")
	if r.code != 1 || !strings.Contains(r.stderr, "usage: worker demo") {
		t.Fatalf("want exit 1 with the usage\n%s", r)
	}
}
