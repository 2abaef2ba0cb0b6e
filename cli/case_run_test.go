package cli_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// caseLine is a call or outcome line of case run.
type caseLine struct {
	Type           string                             `json:"type"`
	Kind           string                             `json:"kind"`
	Key            string                             `json:"key"`
	Provenance     any                                `json:"provenance"`
	Status         string                             `json:"status"`
	Code           string                             `json:"code"`
	StopKey        *string                            `json:"stop_key"`
	StopToken      *string                            `json:"stop_token"`
	Reason         string                             `json:"reason"`
	UnconsumedKeys []string                           `json:"unconsumed_keys"`
	ChangedCalls   []string                           `json:"changed_calls"`
	LiveCalls      int                                `json:"live_calls"`
	CostUSD        float64                            `json:"cost_usd"`
	FixtureHash    string                             `json:"fixture_hash"`
	Result         json.RawMessage                    `json:"result"`
	CodeVersion    struct{ Recorded, Current string } `json:"code_version"`
}

// savedCase records a run of target and saves it after the call:done of
// call id, returning the case's hash.
func savedCase(t *testing.T, e *journalEnv, target, afterCall string) string {
	t.Helper()
	out := e.record(target)
	r := e.run("events", out.RunID)
	wantOK(t, r)
	var fork int64
	for _, ev := range decodeLines[event](t, r) {
		if ev.Kind == "call:done" && ev.Call != nil && ev.Call.Kind+":"+ev.Call.Key == afterCall {
			fork = ev.RunSeq
		}
	}
	if fork == 0 {
		t.Fatalf("no call:done of %s", afterCall)
	}
	r = e.run("case", "save", target, out.RunID, "--fork-after-seq", fmt.Sprint(fork))
	wantOK(t, r)
	var s saveOut
	decodeOne(t, r, &s)
	return s.FixtureHash
}

func outcomeOf(t *testing.T, r result) (calls []caseLine, out caseLine) {
	t.Helper()
	lines := decodeLines[caseLine](t, r)
	if len(lines) == 0 || lines[len(lines)-1].Type != "outcome" {
		t.Fatalf("no outcome line\n%s", r)
	}
	return lines[:len(lines)-1], lines[len(lines)-1]
}

