package cli_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pyrula/caseworker/internal/testenv"
)

// The divergence tests record cases with pyrula dev, as a workflow author
// does (the case forks right after run:start, so every call is after the
// fork), then change the code (another registered version of the target,
// cli/internal/divergetest), an input or the prompt, and check that each
// divergence names what changed.

var (
	divergeOnce sync.Once
	divergeBin  string
	divergeErr  error
)

// divergeBinary builds, once, the pyrula binary over divergetest's targets.
func divergeBinary(t *testing.T) string {
	t.Helper()
	divergeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pyrula-diverge-")
		if err != nil {
			divergeErr = err
			return
		}
		divergeBin, divergeErr = testenv.BuildBinary(dir, "github.com/pyrula/caseworker/cli/internal/divergetest/cmd/pyrula-diverge")
	})
	if divergeErr != nil {
		t.Fatal(divergeErr)
	}
	return divergeBin
}

// runIn runs bin in dir with a clean environment.
func runIn(t *testing.T, bin, dir string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}, testenv.BinaryEnv()...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{args: args, stdout: stdout.String(), stderr: stderr.String()}
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("run %s %v: %v", bin, args, err)
		}
		r.code = ee.ExitCode()
	}
	return r
}

// devCase records target with bin's pyrula dev in a new directory and
// returns the directory and the case file.
func devCase(t *testing.T, bin, target string, args ...string) (dir, file string) {
	t.Helper()
	dir = t.TempDir()
	r := runIn(t, bin, dir, append([]string{"dev", target}, args...)...)
	if r.code != 0 {
		t.Fatalf("dev %s\n%s", target, r)
	}
	return dir, filepath.Join(dir, ".pyrula", "last", target+".case")
}

// divergence is what the tests read of a divergence record.
type divergence struct {
	Seq                 int    `json:"seq"`
	Call                string `json:"call"`
	Tool                string `json:"tool"`
	RecordedFingerprint string `json:"recorded_fingerprint"`
	ActualFingerprint   string `json:"actual_fingerprint"`
	Role                string `json:"role"`
	CausedBy            string `json:"caused_by"`
	NoInput             string `json:"no_input"`
	Diff                *struct {
		Added, Removed, Changed []string
		Values                  map[string]struct {
			Recorded json.RawMessage `json:"recorded"`
			Actual   json.RawMessage `json:"actual"`
		} `json:"values"`
	} `json:"diff"`
	Model *struct {
		Parts      []string `json:"parts"`
		SystemDiff []string `json:"system_diff"`
		Messages   []string `json:"messages"`
		Model      *struct{ Recorded, Actual string }
	} `json:"model"`
}

// runLine is a call or outcome line of case run, as the tests read it.
type runLine struct {
	Type       string          `json:"type"`
	Kind       string          `json:"kind"`
	Key        string          `json:"key"`
	Provenance json.RawMessage `json:"provenance"` // a string on a call line, counts on the outcome
	Change     *divergence     `json:"change"`
	Status     string          `json:"status"`
	Code       string          `json:"code"`
	Message    string          `json:"message"`
	Divergence *divergence     `json:"divergence"`
	Cause      string          `json:"cause"`
	Changes    []struct {
		Call     string `json:"call"`
		Role     string `json:"role"`
		CausedBy string `json:"caused_by"`
	} `json:"changes"`
	ChangedAxes []string `json:"changed_axes"`
}

// runOutcome splits case run's lines into calls and the outcome.
func runOutcome(t *testing.T, r result) (calls []runLine, out runLine) {
	t.Helper()
	lines := decodeLines[runLine](t, r)
	if len(lines) == 0 || lines[len(lines)-1].Type != "outcome" {
		t.Fatalf("want an outcome line last\n%s", r)
	}
	return lines[:len(lines)-1], lines[len(lines)-1]
}

