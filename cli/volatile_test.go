package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/cli"
	"github.com/pyrula/caseworker/flow"
)

// The volatile-field tests drive the CLI's entry point (cli.Options.Main,
// what a user's own pyrula binary runs) over their own targets: `pyrula
// dev` records a run and keeps it as a .case, and `pyrula case run` of that
// file replays it, as a CI check of a user's module does.

type volQuoteIn struct {
	SKU       string `json:"sku"`
	RequestID string `json:"request_id"`
	Meta      struct {
		TS string `json:"ts"`
	} `json:"meta"`
}

type volReserveIn struct {
	SKU       string `json:"sku"`
	Qty       int    `json:"qty"`
	RequestID string `json:"request_id"`
}

type volInputs struct {
	SKU       string `json:"sku"`
	Qty       int    `json:"qty"`
	RequestID string `json:"request_id"`
	TS        string `json:"ts"`
}

// volOrder registers the workflow "order": quote (read) then reserve
// (write). With rules, quote's request_id and meta.ts and reserve's
// request_id are volatile.
func volOrder(rules bool) func(*flow.Registry) error {
	return func(reg *flow.Registry) error {
		quote := flow.DefineStep("quote", flow.Read, func(_ context.Context, in volQuoteIn) (int, error) { return 250, nil })
		reserve := flow.DefineStep("reserve", flow.Write, func(_ context.Context, in volReserveIn) (string, error) {
			return "res-" + in.SKU, nil
		})
		if rules {
			quote = quote.Volatile("request_id", "meta.ts")
			reserve = reserve.Volatile("request_id")
		}
		return flow.RegisterWorkflow(reg, flow.Workflow[volInputs, string]{
			Name: "order", CodeVersion: "shop/v1",
			Defaults: volInputs{SKU: "SKU-42", Qty: 1, RequestID: "req-1", TS: "2026-12-01T10:00:00Z"},
			Steps:    []flow.Decl{quote, reserve},
			Run: func(ctx context.Context, in volInputs) (string, error) {
				q := volQuoteIn{SKU: in.SKU, RequestID: in.RequestID}
				q.Meta.TS = in.TS
				price, err := quote.Call(ctx, q)
				if err != nil {
					return "", err
				}
				id, err := reserve.Call(ctx, volReserveIn{SKU: in.SKU, Qty: in.Qty, RequestID: in.RequestID})
				return fmt.Sprintf("%s:%d", id, price*in.Qty), err
			},
		})
	}
}

// volAgent registers the agent "tracker", whose prompt holds a date line;
// with a pattern, the line does not count in its model calls.
func volAgent(patterns ...string) func(*flow.Registry) error {
	return func(reg *flow.Registry) error {
		lookup := flow.NewTool("lookup", "looks up an order", func(_ context.Context, in map[string]string) (string, error) {
			return "order " + in["order"] + " shipped", nil
		}).ReadOnly()
		model := flow.ModelClientFunc(func(_ context.Context, req flow.ModelRequest) (flow.ModelResponse, error) {
			if len(req.Messages) == 1 {
				return flow.ModelResponse{Role: "assistant", Content: []flow.Block{
					flow.ToolUseBlock("toolu_01", "lookup", map[string]string{"order": "42"})}}, nil
			}
			return flow.ModelResponse{Role: "assistant", Content: []flow.Block{flow.TextBlock("It shipped.")}}, nil
		})
		return flow.RegisterAgent(reg, flow.Agent[map[string]string, string]{
			Name: "tracker", CodeVersion: "shop/v1", Model: "m-1", Client: model,
			System:         "You track orders.",
			VolatilePrompt: patterns,
			Defaults:       map[string]string{"today": "2026-12-01", "question": "Where is order 42?"},
			Tools:          []flow.ToolDef{lookup},
			Run: func(ctx context.Context, in map[string]string) (string, error) {
				msgs := []flow.Message{flow.UserText("Today is " + in["today"] + ".\n" + in["question"])}
				for {
					resp, err := flow.Model(ctx, flow.ModelRequest{System: "You track orders.\nToday is " + in["today"] + ".", Messages: msgs})
					if err != nil || len(resp.ToolUses()) == 0 {
						return resp.Text(), err
					}
					res, err := flow.RunTools(ctx, resp)
					if err != nil {
						return "", err
					}
					msgs = append(msgs, resp.Message(), res)
				}
			},
		})
	}
}