func TestCaseRun(t *testing.T) {
	t.Parallel()
	e := newJournalEnv(t, false)
	h := savedCase(t, e, "checkout", "step:quote:0")

	// Replay-only pass.
	r := e.run("case", "run", h, "--replay-only")
	wantOK(t, r)
	calls, out := outcomeOf(t, r)
	if out.Status != "complete" || out.FixtureHash != h || len(out.UnconsumedKeys) != 0 || calls[0].Key != "reserve:0" ||
		calls[0].Provenance != "reused" || out.CodeVersion.Current != "examples/v1" || out.Result != nil {
		t.Fatalf("replay-only pass\n%s", r)
	}
	r = e.run("case", "run", h, "--replay-only", "--values", "--target", "checkout")
	wantOK(t, r)
	if _, out := outcomeOf(t, r); !strings.Contains(string(out.Result), "confirmed") {
		t.Fatalf("--values\n%s", r)
	}

	// An input that changes the prefix refuses with data.
	r = e.run("case", "run", h, "--input", "qty=5")
	wantRefusalData(t, r, "prefix_diverged", "$.qty")

	// An input after the prefix: reserve's input changes → a write.
	r = e.run("case", "run", h, "--input", `sku="SKU-7"`)
	if r.code != 2 {
		// quote is in the prefix and takes the sku: still a prefix change.
		t.Fatalf("sku change\n%s", r)
	}
	r = e.run("case", "run", h, "--input", `email="x@example.com"`)
	if r.code != 3 {
		t.Fatalf("email change without allow\n%s", r)
	}
	_, out = outcomeOf(t, r)
	if out.Code != "write_not_allowed" || *out.StopKey != "step:child:0" || *out.StopToken != "step:child:0" {
		t.Fatalf("write_not_allowed\n%s", r)
	}
	r = e.run("case", "run", h, "--input", `email="x@example.com"`, "--allow-write", "step:child:0")
	wantOK(t, r)
	if _, out = outcomeOf(t, r); fmt.Sprint(out.ChangedCalls) != "[step:child:0]" || out.LiveCalls != 1 {
		t.Fatalf("changed\n%s", r)
	}
	r = e.run("case", "run", h, "--input", `email="x@example.com"`, "--allow-write", "step:child:0", "--live-budget", "0")
	if _, out = outcomeOf(t, r); r.code != 3 || out.Code != "live_budget_exceeded" {
		t.Fatalf("budget\n%s", r)
	}
	// --replay-only with a changed input: replay_diverged input_changed.
	r = e.run("case", "run", h, "--replay-only", "--input", `email="x@example.com"`)
	if _, out = outcomeOf(t, r); r.code != 3 || out.Code != "replay_diverged" || out.Reason != "input_changed" {
		t.Fatalf("replay_diverged\n%s", r)
	}
	// --from-start: a new sku reruns quote live (changed) and reserve needs a token.
	r = e.run("case", "run", h, "--from-start", "--input", `sku="SKU-7"`, "--allow-write", "step:reserve", "--allow-write", "step:child:0")
	wantOK(t, r)
	if _, out = outcomeOf(t, r); !strings.Contains(fmt.Sprint(out.ChangedCalls), "step:quote:0") {
		t.Fatalf("from start\n%s", r)
	}

	// Supplied answers: a wrong shape is missing_context; a right one simulated.
	// The signal receive's input does not hold the payload: drop its
	// recorded result so that it needs an answer.
	noSignal := editedCase(t, e, h, "approval:0")
	r = e.run("case", "run", noSignal)
	if _, out = outcomeOf(t, r); r.code != 3 || out.Code != "missing_context" || *out.StopKey != "signal:approval:0" || out.StopToken != nil {
		t.Fatalf("no answer\n%s", r)
	}
	// A signal the run sends itself in the case run answers its receive.
	r = e.run("case", "run", noSignal, "--input", `approval="no"`, "--allow-write", "step:sigsend:0", "--values")
	wantOK(t, r)
	if calls, out = outcomeOf(t, r); len(calls) == 0 || calls[len(calls)-1].Key != "approval:0" ||
		calls[len(calls)-1].Provenance != "live" || !strings.Contains(string(out.Result), `"status":"rejected"`) {
		t.Fatalf("own signal\n%s", r)
	}
	bad := writeFile(t, "bad.json", []byte(`{"calls":{"step:child:0":{"message_id":"m"},"signal:approval:0":{"decision":"approved"}}}`))
	r = e.run("case", "run", noSignal, "--input", `approval="no"`, "--allow-write", "step:sigsend:0", "--supply", bad)
	if _, out = outcomeOf(t, r); r.code != 3 || out.Code != "missing_context" || *out.StopKey != "signal:approval:0" {
		t.Fatalf("wrong shape\n%s", r)
	}
	good := writeFile(t, "good.json", []byte(`{"calls":{"signal:approval:0":{"payload":{"decision":"no"}}}}`))
	r = e.run("case", "run", noSignal, "--input", `approval="no"`, "--allow-write", "step:sigsend:0", "--supply", good)
	wantOK(t, r)
	calls, _ = outcomeOf(t, r)
	var provs []string
	for _, c := range calls {
		provs = append(provs, c.Kind+":"+c.Key+"="+fmt.Sprint(c.Provenance))
	}
	if !strings.Contains(strings.Join(provs, " "), "signal:approval:0=simulated") ||
		!strings.Contains(strings.Join(provs, " "), "step:sigsend:0=changed") {
		t.Fatalf("simulated: %v\n%s", provs, r)
	}

	// Supply limits are invalid input.
	big := writeFile(t, "big.json", []byte(`{"calls":{"a:1":"`+strings.Repeat("x", 70000)+`"}}`))
	wantError(t, e.run("case", "run", h, "--supply", big), "at most")
	var sb strings.Builder
	sb.WriteString(`{"tools":{`)
	for i := range 201 {
		if i > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `"t%d":1`, i)
	}
	sb.WriteString("}}")
	wantError(t, e.run("case", "run", h, "--supply", writeFile(t, "many.json", []byte(sb.String()))), "at most 200")
	wantError(t, e.run("case", "run", h, "--llm-ref", "x:y"), `llm ref "x:y" names no model client`)
	wantError(t, e.run("case", "run", h, "--deps-ref", "x:y"), "--deps-ref x:y: this binary registers no dependency set")
	wantRefusal(t, e.run("case", "run", strings.Repeat("0", 64)), "bundle_missing")
	wantRefusal(t, e.run("case", "run", "nothex"), "invalid_fixture_hash")

	// A bundle file works as CASE.
	file := t.TempDir() + "/c.case"
	r = e.run("case", "export", h, "--out", file)
	if r.code != 0 {
		t.Fatalf("export\n%s", r)
	}
	r = e.run("case", "run", file, "--replay-only")
	wantOK(t, r)
	wantError(t, e.run("case", "run", "./missing.case"), "no bundle file")
}

