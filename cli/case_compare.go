package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/cli/internal/htmlreport"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/internal/redact"
	"github.com/pyrula/caseworker/llm/resolve"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/replay"
)

// caseCompareFlags are the flags of `case compare`: those it shares with
// case run, and the arms' models and prompt files.
type caseCompareFlags struct {
	caseRunFlags
	models, prompts []string
	// assert is --assert FILE: assertions every arm's answer must hold.
	assert string
}

// compareArm is one arm of a comparison: a case run of the same case with
// its own model and system prompt.
type compareArm struct {
	model, promptFile string // empty: the agent's own
	system            string // the prompt file's text
	report            replay.Report
	calls             []callRec
	// timeline is the arm's calls for the --html report, its changes
	// without values unless --values.
	timeline []htmlreport.Call
}

// armLine is the {"type":"arm"} line of one arm.
type armLine struct {
	Type       string         `json:"type"`
	Arm        int            `json:"arm"`
	Model      *string        `json:"model"`
	PromptFile *string        `json:"prompt_file"`
	Outcome    replay.Outcome `json:"outcome"`
}

// comparisonLine is the last line of case compare.
type comparisonLine struct {
	Type        string `json:"type"`
	FixtureHash string `json:"fixture_hash"`
	// SameStatus: every arm ended with the same status and code.
	SameStatus bool `json:"same_status"`
	// SameResult: every arm completed with the same result.
	SameResult bool `json:"same_result"`
	// SameCalls: every arm made the same calls with the same fingerprints
	// and outcomes as the first.
	SameCalls bool         `json:"same_calls"`
	Arms      []armSummary `json:"arms"`
}

// armSummary is one arm in the comparison line.
type armSummary struct {
	Arm            int        `json:"arm"`
	Model          *string    `json:"model"`
	PromptFile     *string    `json:"prompt_file"`
	Status         string     `json:"status"`
	Code           *string    `json:"code"`
	LiveCalls      int        `json:"live_calls"`
	CostUSD        replay.USD `json:"cost_usd"`
	CostObservable bool       `json:"cost_observable"`
	// VsFirst compares the arm with the first arm (null for the first).
	VsFirst *armDiff `json:"vs_first"`
	// VsRecording compares the arm's calls with the recorded ones.
	VsRecording armDiff `json:"vs_recording"`
	// Assertions are the --assert assertions on this arm (absent without
	// --assert).
	Assertions []assertionResult `json:"assertions,omitempty"`
}

// armDiff is how an arm differs from the first arm or the recording.
type armDiff struct {
	// SameResult (vs_first only): both arms completed with equal results.
	SameResult *bool `json:"same_result,omitempty"`
	// Result (vs_first only) is the JSON-path diff of the two results,
	// when both arms have one.
	Result  *fieldDiff   `json:"result,omitempty"`
	Calls   callCounts   `json:"calls"`
	Changes []callChange `json:"changes"`
}

// caseCompareCmd is `case compare CASE --model A --model B [--prompt-file F]… …`.
func (a *app) caseCompareCmd() *cobra.Command {
	var f caseCompareFlags
	c := &cobra.Command{
		Use:   "compare CASE (--model M | --prompt-file F)…",
		Short: "Run one case once per arm (model or prompt) from the same fork and compare the runs",
		Long: `Runs CASE (a fixture hash in the store or a bundle file) once per arm, each
a case run of an agent from the same fork with its own --model and/or
--prompt-file, within the same --live-budget and --max-cost-usd (each arm
has its own budget and ceiling), on the model client --llm-ref names.
Arms: give --model, --prompt-file or both two times or more; a flag given
once applies to every arm; given N times (N ≥ 2) each makes one arm, and
when both are given N times the i-th of each make arm i.

Prints one {"type":"arm"} line per arm (its case run's outcome line) and
one {"type":"comparison"} line: whether status, result and calls are the
same across arms, and per arm its status, live calls and cost, the
JSON-path diff of its result and its calls against the first arm, and its
calls against the recording. Values only with --values (which warns on
stderr: bundles hold unredacted data). --format table prints the same for
people: the arms side by side, each arm's changes against the first arm
and against the recording, and the verdict.

--assert FILE checks every arm's answer and spend against the assertions
FILE holds (a JSON array, each a run_suite arm's assertion: {path, equals},
{path, contains}, {path, matches}, {max_cost_usd} or {max_live_calls});
each arm's results are on the comparison line ("assertions").

Exit 0 when every arm completed (whether or not they differ) and every
assertion held; 3 when an arm stopped, failed or was refused, or an
assertion did not hold; 2 a refusal before any arm ran; 1 invalid input.`,
		Args: exactArgs("CASE"),
	}
	c.RunE = a.run(func(ctx context.Context, args []string) error {
		return a.caseCompare(ctx, c, args[0], f)
	})
	f.addLadderFlags(c)
	fl := c.Flags()
	fl.StringArrayVar(&f.models, "model", nil, "an arm's model (repeatable: one arm each)")
	fl.StringArrayVar(&f.prompts, "prompt-file", nil, "an arm's system prompt file (repeatable: one arm each)")
	fl.BoolVar(&f.values, "values", false, "include results and the values of what differs")
	fl.StringVar(&f.assert, "assert", "", "a JSON file of assertions every arm's answer must hold (as a run_suite arm's assert)")
	return c
}