// volRun runs the command tree over register's targets, with no server:
// the Valkey URL names a closed port and no fixture store is set.
func volRun(t *testing.T, register func(*flow.Registry) error, args ...string) result {
	t.Helper()
	getenv := func(k string) string {
		if k == "PYRULA_VALKEY_URL" {
			return "redis://127.0.0.1:1/0"
		}
		return ""
	}
	var stdout, stderr bytes.Buffer
	code := cli.Options{Register: register}.Main(context.Background(), args, getenv, nil, &stdout, &stderr)
	return result{args: args, code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// volCase records target with `pyrula dev` and returns the kept .case. A
// non-empty forkAfter ("step:quote:0") forks after that call's call:done;
// else the case forks after run:start, so every call is post-fork.
func volCase(t *testing.T, register func(*flow.Registry) error, target, forkAfter string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "last")
	r := volRun(t, register, "dev", target, "--dir", dir)
	if r.code != 0 {
		t.Fatalf("dev\n%s", r)
	}
	if forkAfter == "" {
		return filepath.Join(dir, target+".case")
	}
	var fork int64
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var ev event
		if json.Unmarshal([]byte(l), &ev) == nil && ev.Kind == "call:done" && ev.Call != nil && ev.Call.Kind+":"+ev.Call.Key == forkAfter {
			fork = ev.RunSeq
		}
	}
	if fork == 0 {
		t.Fatalf("no call:done of %s\n%s", forkAfter, r)
	}
	dir2 := filepath.Join(t.TempDir(), "forked")
	if r := volRun(t, register, "dev", target, "--dir", dir2, "--fork-after-seq", fmt.Sprint(fork)); r.code != 0 {
		t.Fatalf("dev --fork-after-seq\n%s", r)
	}
	return filepath.Join(dir2, target+".case")
}

// volLines splits case run's output into its call lines and its outcome.
type volLine struct {
	Type        string         `json:"type"`
	Kind        string         `json:"kind"`
	Key         string         `json:"key"`
	Provenance  any            `json:"provenance"`
	Status      string         `json:"status"`
	Code        string         `json:"code"`
	Message     string         `json:"message"`
	Reason      string         `json:"reason"`
	PrefixCalls int            `json:"prefix_calls"`
	Divergence  *volDivergence `json:"divergence"`
}

type volDivergence struct {
	Call                string `json:"call"`
	RecordedFingerprint string `json:"recorded_fingerprint"`
	ActualFingerprint   string `json:"actual_fingerprint"`
	Diff                *struct {
		Added, Removed, Changed []string
		Ignored                 []string `json:"ignored"`
	} `json:"diff"`
	RulesChanged *struct {
		Recorded struct{ Fields, Prompt []string } `json:"recorded"`
		Current  struct{ Fields, Prompt []string } `json:"current"`
	} `json:"rules_changed"`
}

func volLines(t *testing.T, r result) (calls []volLine, last volLine) {
	t.Helper()
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var v volLine
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("line %q: %v\n%s", l, err, r)
		}
		calls = append(calls, v)
	}
	if len(calls) == 0 {
		t.Fatalf("no output\n%s", r)
	}
	return calls[:len(calls)-1], calls[len(calls)-1]
}