func TestCaseRunAgentAndUnconsumed(t *testing.T) {
	t.Parallel()
	e := newJournalEnv(t, false)
	h := savedCase(t, e, "support_agent", "model:0")
	r := e.run("case", "run", h, "--replay-only")
	wantOK(t, r)
	// Another model: post-fork model calls run live (changed); the local
	// model gives the same tool-use ids, so the tool results are reused.
	// The agent's own (scripted) client answers them: a warning says so.
	r = e.run("case", "run", h, "--model", "local-support-2")
	if r.code != 0 || r.stderr != "warning: 3 live model call(s) were answered by support_agent's own model client, not a provider; name one with --llm-ref (anthropic, openai)\n" {
		t.Fatalf("--model without --llm-ref: want exit 0 and one warning\n%s", r)
	}
	if _, out := outcomeOf(t, r); fmt.Sprint(out.ChangedCalls) != "[model:1 model:2 model:3]" || out.LiveCalls != 3 {
		t.Fatalf("--model\n%s", r)
	}

	// Without the recorded refund the tool is a new write: refused without
	// tool:refund, answered by name from --supply tools, or live when allowed.
	edited := editedCase(t, e, h, "toolu_03")
	r = e.run("case", "run", edited)
	if _, out := outcomeOf(t, r); r.code != 3 || out.Code != "write_not_allowed" || *out.StopToken != "tool:refund" || *out.StopKey != "tool:toolu_03" {
		t.Fatalf("refund without allow\n%s", r)
	}
	sup := writeFile(t, "tools.json", []byte(`{"tools":{"refund":{"refund_id":"re_sim","status":"pending"}}}`))
	r = e.run("case", "run", edited, "--supply", sup)
	wantOK(t, r)
	if !strings.Contains(r.stdout, `"key":"toolu_03","effect":"write","fingerprint":`) || !strings.Contains(r.stdout, `"simulated":1`) {
		t.Fatalf("tools by name\n%s", r)
	}
	r = e.run("case", "run", edited, "--allow-write", "tool:refund")
	wantOK(t, r)
	// Cost ceiling: no price for the model.
	r = e.run("case", "run", h, "--model", "local-support-2", "--allow-write", "tool:refund", "--max-cost-usd", "1")
	if _, out := outcomeOf(t, r); r.code != 3 || out.Code != "live_budget_exceeded" {
		t.Fatalf("no price\n%s", r)
	}
	prices := writeFile(t, "p.json", []byte(`{"local-support-2":{"input_per_mtok":1,"output_per_mtok":1}}`))
	r = e.run("case", "run", h, "--model", "local-support-2", "--allow-write", "tool:refund", "--max-cost-usd", "1", "--prices", prices)
	if r.code != 0 || !strings.HasPrefix(r.stderr, "warning: 3 live model call(s)") {
		t.Fatalf("priced: want exit 0 and the own-client warning\n%s", r)
	}
	// A different message: the first model call (prefix) diverges.
	wantRefusalData(t, e.run("case", "run", h, "--input", `message="hello"`), "prefix_diverged", "$.messages[0].content")
	// From the start with a message without an order id, replay-only: the
	// recorded tool calls are never made.
	r = e.run("case", "run", h, "--from-start", "--replay-only", "--input", `message="hello"`)
	if _, out := outcomeOf(t, r); r.code != 3 || out.Code != "replay_diverged" {
		t.Fatalf("from start replay-only\n%s", r)
	}
}

