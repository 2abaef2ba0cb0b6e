package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/cli"
	"github.com/pyrula/caseworker/flow"
)

// suiteLine is a {"type":"case"} or {"type":"summary"} line of case test.
type suiteLine struct {
	Type        string  `json:"type"`
	File        *string `json:"file"`
	FixtureHash *string `json:"fixture_hash"`
	Target      *string `json:"target"`
	Status      string  `json:"status"`
	RunStatus   *string `json:"run_status"`
	Code        *string `json:"code"`
	Reason      *string `json:"reason"`
	Message     *string `json:"message"`
	StopKey     *string `json:"stop_key"`
	Divergence  *struct {
		Call                string `json:"call"`
		RecordedCall        string `json:"recorded_call"`
		ActualFingerprint   string `json:"actual_fingerprint"`
		RecordedFingerprint string `json:"recorded_fingerprint"`
		Diff                *struct {
			Added, Removed, Changed []string
		} `json:"diff"`
	} `json:"divergence"`
	UnconsumedKeys []string `json:"unconsumed_keys"`
	Cases          int      `json:"cases"`
	Passed         int      `json:"passed"`
	Failed         int      `json:"failed"`
	Errors         int      `json:"errors"`
}

// junitReport is what the tests read of a JUnit XML report.
type junitReport struct {
	XMLName xml.Name `xml:"testsuites"`
	Tests   int      `xml:"tests,attr"`
	Suites  []struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Errors   int `xml:"errors,attr"`
		Cases    []struct {
			Name      string `xml:"name,attr"`
			Classname string `xml:"classname,attr"`
			Failure   *struct {
				Message string `xml:"message,attr"`
				Type    string `xml:"type,attr"`
				Text    string `xml:",chardata"`
			} `xml:"failure"`
			Error *struct {
				Message string `xml:"message,attr"`
				Type    string `xml:"type,attr"`
			} `xml:"error"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

func readJUnit(t *testing.T, path string) junitReport {
	t.Helper()
	var rep junitReport
	if err := xml.Unmarshal(readFile(t, path), &rep); err != nil {
		t.Fatalf("parse %s: %v\n%s", path, err, readFile(t, path))
	}
	if len(rep.Suites) != 1 {
		t.Fatalf("want one testsuite, got %d", len(rep.Suites))
	}
	return rep
}

// suiteOf splits case test's output into its case lines and summary.
func suiteOf(t *testing.T, r result) ([]suiteLine, suiteLine) {
	t.Helper()
	lines := decodeLines[suiteLine](t, r)
	if len(lines) == 0 || lines[len(lines)-1].Type != "summary" {
		t.Fatalf("no summary line\n%s", r)
	}
	for _, l := range lines[:len(lines)-1] {
		if l.Type != "case" {
			t.Fatalf("want case lines before the summary\n%s", r)
		}
	}
	return lines[:len(lines)-1], lines[len(lines)-1]
}

// TestCaseTestPassingSuite: cases recorded with `pyrula dev` (a workflow
// and an agent), found by searching a directory tree, and a recorded sample
// named by its hash in the store all pass replay-only; the JUnit report
// parses back with one testcase per case and no failure. Hidden
// directories and other files are not cases.
func TestCaseTestPassingSuite(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "cases")
	co, ag := filepath.Join(root, "checkout"), filepath.Join(root, "agents", "support")
	if r, _, out := dev(t, co, "checkout", "--dir", co, "--input", "delay_ms=1"); r.code != 0 || out.Status != "complete" {
		t.Fatalf("record checkout\n%s", r)
	}
	if r, _, out := dev(t, ag, "support_agent", "--dir", ag); r.code != 0 || out.Status != "complete" {
		t.Fatalf("record support_agent\n%s", r)
	}
	if err := os.MkdirAll(filepath.Join(root, ".scratch"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{".scratch/broken.case": "not a bundle", "README.txt": "notes"} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f := setup(t)
	h := f.importFile(sampleCase("checkout-recorded.json"))
	junit := filepath.Join(t.TempDir(), "junit.xml")

	r := f.run("case", "test", root, h, "--junit", junit, "--parallel", "2")
	wantOK(t, r)
	cases, sum := suiteOf(t, r)
	want := []string{filepath.Join(ag, "support_agent.case"), filepath.Join(co, "checkout.case"), h}
	if len(cases) != 3 || sum.Cases != 3 || sum.Passed != 3 || sum.Failed+sum.Errors != 0 {
		t.Fatalf("want three passing cases\n%s", r)
	}
	for i, c := range cases {
		name := str(c.File)
		if c.File == nil {
			name = str(c.FixtureHash)
		}
		if name != want[i] || c.Status != "pass" || str(c.RunStatus) != "complete" || c.Code != nil || c.Divergence != nil ||
			c.UnconsumedKeys == nil || len(c.UnconsumedKeys) != 0 || len(str(c.FixtureHash)) != 64 {
			t.Errorf("case %d: want %s passing, got %+v", i, want[i], c)
		}
	}
	if str(cases[0].Target) != "support_agent" || str(cases[2].Target) != "checkout" {
		t.Errorf("targets %s, %s", str(cases[0].Target), str(cases[2].Target))
	}

	rep := readJUnit(t, junit)
	s := rep.Suites[0]
	if rep.Tests != 3 || s.Tests != 3 || s.Failures != 0 || s.Errors != 0 || len(s.Cases) != 3 {
		t.Fatalf("junit %+v", rep)
	}
	for i, c := range s.Cases {
		if c.Name != want[i] || c.Failure != nil || c.Error != nil || !strings.HasPrefix(c.Classname, "pyrula.") {
			t.Errorf("junit testcase %d: %+v", i, c)
		}
	}

	// One file named directly; nothing found is a failure, never a pass.
	wantOK(t, run(t, invocation{args: []string{"case", "test", filepath.Join(co, "checkout.case")}}))
	empty := t.TempDir()
	if err := os.MkdirAll(filepath.Join(empty, ".hidden"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(empty, ".hidden", "x.case"), readFile(t, filepath.Join(co, "checkout.case")), 0o644); err != nil {
		t.Fatal(err)
	}
	wantError(t, run(t, invocation{args: []string{"case", "test", empty}}), "case test: no case found in "+empty)
	wantError(t, run(t, invocation{args: []string{"case", "test"}}), "missing argument PATH|HASH")
	wantError(t, run(t, invocation{args: []string{"case", "test", filepath.Join(empty, "gone.case")}}), "no such file")
	wantError(t, run(t, invocation{args: []string{"case", "test", root, "--parallel", "0"}}), "--parallel 0")
	wantError(t, run(t, invocation{args: []string{"case", "test", root, "--junit", filepath.Join(empty, "no", "j.xml")}}), "its directory does not exist")
	wantRefusal(t, run(t, invocation{args: []string{"case", "test", "not-a-hash"}}), "invalid_fixture_hash")
	wantRefusal(t, run(t, invocation{args: []string{"case", "test", h}}), "no_fixture_store")
}

// The changed-code tests record cases with one version of their own
// targets and test them with another, through cli.Options.Main (what a
// user's own binary runs).

type priceIn struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

// shopV registers version v of three workflows: ping (the same in v1 and
// v2), greet (v2 no longer says goodbye) and pricing (v2 adds a currency
// to quote's input).
func shopV(v int) func(*flow.Registry) error {
	return func(reg *flow.Registry) error {
		code := fmt.Sprintf("shop/v%d", v)
		ping := flow.Workflow[struct{}, string]{Name: "ping", CodeVersion: code,
			Steps: []flow.Decl{flow.DeclareStep("pong", flow.Read)},
			Run: func(ctx context.Context, _ struct{}) (string, error) {
				return flow.Step(ctx, "pong", map[string]int{"n": 1}, func(context.Context, map[string]int) (string, error) { return "pong", nil })
			}}
		greet := flow.Workflow[struct{}, string]{Name: "greet", CodeVersion: code,
			Steps: []flow.Decl{flow.DeclareStep("hello", flow.Read), flow.DeclareStep("bye", flow.Read)},
			Run: func(ctx context.Context, _ struct{}) (string, error) {
				say := func(_ context.Context, w string) (string, error) { return w + "!", nil }
				s, err := flow.Step(ctx, "hello", "hello", say)
				if err != nil || v > 1 {
					return s, err
				}
				return flow.Step(ctx, "bye", "bye", say)
			}}
		pricing := flow.Workflow[priceIn, int]{Name: "pricing", CodeVersion: code, Defaults: priceIn{SKU: "SKU-1", Qty: 2},
			Steps: []flow.Decl{flow.DeclareStep("quote", flow.Read), flow.DeclareStep("charge", flow.Write)},
			Run: func(ctx context.Context, in priceIn) (int, error) {
				q := map[string]any{"sku": in.SKU, "qty": in.Qty}
				if v > 1 {
					q["currency"] = "EUR"
				}
				total, err := flow.Step(ctx, "quote", q, func(context.Context, map[string]any) (int, error) { return 1999 * in.Qty, nil })
				if err != nil {
					return 0, err
				}
				_, err = flow.Step(ctx, "charge", map[string]int{"amount": total}, func(context.Context, map[string]int) (string, error) { return "ch_1", nil })
				return total, err
			}}
		return errors.Join(flow.RegisterWorkflow(reg, ping), flow.RegisterWorkflow(reg, greet), flow.RegisterWorkflow(reg, pricing))
	}
}

// mainRun runs cli.Options.Main with register's targets and no server.
func mainRun(t *testing.T, register func(*flow.Registry) error, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	getenv := func(name string) string {
		if name == "PYRULA_VALKEY_URL" {
			return "redis://127.0.0.1:1/0"
		}
		return ""
	}
	code := cli.Options{Register: register}.Main(context.Background(), args, getenv, nil, &out, &errOut)
	return result{args: args, code: code, stdout: out.String(), stderr: errOut.String()}
}

// TestCaseTestFailingSuite: cases recorded by v1 of the targets and tested
// against v2 fail with structured divergences (prefix_diverged with the
// input diff, replay_diverged input_changed, unconsumed recorded calls)
// while the unchanged target passes; the command exits 3 and the JUnit
// report carries one failure per failed case with its divergence.
func TestCaseTestFailingSuite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	record := func(sub, target string, args ...string) {
		t.Helper()
		r := mainRun(t, shopV(1), append([]string{"dev", target, "--dir", filepath.Join(dir, sub)}, args...)...)
		if r.code != 0 {
			t.Fatalf("record %s\n%s", target, r)
		}
	}
	record("a", "ping")
	record("b", "greet")
	record("c", "pricing", "--fork-after-seq", "4") // the prefix holds quote (call:start 3, call:done 4)
	record("d", "pricing")                          // forks after run:start: quote comes after the fork

	// v1 passes its own recordings.
	r := mainRun(t, shopV(1), "case", "test", dir)
	if _, sum := suiteOf(t, r); r.code != 0 || sum.Passed != 4 {
		t.Fatalf("v1 against its own cases\n%s", r)
	}

	junit := filepath.Join(dir, "junit.xml")
	r = mainRun(t, shopV(2), "case", "test", dir, "--junit", junit)
	if r.code != 3 || r.stderr != "" {
		t.Fatalf("want exit 3\n%s", r)
	}
	cases, sum := suiteOf(t, r)
	if len(cases) != 4 || sum.Cases != 4 || sum.Passed != 1 || sum.Failed != 3 || sum.Errors != 0 {
		t.Fatalf("want one pass and three failures\n%s", r)
	}
	ping, greet, prefix, post := cases[0], cases[1], cases[2], cases[3]
	if ping.Status != "pass" || str(ping.Target) != "ping" {
		t.Errorf("ping: %+v", ping)
	}
	if greet.Status != "fail" || str(greet.RunStatus) != "complete" || greet.Code != nil ||
		fmt.Sprint(greet.UnconsumedKeys) != "[step:bye:0]" || !strings.Contains(str(greet.Message), "step:bye:0") {
		t.Errorf("greet: want a fail with unconsumed step:bye:0, got %+v", greet)
	}
	d := prefix.Divergence
	if prefix.Status != "fail" || str(prefix.Code) != "prefix_diverged" || str(prefix.StopKey) != "step:quote:0" ||
		d == nil || d.Call != "step:quote:0" || d.RecordedCall != "step:quote:0" || d.Diff == nil ||
		fmt.Sprint(d.Diff.Added) != "[$.currency]" || len(d.Diff.Changed) != 0 ||
		d.ActualFingerprint == d.RecordedFingerprint || len(d.RecordedFingerprint) != 64 {
		t.Errorf("pricing, quote in the prefix: %+v %+v", prefix, d)
	}
	d = post.Divergence
	if post.Status != "fail" || str(post.Code) != "replay_diverged" || str(post.Reason) != "input_changed" ||
		str(post.StopKey) != "step:quote:0" || d == nil || d.Call != "step:quote:0" || d.RecordedFingerprint == "" ||
		d.ActualFingerprint == d.RecordedFingerprint {
		t.Errorf("pricing, quote after the fork: %+v %+v", post, d)
	}

	rep := readJUnit(t, junit)
	s := rep.Suites[0]
	if s.Tests != 4 || s.Failures != 3 || s.Errors != 0 || len(s.Cases) != 4 {
		t.Fatalf("junit %+v", rep)
	}
	if s.Cases[0].Failure != nil || s.Cases[0].Classname != "pyrula.ping" {
		t.Errorf("junit ping %+v", s.Cases[0])
	}
	for i, want := range map[int][]string{
		1: {"unconsumed_keys", "step:bye:0"},
		2: {"prefix_diverged", "at step:quote:0", "recorded fingerprint " + prefix.Divergence.RecordedFingerprint, "input fields added $.currency"},
		3: {"replay_diverged", "(input_changed)", "at step:quote:0"},
	} {
		f := s.Cases[i].Failure
		if f == nil || f.Type != want[0] {
			t.Errorf("junit testcase %d: want a %s failure, got %+v", i, want[0], s.Cases[i])
			continue
		}
		for _, w := range want[1:] {
			if !strings.Contains(f.Message, w) {
				t.Errorf("junit testcase %d: message %q lacks %q", i, f.Message, w)
			}
		}
		var body suiteLine
		if err := json.Unmarshal([]byte(f.Text), &body); err != nil || body.Status != "fail" {
			t.Errorf("junit testcase %d: the failure's text is not the case line: %v\n%s", i, err, f.Text)
		}
	}

	// Bounded parallelism does not change what is printed, nor its order.
	for _, n := range []string{"1", "3"} {
		rn := mainRun(t, shopV(2), "case", "test", dir, "--parallel", n)
		got, _ := suiteOf(t, rn)
		for i := range got {
			if str(got[i].File) != str(cases[i].File) || got[i].Status != cases[i].Status || str(got[i].Code) != str(cases[i].Code) {
				t.Errorf("--parallel %s: case %d is %+v, want %+v", n, i, got[i], cases[i])
			}
		}
	}

	// --target runs every case against one target: a case of another
	// target fails rather than passes.
	r = mainRun(t, shopV(1), "case", "test", filepath.Join(dir, "a"), filepath.Join(dir, "b"), "--target", "greet")
	if cases, _ := suiteOf(t, r); r.code != 3 || cases[0].Status != "fail" || str(cases[0].Target) != "greet" || cases[1].Status != "pass" {
		t.Errorf("--target greet\n%s", r)
	}
	wantError(t, mainRun(t, shopV(1), "case", "test", dir, "--target", "nope"), `no target "nope" is registered`)

	// A file that is not a bundle is an error line, and the suite fails.
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"manifest":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r = mainRun(t, shopV(1), "case", "test", filepath.Join(dir, "a"), bad)
	if cases, sum := suiteOf(t, r); r.code != 3 || cases[1].Status != "error" || cases[1].Code == nil || sum.Errors != 1 {
		t.Errorf("a bad bundle\n%s", r)
	}
}

// TestCaseTestSelections: case test takes run_suite's selections locally.
// --from-journal replays the completed runs of a target recorded in the
// journal (a seeded sample draws the same runs again), --stored the fixture
// store's cases of a target, and a selection under --min-cases is
// suite_too_small (exit 3), never a pass.
func TestCaseTestSelections(t *testing.T) {
	t.Parallel()
	e := newJournalEnv(t, false)
	for range 4 {
		e.record("checkout")
	}
	r := e.run("case", "test", "--from-journal", "checkout")
	lines := decodeLines[map[string]any](t, r)
	if r.code != 0 || len(lines) != 5 || lines[0]["run_id"] == nil || lines[0]["status"] != "pass" || lines[4]["passed"] != 4.0 {
		t.Fatalf("want 4 recorded runs passing\n%s", r)
	}
	sample := func() string {
		r := e.run("case", "test", "--from-journal", "checkout", "--sample", "2", "--seed", "7")
		var ids []string
		for _, l := range decodeLines[map[string]any](t, r) {
			if id, ok := l["run_id"].(string); ok {
				ids = append(ids, id)
			}
		}
		if r.code != 0 || len(ids) != 2 {
			t.Fatalf("want a sample of 2\n%s", r)
		}
		return strings.Join(ids, ",")
	}
	if a, b := sample(), sample(); a != b {
		t.Fatalf("the same seed drew %s then %s", a, b)
	}
	r = e.run("case", "test", "--from-journal", "checkout", "--min-cases", "5")
	if r.code != 3 || !strings.Contains(r.stdout, `"code":"suite_too_small"`) {
		t.Fatalf("want suite_too_small, exit 3\n%s", r)
	}
	r = e.run("case", "test", "--from-journal", "triage")
	if r.code != 3 || !strings.Contains(r.stdout, "found 0 case(s) in the completed runs of triage") {
		t.Fatalf("an empty selection: want suite_too_small, exit 3\n%s", r)
	}
	wantOK(t, e.run("case", "import", sampleCase("checkout-recorded.json")))
	r = e.run("case", "test", "--stored", "checkout", "--format", "table")
	if r.code != 0 || !strings.Contains(r.stdout, "pass") {
		t.Fatalf("--stored: want the stored checkout case passing\n%s", r)
	}
	wantError(t, e.run("case", "test", "--from-journal", "checkout", "--after", "yesterday"), "not an RFC 3339 time")
	wantError(t, e.run("case", "test", sampleCase("checkout-recorded.json"), "--limit", "2"), "--limit applies to --stored")
}