// wantReused checks a replay-only pass: exit 0, every call line reused.
func wantReused(t *testing.T, r result, lines, prefix int) {
	t.Helper()
	calls, out := volLines(t, r)
	if r.code != 0 || r.stderr != "" || out.Status != "complete" || len(calls) != lines || out.PrefixCalls != prefix {
		t.Fatalf("want a pass with %d call lines after %d prefix calls\n%s", lines, prefix, r)
	}
	for _, c := range calls {
		if c.Provenance != "reused" {
			t.Fatalf("%s:%s is %v, want reused\n%s", c.Kind, c.Key, c.Provenance, r)
		}
	}
	if p, _ := out.Provenance.(map[string]any); p["reused"] != float64(lines) {
		t.Fatalf("outcome provenance %v\n%s", out.Provenance, r)
	}
}

// registration returns the registration a .case file recorded.
func registration(t *testing.T, file string) bundle.Registration {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := bundle.Read(f, bundle.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c.Manifest().Registration
}

func TestVolatileFieldKeepsThePrefix(t *testing.T) {
	t.Parallel()
	code := volOrder(true)
	all := volCase(t, code, "order", "")
	forked := volCase(t, code, "order", "step:quote:0")
	if v := registration(t, forked).Volatile; v == nil || fmt.Sprint(v.Steps) != "map[quote:[meta.ts request_id] reserve:[request_id]]" {
		t.Fatalf("recorded rules %+v", v)
	}
	changed := []string{"--input", `request_id="req-2"`, "--input", `ts="2027-01-01T00:00:00Z"`}

	// Every call post-fork: both answered by the recording.
	wantReused(t, volRun(t, code, append([]string{"case", "run", all, "--replay-only"}, changed...)...), 2, 0)
	// quote in the prefix: verified, reserve reused.
	wantReused(t, volRun(t, code, append([]string{"case", "run", forked, "--replay-only"}, changed...)...), 1, 1)
	// Without --replay-only as well: reused, nothing live.
	wantReused(t, volRun(t, code, append([]string{"case", "run", forked}, changed...)...), 1, 1)

	// A change that counts still diverges, with the volatile field apart.
	r := volRun(t, code, "case", "run", forked, "--replay-only", "--input", `sku="SKU-7"`, "--input", `request_id="req-2"`)
	_, out := volLines(t, r)
	d := out.Divergence
	if r.code != 2 || out.Code != "prefix_diverged" || d == nil || d.Call != "step:quote:0" || d.Diff == nil ||
		fmt.Sprint(d.Diff.Changed) != "[$.sku]" || fmt.Sprint(d.Diff.Ignored) != "[$.request_id]" || d.RulesChanged != nil ||
		d.ActualFingerprint == d.RecordedFingerprint || !strings.Contains(out.Message, "ignored as volatile $.request_id") {
		t.Fatalf("want prefix_diverged on $.sku with $.request_id ignored\n%s", r)
	}
	// Post-fork, replay-only: replay_diverged input_changed on reserve.
	r = volRun(t, code, "case", "run", forked, "--replay-only", "--input", "qty=3", "--input", `request_id="req-2"`)
	_, out = volLines(t, r)
	if r.code != 3 || out.Code != "replay_diverged" || out.Reason != "input_changed" || out.Divergence == nil || out.Divergence.Call != "step:reserve:0" {
		t.Fatalf("want replay_diverged on reserve\n%s", r)
	}
}

func TestVolatileRulesChanged(t *testing.T) {
	t.Parallel()
	withRules, without := volOrder(true), volOrder(false)

	// A case recorded before the rules (none in its registration) replays
	// exactly as before under code that declares them: the same inputs
	// pass, verified under the recorded (no) rules.
	old := volCase(t, without, "order", "step:quote:0")
	if v := registration(t, old).Volatile; v != nil {
		t.Fatalf("a registration without rules recorded %+v", v)
	}
	wantReused(t, volRun(t, withRules, "case", "run", old, "--replay-only"), 1, 1)

	// A volatile field changed: the recording's rules count it, and the
	// divergence says the rules changed rather than only the fingerprints.
	r := volRun(t, withRules, "case", "run", old, "--replay-only", "--input", `request_id="req-2"`)
	_, out := volLines(t, r)
	d := out.Divergence
	if r.code != 2 || out.Code != "prefix_diverged" || d == nil || d.RulesChanged == nil ||
		fmt.Sprint(d.RulesChanged.Recorded.Fields, d.RulesChanged.Recorded.Prompt) != "[] []" ||
		fmt.Sprint(d.RulesChanged.Current.Fields) != "[meta.ts request_id]" ||
		d.Diff == nil || fmt.Sprint(d.Diff.Changed) != "[$.request_id]" || len(d.Diff.Ignored) != 0 ||
		!strings.Contains(out.Message, "volatile-field rules changed since the recording (recorded none, the code declares fields [\"meta.ts\" \"request_id\"])") {
		t.Fatalf("want prefix_diverged with rules_changed\n%s", r)
	}
	if !strings.Contains(r.stdout, `"rules_changed":{"recorded":{"fields":[],"prompt":[]},"current":{"fields":["meta.ts","request_id"],"prompt":[]}}`) {
		t.Fatalf("rules_changed JSON\n%s", r)
	}

	// A case recorded with rules verifies under them on code that dropped
	// them: the recording says which fields count.
	recorded := volCase(t, withRules, "order", "step:quote:0")
	wantReused(t, volRun(t, without, "case", "run", recorded, "--replay-only", "--input", `request_id="req-2"`), 1, 1)
	// A change that counts names both rule sets.
	r = volRun(t, without, "case", "run", recorded, "--replay-only", "--input", `sku="SKU-7"`, "--input", `request_id="req-2"`)
	_, out = volLines(t, r)
	if d := out.Divergence; r.code != 2 || d == nil || d.RulesChanged == nil || fmt.Sprint(d.RulesChanged.Recorded.Fields) != "[meta.ts request_id]" ||
		fmt.Sprint(d.Diff.Changed, d.Diff.Ignored) != "[$.sku] [$.request_id]" {
		t.Fatalf("want prefix_diverged under the recorded rules\n%s", r)
	}
}

func TestVolatilePromptDateLine(t *testing.T) {
	t.Parallel()
	code := volAgent(`(?m)^Today is .*$`)
	all := volCase(t, code, "tracker", "")
	forked := volCase(t, code, "tracker", "model:0")
	if v := registration(t, forked).Volatile; v == nil || fmt.Sprint(v.Prompt) != "[(?m)^Today is .*$]" {
		t.Fatalf("recorded rules %+v", v)
	}
	today := []string{"--input", `today="2027-02-03"`}
	// model:0, tool:toolu_01, model:1 post-fork; then model:0 in the prefix.
	wantReused(t, volRun(t, code, append([]string{"case", "run", all, "--replay-only"}, today...)...), 3, 0)
	wantReused(t, volRun(t, code, append([]string{"case", "run", forked, "--replay-only"}, today...)...), 2, 1)

	// The question is not masked: it diverges, the date line apart.
	r := volRun(t, code, "case", "run", forked, "--replay-only", "--input", `today="2027-02-03"`, "--input", `question="Where is order 43?"`)
	_, out := volLines(t, r)
	d := out.Divergence
	if r.code != 2 || out.Code != "prefix_diverged" || d == nil || d.Call != "model:0" || d.Diff == nil ||
		fmt.Sprint(d.Diff.Changed) != "[$.messages[0].content]" || fmt.Sprint(d.Diff.Ignored) != "[$.system]" {
		t.Fatalf("want prefix_diverged on the question with the date line ignored\n%s", r)
	}

	// Without the pattern the date line counts.
	plain := volAgent()
	r = volRun(t, plain, "case", "run", volCase(t, plain, "tracker", "model:0"), "--replay-only", "--input", `today="2027-02-03"`)
	if _, out := volLines(t, r); r.code != 2 || out.Code != "prefix_diverged" {
		t.Fatalf("want prefix_diverged without the pattern\n%s", r)
	}
}