// wantRefusalData checks a refusal with divergence data naming a path.
func wantRefusalData(t *testing.T, r result, code, path string) {
	t.Helper()
	if r.code != 2 || r.stderr != "" {
		t.Fatalf("want refusal %s\n%s", code, r)
	}
	var got struct {
		Code       string `json:"code"`
		Message    string `json:"message"`
		Divergence struct {
			Call                string
			RecordedFingerprint string `json:"recorded_fingerprint"`
			ActualFingerprint   string `json:"actual_fingerprint"`
			Diff                struct{ Added, Removed, Changed []string }
		} `json:"divergence"`
	}
	decodeOne(t, r, &got)
	d := got.Divergence
	if got.Code != code || got.Message == "" || d.Call == "" || d.RecordedFingerprint == d.ActualFingerprint ||
		!strings.Contains(fmt.Sprint(d.Diff.Changed, d.Diff.Added), path) {
		t.Fatalf("want %s naming %s\n%s", code, path, r)
	}
}

// editedCase exports case h as JSON without the result of key and returns
// the file's path.
func editedCase(t *testing.T, e *journalEnv, h, key string) string {
	t.Helper()
	file := t.TempDir() + "/a.json"
	if r := e.run("case", "export", h, "--out", file, "--json"); r.code != 0 {
		t.Fatalf("export\n%s", r)
	}
	var b map[string]any
	if err := json.Unmarshal(readFile(t, file), &b); err != nil {
		t.Fatal(err)
	}
	var keep []any
	for _, res := range b["results"].([]any) {
		if res.(map[string]any)["key"] != key {
			keep = append(keep, res)
		}
	}
	b["results"] = keep
	raw, _ := json.Marshal(b)
	return writeFile(t, "edited-"+strings.ReplaceAll(key, ":", "_")+".json", raw)
}

// TestCaseRunCosts: live model calls are priced from --prices, a prompt above
// a long-context tier's threshold is priced entirely at the tier's rates, and
// a cost ceiling stops the run with live_budget_exceeded.
func TestCaseRunCosts(t *testing.T) {
	t.Parallel()
	e := newJournalEnv(t, false)
	h := savedCase(t, e, "support_agent", "model:0")
	costOf := func(prices string, extra ...string) (caseLine, result) {
		t.Helper()
		f := writeFile(t, "prices.json", []byte(prices))
		args := append([]string{"case", "run", h, "--model", "local-support-2", "--allow-write", "tool:refund", "--prices", f}, extra...)
		r := e.run(args...)
		_, out := outcomeOf(t, r)
		return out, r
	}
	base, r := costOf(`{"local-support-2":{"input_per_mtok":1,"output_per_mtok":1}}`)
	if r.code != 0 || base.CostUSD <= 0 || base.LiveCalls != 3 {
		t.Fatalf("priced run\n%s", r)
	}
	// Every prompt is above 1 token: all three calls at the tier's rates (x1000).
	tier, r := costOf(`{"local-support-2":{"input_per_mtok":1,"output_per_mtok":1,"long_context":{"above_input_tokens":1,"input_per_mtok":1000,"output_per_mtok":1000}}}`)
	if r.code != 0 || tier.CostUSD < base.CostUSD*999 || tier.CostUSD > base.CostUSD*1001 {
		t.Fatalf("long-context tier: cost %v, base %v\n%s", tier.CostUSD, base.CostUSD, r)
	}
	// A ceiling below what the first call costs: the next live call stops.
	ceiling := fmt.Sprint(base.CostUSD / 10)
	stopped, r := costOf(`{"local-support-2":{"input_per_mtok":1,"output_per_mtok":1}}`, "--max-cost-usd", ceiling)
	if r.code != 3 || stopped.Code != "live_budget_exceeded" || stopped.LiveCalls >= 3 {
		t.Fatalf("cost ceiling %s\n%s", ceiling, r)
	}
}

// TestRecordedSamplesReplay is the replay check of the product page run on
// the sample cases in testdata/cases, every one recorded from the example
// targets: the current examples must make the same calls with the same
// inputs. A change to flow/examples that fails it needs the samples
// recorded again (docs/cli.md, "Sample cases").
func TestRecordedSamplesReplay(t *testing.T) {
	t.Parallel()
	r := run(t, invocation{args: []string{"case", "test", filepath.Join("..", "testdata", "cases")}})
	wantOK(t, r)
	lines := decodeLines[struct {
		Type   string `json:"type"`
		Status string `json:"status"`
		Calls  int    `json:"calls"`
		Cases  int    `json:"cases"`
		Passed int    `json:"passed"`
	}](t, r)
	if sum := lines[len(lines)-1]; sum.Type != "summary" || sum.Cases != 4 || sum.Passed != 4 {
		t.Fatalf("want the 4 sample cases to pass\n%s", r)
	}
}