// A write step's input changed by the code, after the fork: the
// divergence names the call and the field added, with its value only under
// --values; case test says the same.
func TestDivergencePostForkField(t *testing.T) {
	t.Parallel()
	bin := divergeBinary(t)
	dir, file := devCase(t, bin, "charge")

	r := runIn(t, bin, dir, "case", "run", file, "--replay-only", "--target", "charge_v2")
	_, out := runOutcome(t, r)
	d := out.Divergence
	if r.code != 3 || out.Code != "replay_diverged" || d == nil || d.Call != "step:charge:0" || d.Role != "cause" ||
		d.Diff == nil || !slices.Equal(d.Diff.Added, []string{"$.currency"}) || len(d.Diff.Changed) != 0 || d.Diff.Values != nil ||
		!strings.Contains(out.Message, "step:charge:0: input fields added $.currency") ||
		out.Cause != "step:charge:0" || !slices.Equal(out.ChangedAxes, []string{"code_version"}) {
		t.Fatalf("want replay_diverged at step:charge:0 naming $.currency, without values\n%s", r)
	}

	r = runIn(t, bin, dir, "case", "run", file, "--replay-only", "--target", "charge_v2", "--values")
	_, out = runOutcome(t, r)
	if d := out.Divergence; d == nil || d.Diff == nil || string(d.Diff.Values["$.currency"].Actual) != `"EUR"` || d.Diff.Values["$.currency"].Recorded != nil {
		t.Fatalf("want the value of $.currency with --values\n%s", r)
	}

	r = runIn(t, bin, dir, "case", "test", filepath.Dir(file), "--target", "charge_v2")
	var line struct {
		Status     string      `json:"status"`
		Divergence *divergence `json:"divergence"`
	}
	if err := json.Unmarshal([]byte(strings.SplitN(r.stdout, "\n", 2)[0]), &line); err != nil || r.code != 3 ||
		line.Status != "fail" || line.Divergence == nil || line.Divergence.Diff == nil ||
		!slices.Equal(line.Divergence.Diff.Added, []string{"$.currency"}) {
		t.Fatalf("want case test to fail naming $.currency\n%s", r)
	}
}