func (a *app) caseCompare(ctx context.Context, c *cobra.Command, arg string, f caseCompareFlags) error {
	if err := checkFormat("case compare", f.format); err != nil {
		return err
	}
	if err := checkHTMLPath("case compare", f.html); err != nil {
		return err
	}
	arms, err := compareArms(f.models, f.prompts)
	if err != nil {
		return err
	}
	asserts, err := readAssertions("case compare", f.assert)
	if err != nil {
		return err
	}
	var shared replay.Options
	if err := f.ladderOptions(c, "case compare", &shared); err != nil {
		return err
	}
	for i := range arms {
		if arms[i].promptFile == "" {
			continue
		}
		data, err := os.ReadFile(arms[i].promptFile)
		if err != nil {
			return fmt.Errorf("case compare: --prompt-file: %w", err)
		}
		arms[i].system = string(data)
	}
	cb, err := a.loadCase(ctx, "case compare", arg)
	if err != nil {
		return err
	}
	b, err := cb.Decode()
	if err != nil {
		return fmt.Errorf("case compare: %w", err)
	}
	target := f.target
	if target == "" {
		target = b.Manifest.TargetName
	}
	reg := a.registry()
	info, err := a.lookupTarget("case compare", target)
	if err != nil {
		return err
	}
	target = info.Name
	if info.Kind != bundle.KindAgent {
		return fmt.Errorf("case compare: arms vary the model and the prompt, which apply to agents; %s is a %s", target, info.Kind)
	}
	if err := replay.CheckOptions(shared, info, b); err != nil {
		return fmt.Errorf("case compare: %s", flagWords(err, f.supply))
	}
	var models []flow.ModelClient
	for range arms {
		var m flow.ModelClient
		if f.llmRef != "" {
			if m, err = a.modelClient(f.llmRef); err != nil {
				return fmt.Errorf("case compare: --llm-ref: %w", err)
			}
		}
		models = append(models, m)
	}

	runCtx, stop := cancelOnInterrupt(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make([]error, len(arms))
	for i := range arms {
		wg.Go(func() {
			errs[i] = a.runArm(runCtx, &arms[i], b, cb.Hash(), target, shared, models[i], f.llmRef, f.values)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("case compare: arm %d: %w", i+1, err)
		}
	}

	if f.values {
		a.warnUnredacted("the output of case compare --values")
	}
	table := f.format == formatTable
	liveModels := 0
	lines := make([]armLine, len(arms))
	for i, arm := range arms {
		out := arm.report.Outcome
		if !f.values {
			out.Result = nil
		}
		for _, line := range arm.report.Calls {
			if line.Kind == string(host.KindModel) && (line.Provenance == replay.ProvLive || line.Provenance == replay.ProvChanged) {
				liveModels++
			}
		}
		lines[i] = armLine{Type: "arm", Arm: i + 1, Model: nonEmpty(arm.model), PromptFile: nonEmpty(arm.promptFile), Outcome: out}
		if table {
			continue
		}
		if err := a.emit(lines[i]); err != nil {
			return err
		}
	}
	if liveModels > 0 && f.llmRef == "" {
		fmt.Fprintf(a.stderr, "warning: %d live model call(s) were answered by %s's own model client, not a provider; name one with --llm-ref (%s)\n",
			liveModels, target, strings.Join(resolve.Names(reg), ", "))
	}
	cmpLine := compareRuns(arms, bundleCalls(b), string(cb.Hash()), f.values)
	held := judgeArms(arms, &cmpLine, asserts)
	if f.html != "" {
		title := fmt.Sprintf("%s case compare %s", a.name(), arg)
		if err := writeReport(f.html, compareReport(title, f.values, arms, lines, cmpLine)); err != nil {
			return fmt.Errorf("case compare: --html: %w", err)
		}
	}
	if table {
		if err := writeCompareTable(a.stdout, arms, cmpLine); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
		if len(asserts) > 0 {
			writeAssertions(a.stdout, cmpLine)
		}
	} else if err := a.emit(cmpLine); err != nil {
		return err
	}
	for _, arm := range arms {
		if arm.report.ExitStatus() != messages.ExitOK {
			return exitStatus(messages.ExitRunFailed)
		}
	}
	if !held {
		return exitStatus(messages.ExitRunFailed)
	}
	return nil
}

// compareArms builds the arms from the repeated flags (see the command's
// help).
func compareArms(models, prompts []string) ([]compareArm, error) {
	n := max(len(models), len(prompts))
	if n < 2 {
		return nil, fmt.Errorf("case compare: give two arms or more: --model or --prompt-file two times or more (got %d --model, %d --prompt-file)", len(models), len(prompts))
	}
	if len(models) > 1 && len(prompts) > 1 && len(models) != len(prompts) {
		return nil, fmt.Errorf("case compare: %d --model and %d --prompt-file: give each once (for every arm) or once per arm", len(models), len(prompts))
	}
	pick := func(list []string, i int) string {
		switch len(list) {
		case 0:
			return ""
		case 1:
			return list[0]
		}
		return list[i]
	}
	arms := make([]compareArm, n)
	for i := range arms {
		arms[i].model, arms[i].promptFile = pick(models, i), pick(prompts, i)
	}
	return arms, nil
}

// runArm case-runs one arm in its own in-memory journal and keeps its
// report and calls.
func (a *app) runArm(ctx context.Context, arm *compareArm, b *bundle.Bundle, h bundle.Hash, target string, shared replay.Options, models flow.ModelClient, llmRef string, values bool) error {
	memLog := host.NewMemLog()
	p := replay.Params{Bundle: b, Canonical: true, FixtureHash: string(h), Registry: a.registry(), Log: memLog,
		Target: target, RunID: "case_" + strings.TrimPrefix(newRunID(), "run_"), Options: shared}
	if p.LiveBudget != nil {
		budget := *p.LiveBudget
		p.LiveBudget = &budget
	}
	if p.MaxCostUSD != nil {
		ceiling := *p.MaxCostUSD
		p.MaxCostUSD = &ceiling
	}
	p.Model, p.System = arm.model, arm.system
	p.Values = true // results are compared; printed only with --values
	if models != nil {
		p.Models, p.LLMRef = models, llmRef
	}
	rep, err := replay.Run(ctx, p)
	if err != nil {
		return err
	}
	arm.report = rep
	arm.calls = runCalls(memLog.Events(p.RunID), memLog.Results(p.RunID))
	arm.timeline = timeline(memLog, p.RunID, rep.Calls, rep.Outcome, values)
	if !values {
		// The arm ran with values to compare results; its lines hold none.
		rep.Outcome.Divergence = valuesIf(rep.Outcome.Divergence, false)
		for i := range rep.Calls {
			rep.Calls[i].Change = valuesIf(rep.Calls[i].Change, false)
			rep.Calls[i].Result, rep.Calls[i].Error = nil, nil
		}
		arm.report = rep
	}
	return nil
}

// compareRuns builds the comparison line.
func compareRuns(arms []compareArm, recorded []callRec, hash string, values bool) comparisonLine {
	line := comparisonLine{Type: "comparison", FixtureHash: hash, SameStatus: true, SameResult: true, SameCalls: true}
	first := arms[0].report.Outcome
	for i, arm := range arms {
		o := arm.report.Outcome
		s := armSummary{Arm: i + 1, Model: nonEmpty(arm.model), PromptFile: nonEmpty(arm.promptFile),
			Status: string(o.Status), Code: nonEmpty(o.Code), LiveCalls: o.LiveCalls, CostUSD: o.CostUSD, CostObservable: o.CostObservable}
		changes, counts := diffCalls(recorded, arm.calls, values)
		s.VsRecording = armDiff{Calls: counts, Changes: changes}
		if o.Result == nil {
			line.SameResult = false
		}
		if i > 0 {
			changes, counts := diffCalls(arms[0].calls, arm.calls, values)
			vs := &armDiff{Calls: counts, Changes: changes}
			same := first.Result != nil && o.Result != nil && sameJSON(first.Result, o.Result)
			vs.SameResult = &same
			vs.Result = diffFields(first.Result, o.Result, values)
			s.VsFirst = vs
			line.SameStatus = line.SameStatus && o.Status == first.Status && o.Code == first.Code
			line.SameResult = line.SameResult && same
			line.SameCalls = line.SameCalls && len(changes) == 0
		}
		line.Arms = append(line.Arms, s)
	}
	return line
}

// sameJSON says that two JSON values are equal field by field.
func sameJSON(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	d := diffFields(a, b, false)
	return d != nil && d.empty()
}

// nonEmpty is &s, or nil when s is empty.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// writeCompareTable writes case compare's lines as a table for people: the
// arms side by side (model, prompt file, status, code, live calls, tool
// calls made, cost, whether the result is arm 1's), then per arm how it
// stopped, its calls against arm 1 and against the recording (a row per
// call that differs, describeChange, with the values under it with
// --values) and its divergence's detail, then the verdict.
func writeCompareTable(w io.Writer, arms []compareArm, line comparisonLine) error {
	t := newTable()
	rows := [][]string{{"ARM"}, {"model"}, {"prompt file"}, {"status"}, {"code"}, {"live calls"}, {"tool calls"}, {"cost"}, {"same result as arm 1"}}
	for i, arm := range arms {
		o, s := arm.report.Outcome, line.Arms[i]
		cost := usdText(o.CostUSD)
		if !o.CostObservable {
			cost += " (not observable)"
		}
		same := "-"
		if s.VsFirst != nil && s.VsFirst.SameResult != nil {
			same = yesNo(*s.VsFirst.SameResult)
		}
		for r, v := range []string{strconv.Itoa(i + 1), cell(arm.model), cell(arm.promptFile), string(o.Status), cell(o.Code),
			strconv.Itoa(o.LiveCalls), strconv.Itoa(toolCalls(arm.report.Calls)), cost, same} {
			rows[r] = append(rows[r], v)
		}
	}
	for _, r := range rows {
		t.row(r...)
	}
	if err := t.writeTo(w); err != nil {
		return err
	}
	for i, arm := range arms {
		o, s := arm.report.Outcome, line.Arms[i]
		fmt.Fprintln(w)
		fmt.Fprintf(w, "arm %d:\n", i+1)
		if o.Code != "" {
			field(w, "  ", "stopped", o.Code+": "+redact.Secrets(oneLine(o.Message)))
		}
		if vs := s.VsFirst; vs != nil {
			what := countsText(vs.Calls)
			switch {
			case vs.SameResult != nil && *vs.SameResult:
				what += "; the same result"
			case !vs.Result.empty():
				what += "; result" + pathsText(vs.Result)
			default:
				what += "; not the same result"
			}
			field(w, "  ", "vs arm 1", what)
			if err := writeChanges(w, vs.Changes); err != nil {
				return err
			}
		}
		field(w, "  ", "vs recording", countsText(s.VsRecording.Calls))
		if err := writeChanges(w, s.VsRecording.Changes); err != nil {
			return err
		}
		if o.Divergence != nil {
			field(w, "  ", "divergence")
			writeDivergence(w, o.Divergence, "    ")
		}
	}
	fmt.Fprintln(w)
	_, err := fmt.Fprintf(w, "same status: %s; same result: %s; same calls: %s\n", yesNo(line.SameStatus), yesNo(line.SameResult), yesNo(line.SameCalls))
	return err
}

// writeChanges writes a row per call that differs (CALL, CHANGE), indented
// under an arm, with the values at each path under its row (--values).
func writeChanges(w io.Writer, changes []callChange) error {
	if len(changes) == 0 {
		return nil
	}
	t := newTable()
	t.row("    CALL", "CHANGE")
	for _, c := range changes {
		t.row("    "+cell(c.Call), cell(describeChange(c)))
		for _, d := range []*fieldDiff{c.Input, c.Result, c.Error} {
			if d == nil {
				continue
			}
			for _, p := range diffPaths(d) {
				if v, ok := d.Values[p]; ok {
					t.row("      "+cell(p), rawText(v.A)+" → "+rawText(v.B))
				}
			}
		}
		if c.Value != nil {
			t.row("      value", rawText(c.Value.A)+" → "+rawText(c.Value.B))
		}
	}
	return t.writeTo(w)
}

// countsText words the counts of a comparison of calls.
func countsText(n callCounts) string {
	return fmt.Sprintf("%d call(s) changed, %d added, %d removed, %d the same", n.Changed, n.Added, n.Removed, n.Same)
}

// yesNo is "yes" or "no".
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
