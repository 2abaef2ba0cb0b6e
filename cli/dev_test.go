package cli_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// devOut is the last line of `pyrula dev`.
type devOut struct {
	RunID        string          `json:"run_id"`
	Status       string          `json:"status"`
	Result       json.RawMessage `json:"result"`
	Code         string          `json:"code"`
	LastSeq      int64           `json:"last_seq"`
	Case         string          `json:"case"`
	FixtureHash  string          `json:"fixture_hash"`
	ForkAfterSeq int64           `json:"fork_after_seq"`
	Events       string          `json:"events"`
}

// dev runs `pyrula dev` in dir with no server configured at all: the
// Valkey URL points at a closed port and no fixture store is set.
func dev(t *testing.T, dir string, args ...string) (result, []event, devOut) {
	t.Helper()
	r := run(t, invocation{args: append([]string{"dev"}, args...), env: []string{"PYRULA_VALKEY_URL=redis://127.0.0.1:1/0"}})
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var events []event
	for _, l := range lines[:len(lines)-1] {
		var e event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("event line %q: %v\n%s", l, err, r)
		}
		events = append(events, e)
	}
	var out devOut
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &out); err != nil {
		t.Fatalf("last line: %v\n%s", err, r)
	}
	return r, events, out
}

// TestDevKeepsTheRunAsACase runs a target with `pyrula dev` (no Valkey, no
// store), checks what it prints and keeps in .pyrula/last/, then case-runs
// the kept case replay-only, as the product page says: the same code makes
// the same calls; a changed input in the body is caught.
func TestDevKeepsTheRunAsACase(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "last")
	r, events, out := dev(t, dir, "checkout", "--dir", dir, "--input", "delay_ms=1")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("want exit 0 and a quiet stderr\n%s", r)
	}
	if out.Status != "complete" || !strings.HasPrefix(out.RunID, "run_") || len(out.FixtureHash) != 64 {
		t.Fatalf("summary %+v", out)
	}
	var res struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(out.Result, &res); err != nil || res.Status != "confirmed" {
		t.Errorf("result %s: %v", out.Result, err)
	}
	if len(events) == 0 || events[0].Kind != "run:submitted" || events[len(events)-1].Kind != "run:complete" ||
		events[len(events)-1].RunSeq != out.LastSeq {
		t.Fatalf("events %+v, last_seq %d", events, out.LastSeq)
	}
	if events[out.ForkAfterSeq-1].Kind != "run:start" {
		t.Errorf("fork_after_seq %d is %s, want run:start", out.ForkAfterSeq, events[out.ForkAfterSeq-1].Kind)
	}
	if out.Case != filepath.Join(dir, "checkout.case") || out.Events != filepath.Join(dir, "checkout.events.jsonl") {
		t.Errorf("kept at %s and %s", out.Case, out.Events)
	}
	kept := strings.Split(strings.TrimSpace(string(readFile(t, out.Events))), "\n")
	if len(kept) != len(events) {
		t.Errorf("%s has %d lines, the run %d events", out.Events, len(kept), len(events))
	}
	if ignore := string(readFile(t, filepath.Join(dir, ".gitignore"))); !strings.Contains(ignore, "\n*\n") {
		t.Errorf(".gitignore %q does not ignore everything", ignore)
	}

	// The kept case runs with no store and no Valkey; every call is reused.
	evPath := filepath.Join(t.TempDir(), "case-run.jsonl")
	cr := run(t, invocation{args: []string{"case", "run", out.Case, "--replay-only", "--events", evPath}})
	wantOK(t, cr)
	lines := strings.Split(strings.TrimSpace(cr.stdout), "\n")
	var outcome struct {
		Type        string         `json:"type"`
		Status      string         `json:"status"`
		FixtureHash string         `json:"fixture_hash"`
		Provenance  map[string]int `json:"provenance"`
		LastSeq     int64          `json:"last_seq"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &outcome); err != nil {
		t.Fatal(err)
	}
	if outcome.Status != "complete" || outcome.FixtureHash != out.FixtureHash || outcome.Provenance["reused"] != len(lines)-1 ||
		outcome.Provenance["live"]+outcome.Provenance["changed"]+outcome.Provenance["simulated"] != 0 {
		t.Errorf("outcome %+v of %d call lines\n%s", outcome, len(lines)-1, cr)
	}
	// --events keeps the case run's own journal: it ends with the outcome
	// and the terminal event.
	var caseEvents []event
	for _, l := range strings.Split(strings.TrimSpace(string(readFile(t, evPath))), "\n") {
		var e event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatal(err)
		}
		caseEvents = append(caseEvents, e)
	}
	n := len(caseEvents)
	if n < 3 || caseEvents[n-2].Kind != "case:outcome" || caseEvents[n-1].Kind != "run:complete" {
		t.Errorf("case run events end %+v", caseEvents[max(0, n-2):])
	}

	// A changed input that the body passes to a recorded call is caught.
	div := run(t, invocation{args: []string{"case", "run", out.Case, "--replay-only", "--input", "qty=7"}})
	if div.code == 0 {
		t.Errorf("a changed qty passed replay-only\n%s", div)
	}

	// A second dev run of the same target replaces the kept files.
	_, _, again := dev(t, dir, "checkout", "--dir", dir, "--input", "delay_ms=1", "--input", "qty=3")
	if again.Case != out.Case || again.FixtureHash == out.FixtureHash {
		t.Errorf("second run kept %s %s, first %s %s", again.Case, again.FixtureHash, out.Case, out.FixtureHash)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 {
		t.Errorf("%s holds %d entries, want .gitignore, the case and the events", dir, len(entries))
	}
}

// TestDevErrors checks dev's invalid input and a run that fails.
func TestDevErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := run(t, invocation{args: []string{"dev", "nope", "--dir", dir}})
	wantError(t, r, `no target "nope" is registered`)
	r = run(t, invocation{args: []string{"dev", "checkout", "--dir", dir, "--input", "qty"}})
	wantError(t, r, `--input "qty" is not KEY=JSON`)
	// A run that does not complete exits 3 and is still kept.
	r, _, out := dev(t, dir, "checkout", "--dir", dir, "--input", "delay_ms=1", "--input", "sku=\"NOPE\"")
	if r.code != 3 || out.Status != "error" || out.Code == "" {
		t.Fatalf("want exit 3 and an error outcome\n%s", r)
	}
	if _, err := os.Stat(out.Case); err != nil {
		t.Errorf("a failed run is not kept: %v", err)
	}
}

// TestEventsForkPoints checks `pyrula events --fork-points`: one line per
// event, and the points it marks valid are exactly those case save
// accepts.
func TestEventsForkPoints(t *testing.T) {
	t.Parallel()
	e := newJournalEnv(t, false)
	co := e.record("checkout", "--input", "delay_ms=1")
	r := e.run("events", co.RunID, "--fork-points")
	wantOK(t, r)
	type forkPoint struct {
		RunSeq int64  `json:"run_seq"`
		Kind   string `json:"kind"`
		Call   string `json:"call"`
		Valid  bool   `json:"fork_point"`
		Why    string `json:"why"`
	}
	points := decodeLines[forkPoint](t, r)
	if int64(len(points)) != co.LastSeq {
		t.Fatalf("%d lines for %d events", len(points), co.LastSeq)
	}
	var valid, invalid int
	for i, p := range points {
		if p.RunSeq != int64(i+1) {
			t.Fatalf("line %d has run_seq %d", i+1, p.RunSeq)
		}
		save := e.run("case", "save", "checkout", co.RunID, "--fork-after-seq", fmt.Sprint(p.RunSeq))
		switch {
		case p.Valid:
			valid++
			if p.Why != "" {
				t.Errorf("run_seq %d: valid with why %q", p.RunSeq, p.Why)
			}
			wantOK(t, save)
		default:
			invalid++
			if p.Kind != "call:start" || !strings.Contains(p.Why, p.Call+" was in flight") {
				t.Errorf("run_seq %d (%s %s): invalid because %q", p.RunSeq, p.Kind, p.Call, p.Why)
			}
			msg := wantRefusal(t, save, "capture_incomplete")
			if !strings.Contains(msg, p.Why) {
				t.Errorf("run_seq %d: case save says %q, --fork-points %q", p.RunSeq, msg, p.Why)
			}
		}
	}
	if valid == 0 || invalid == 0 {
		t.Errorf("%d valid and %d invalid fork points", valid, invalid)
	}
}

// TestDevIntoExistingDir checks that dev adds no .gitignore to a directory
// it did not create (a test data directory a case is recorded into).
func TestDevIntoExistingDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r, _, out := dev(t, dir, "checkout", "--dir", dir, "--input", "delay_ms=1")
	if r.code != 0 || out.Case != filepath.Join(dir, "checkout.case") {
		t.Fatalf("%s", r)
	}
	if _, err := os.Stat(filepath.Join(dir, ".gitignore")); !os.IsNotExist(err) {
		t.Errorf("dev wrote a .gitignore into an existing directory (%v)", err)
	}
}