// An edit of the system prompt: the model call's divergence says the
// system prompt changed, with a line diff, and the outcome says the prompt
// axis changed.
func TestDivergencePromptEdit(t *testing.T) {
	t.Parallel()
	bin := divergeBinary(t)
	dir, file := devCase(t, bin, "helpdesk")
	prompt := filepath.Join(dir, "prompt.txt")
	if err := os.WriteFile(prompt, []byte("You answer questions about orders.\nAlways apologise first.\nLook the order up before you answer."), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runIn(t, bin, dir, "case", "run", file, "--replay-only", "--prompt-file", prompt)
	_, out := runOutcome(t, r)
	d := out.Divergence
	if r.code != 3 || d == nil || d.Call != "model:0" || d.Model == nil || !slices.Equal(d.Model.Parts, []string{"system"}) ||
		!slices.Contains(d.Model.SystemDiff, "+Always apologise first.") || !slices.Contains(d.Model.SystemDiff, " You answer questions about orders.") ||
		slices.ContainsFunc(d.Model.SystemDiff, func(l string) bool { return strings.HasPrefix(l, "-") }) ||
		!strings.Contains(out.Message, "the system prompt changed (0 line(s) removed, 1 added)") ||
		!slices.Equal(out.ChangedAxes, []string{"prompt"}) {
		t.Fatalf("want model:0 diverging on its system prompt, one line added\n%s", r)
	}
}

// A tool call whose argument the code changed: the divergence names the
// tool and the argument's path.
func TestDivergenceToolArgument(t *testing.T) {
	t.Parallel()
	bin := divergeBinary(t)
	dir, file := devCase(t, bin, "helpdesk")
	r := runIn(t, bin, dir, "case", "run", file, "--replay-only", "--target", "helpdesk_v2")
	calls, out := runOutcome(t, r)
	d := out.Divergence
	if r.code != 3 || len(calls) != 1 || string(calls[0].Provenance) != `"reused"` || d == nil || d.Call != "tool:toolu_01" ||
		d.Tool != "lookup_order" || d.Diff == nil || !slices.Equal(d.Diff.Added, []string{"$.include_history"}) ||
		!strings.Contains(out.Message, "tool:toolu_01 (lookup_order): input fields added $.include_history") {
		t.Fatalf("want tool:toolu_01 (lookup_order) diverging on $.include_history\n%s", r)
	}
}

// One input changed in a what-if run: the first changed call is the
// cause, a later call whose changed input carries what the cause's result
// produced is consequent, one that changed on its own is independent; the
// same run twice prints the same bytes.
func TestDivergenceRipple(t *testing.T) {
	t.Parallel()
	dir, file := devCase(t, pyrula, "checkout")
	args := []string{"case", "run", file, "--input", "qty=5", "--allow-write", "step:reserve", "--allow-write", "step:child:0", "--run-id", "case_fixed"}
	r := runIn(t, pyrula, dir, args...)
	calls, out := runOutcome(t, r)
	if r.code != 0 {
		t.Fatalf("want the what-if run to complete\n%s", r)
	}
	roles := map[string]string{}
	for _, c := range calls {
		if string(c.Provenance) == `"changed"` {
			if c.Change == nil || c.Change.Diff == nil || !slices.Contains(c.Change.Diff.Changed, "$.qty") && c.Kind+":"+c.Key != "step:child:0" {
				t.Fatalf("changed call %s:%s lacks its change\n%s", c.Kind, c.Key, r)
			}
			roles[c.Kind+":"+c.Key] = c.Change.Role + " " + c.Change.CausedBy
		}
	}
	want := map[string]string{
		"step:quote:0":          "cause ",
		"step:reserve:0":        "independent ",
		"step:format_receipt:0": "consequent step:quote:0",
		"step:child:0":          "consequent step:format_receipt:0",
	}
	for id, w := range want {
		if roles[id] != w {
			t.Errorf("%s: role %q, want %q", id, roles[id], w)
		}
	}
	if out.Cause != "step:quote:0" || len(out.Changes) != 4 || out.Changes[2].Call != "step:format_receipt:0" ||
		out.Changes[2].Role != "consequent" || !slices.Equal(out.ChangedAxes, []string{"inputs"}) {
		t.Errorf("outcome: cause %q changes %+v axes %v", out.Cause, out.Changes, out.ChangedAxes)
	}
	again := runIn(t, pyrula, dir, args...)
	if again.stdout != r.stdout {
		t.Fatalf("the same case run twice printed different bytes\nfirst:  %s\nsecond: %s", r.stdout, again.stdout)
	}
}

// A case saved before results kept the inputs of calls after the fork
// still replays; when one of those calls diverges, the divergence names
// the call and says in words that the case keeps no input for it.
func TestDivergenceOldBundleWithoutInputs(t *testing.T) {
	t.Parallel()
	bin := divergeBinary(t)
	dir, file := devCase(t, bin, "charge")
	doc := exportJSON(t, bin, dir, file)
	for _, res := range doc["results"].([]any) {
		delete(res.(map[string]any), "input")
		delete(res.(map[string]any), "start_seq")
	}
	raw, _ := json.Marshal(doc)
	old := filepath.Join(dir, "old.json")
	if err := os.WriteFile(old, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runIn(t, bin, dir, "case", "run", old, "--replay-only"); r.code != 0 {
		t.Fatalf("want the old case to replay\n%s", r)
	}
	r := runIn(t, bin, dir, "case", "run", old, "--replay-only", "--target", "charge_v2")
	_, out := runOutcome(t, r)
	d := out.Divergence
	if r.code != 3 || d == nil || d.Call != "step:charge:0" || d.Diff != nil || !strings.Contains(d.NoInput, "keeps no input for this call") ||
		d.RecordedFingerprint == "" || d.ActualFingerprint == d.RecordedFingerprint || !strings.Contains(out.Message, "save the run again") {
		t.Fatalf("want the divergence to say that the case keeps no input\n%s", r)
	}
}

// case diff of a case recorded before and after a code change names the
// call, the input path added and its role.
func TestDivergenceCaseDiff(t *testing.T) {
	t.Parallel()
	bin := divergeBinary(t)
	dir, before := devCase(t, bin, "charge")
	_, after := devCase(t, bin, "charge_v2")
	r := runIn(t, bin, dir, "case", "diff", before, after)
	var changed []map[string]any
	for _, l := range decodeLines[map[string]any](t, r) {
		if l["type"] == "call" {
			changed = append(changed, l)
		}
	}
	if r.code != 4 || len(changed) != 1 || changed[0]["call"] != "step:charge:0" || changed[0]["role"] != "cause" ||
		!strings.Contains(r.stdout, `"input":{"added":["$.currency"]`) {
		t.Fatalf("want one changed call, step:charge:0, adding $.currency, as the cause\n%s", r)
	}
}
