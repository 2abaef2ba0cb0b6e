package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/llm"
	"github.com/pyrula/caseworker/llm/resolve"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/replay"
	"github.com/pyrula/caseworker/store"
)

// caseRunFlags are the flags of `case run`.
type caseRunFlags struct {
	target, supply, prices, model, promptFile, runID string
	llmRef, depsRef, events, format, html            string
	inputs, allow                                    []string
	fromStart, replayOnly, values                    bool
	liveBudget                                       int
	maxCost                                          float64
}

// caseRunCmd is `case run CASE [--target NAME] …`.
func (a *app) caseRunCmd() *cobra.Command {
	var f caseRunFlags
	c := &cobra.Command{
		Use:   "run CASE",
		Short: "Run a saved case: verify the recorded prefix, then resolve each call down the ladder",
		Long: `Starts a new run of --target (default the case's target_name) from CASE, a
fixture hash in the store or a path to a bundle file (.case blob or JSON).
The recorded prefix is verified call by call (prefix_diverged, exit 2);
every later call is reused, simulated (--supply), run live (live / changed)
or stops the run with missing_context, live_budget_exceeded,
write_not_allowed or replay_diverged (exit 3).

Prints one {"type":"call"} line per new post-fork call and one
{"type":"outcome"} line. The run's journal is in memory. Exit 0 complete,
2 refused before start, 3 the run failed, was cancelled, suspended, or
(--replay-only) left recorded calls unconsumed, 1 invalid input.
--events FILE keeps the case run's own journal events (call:start,
call:done with provenance, case:call, case:outcome, the terminal event) as
JSON lines for inspection. --format table prints the same for people: a
row per call line with the role and what changed, the outcome, and the
divergence's detail (fields, values with --values, the model's parts and
the system prompt's line diff).`,
		Args: exactArgs("CASE"),
	}
	c.RunE = a.run(func(ctx context.Context, args []string) error {
		return a.caseRun(ctx, c, args[0], f)
	})
	f.addLadderFlags(c)
	fl := c.Flags()
	fl.BoolVar(&f.replayOnly, "replay-only", false, "no live rung: every non-pure call must be answered by the recording")
	fl.StringVar(&f.model, "model", "", "run the agent's model calls on this model")
	fl.StringVar(&f.promptFile, "prompt-file", "", "run the agent's model calls with this file as system prompt")
	fl.BoolVar(&f.values, "values", false, "include call values and the result in the output")
	fl.StringVar(&f.runID, "run-id", "", "the new run's id (default a new case_<hex>)")
	fl.StringVar(&f.events, "events", "", "also write the case run's own journal events to this file, as JSON lines")
	fl.StringVar(&f.depsRef, "deps-ref", "", "the dependency set of live calls: NAME or PACKAGE:NAME of one the binary registered")
	return c
}

// addLadderFlags registers the flags that case run and case compare share:
// the target, inputs, the ladder's supplied answers, budget, tokens and
// prices, the model client and the output's format.
func (f *caseRunFlags) addLadderFlags(c *cobra.Command) {
	fl := c.Flags()
	fl.StringVar(&f.target, "target", "", "the registered target to run (default the case's target_name)")
	fl.StringArrayVar(&f.inputs, "input", nil, "change an input as KEY=JSON (repeatable)")
	fl.BoolVar(&f.fromStart, "from-start", false, "rerun the whole recorded run through the ladder instead of verifying the prefix")
	fl.StringVar(&f.supply, "supply", "", `supplied answers: a JSON file {"calls": {"<kind>:<key>": …}, "tools": {"<name>": …}}`)
	fl.IntVar(&f.liveBudget, "live-budget", replay.DefaultLiveBudget, "the most non-pure calls that may run live")
	fl.StringArrayVar(&f.allow, "allow-write", nil, "allow a write: tool:<name>, step:<name> or step:<id> (repeatable)")
	fl.Float64Var(&f.maxCost, "max-cost-usd", 0, "the most live model calls may spend, in US dollars")
	fl.StringVar(&f.prices, "prices", "", "a JSON file of model prices per million tokens, added to the default table")
	fl.StringVar(&f.llmRef, "llm-ref", "", "the model client of live model calls: anthropic, openai, or one the binary registered")
	fl.StringVar(&f.format, "format", formatJSON, "json (JSON lines) or table")
	fl.StringVar(&f.html, "html", "", "also write the report as one self-contained HTML page to this file")
}

// ladderOptions sets o from the flags addLadderFlags registered (the
// model client excepted); verb ("case run") starts its errors. --supply is
// not read under o.ReplayOnly, which ignores it (case run warns). A
// --max-cost-usd that is not a finite number (NaN, Inf, which pflag
// parses) is invalid input: it would switch the ceiling off.
func (f caseRunFlags) ladderOptions(c *cobra.Command, verb string, o *replay.Options) error {
	o.FromStart, o.AllowWrite = f.fromStart, f.allow
	var err error
	if o.Inputs, err = parseInputs(f.inputs); err != nil {
		return err
	}
	if f.liveBudget < 0 {
		return fmt.Errorf("%s: --live-budget %d is negative", verb, f.liveBudget)
	}
	budget := f.liveBudget
	o.LiveBudget = &budget
	if c.Flags().Changed("max-cost-usd") {
		if math.IsNaN(f.maxCost) || math.IsInf(f.maxCost, 0) {
			return fmt.Errorf("%s: --max-cost-usd %g is not a finite number: give the ceiling in US dollars, 0 or more", verb, f.maxCost)
		}
		if f.maxCost < 0 {
			return fmt.Errorf("%s: --max-cost-usd %g is negative", verb, f.maxCost)
		}
		ceiling := f.maxCost
		o.MaxCostUSD = &ceiling
	}
	if f.supply != "" && !o.ReplayOnly {
		data, err := readLimited(f.supply, replay.MaxSupplyBytes)
		if err != nil {
			return fmt.Errorf("%s: --supply: %w", verb, err)
		}
		if o.Supply, err = replay.ParseSupply(data); err != nil {
			return fmt.Errorf("%s: --supply %s: %w", verb, f.supply, err)
		}
	}
	if f.prices != "" {
		data, err := readLimited(f.prices, 1<<20)
		if err != nil {
			return fmt.Errorf("%s: --prices: %w", verb, err)
		}
		if o.Prices, err = replay.ParsePrices(data); err != nil {
			return fmt.Errorf("%s: --prices %s: %w", verb, f.prices, err)
		}
	}
	return nil
}

func (a *app) caseRun(ctx context.Context, c *cobra.Command, arg string, f caseRunFlags) error {
	if err := checkFormat("case run", f.format); err != nil {
		return err
	}
	if err := checkHTMLPath("case run", f.html); err != nil {
		return err
	}
	deps, err := a.depSet("case run", f.depsRef)
	if err != nil {
		return err
	}
	memLog := host.NewMemLog()
	p := replay.Params{Registry: a.registry(), Log: memLog, Target: f.target, RunID: f.runID, Deps: deps}
	o := &p.Options
	o.ReplayOnly, o.Values, o.Model = f.replayOnly, f.values, f.model
	if err := f.ladderOptions(c, "case run", o); err != nil {
		return err
	}
	if f.promptFile != "" {
		data, err := os.ReadFile(f.promptFile)
		if err != nil {
			return fmt.Errorf("case run: --prompt-file: %w", err)
		}
		o.System = string(data)
	}
	if p.RunID == "" {
		p.RunID = "case_" + strings.TrimPrefix(newRunID(), "run_")
	}
	cb, err := a.loadCase(ctx, "case run", arg)
	if err != nil {
		return err
	}
	if p.Target == "" {
		p.Target = cb.Manifest().TargetName
	}
	info, err := a.lookupTarget("case run", p.Target)
	if err != nil {
		return err
	}
	p.Target = info.Name
	if err := agentOnly(info, f.model != "", f.promptFile != ""); err != nil {
		return fmt.Errorf("case run: %w", err)
	}
	p.LLMRef = f.llmRef
	if f.replayOnly && f.supply != "" {
		fmt.Fprintf(a.stderr, "warning: --supply %s is not read under --replay-only: a replay-only run answers every call from the recording\n", validText(f.supply))
	}
	runCtx, stop := cancelOnInterrupt(ctx)
	defer stop()
	rep, err := replay.RunCase(runCtx, replay.Case{Canonical: cb, Params: p, ModelClient: a.caseModelClient})
	if ce := (*replay.CaseError)(nil); errors.As(err, &ce) {
		switch ce.Stage {
		case replay.StageOptions:
			return fmt.Errorf("case run: %s", flagWords(ce.Err, f.supply))
		case replay.StageModel:
			return fmt.Errorf("case run: --llm-ref: %w", ce.Err)
		case replay.StageDecode:
			return fmt.Errorf("case run: %w", ce.Err)
		}
		return ce.Err
	}
	if err != nil {
		return err
	}
	if f.events != "" {
		if err := writeEvents(f.events, memLog.EventsJSON(p.RunID)); err != nil {
			return fmt.Errorf("case run: --events: %w", err)
		}
	}
	if f.html != "" {
		title := fmt.Sprintf("%s case run %s", a.name(), arg)
		if err := writeReport(f.html, runReport(title, f.values, memLog, p.RunID, rep)); err != nil {
			return fmt.Errorf("case run: --html: %w", err)
		}
	}
	status := rep.ExitStatus()
	table := f.format == formatTable
	if status == messages.ExitRefused {
		out := rep.Outcome
		msg := errorText(out.Message)
		if table {
			writeRefusalTable(a.stdout, out.Code, msg, out.StopKey, out.Divergence)
		} else if err := a.emit(struct {
			Code       string             `json:"code"`
			Message    string             `json:"message"`
			StopKey    json.RawMessage    `json:"stop_key"`
			Divergence *replay.Divergence `json:"divergence,omitempty"`
		}{out.Code, msg, out.StopKey, out.Divergence}); err != nil {
			return err
		}
		return exitStatus(status)
	}
	liveModels := 0
	for _, line := range rep.Calls {
		if !table {
			if err := a.emit(line); err != nil {
				return err
			}
		}
		if line.Kind == string(host.KindModel) && (line.Provenance == replay.ProvLive || line.Provenance == replay.ProvChanged) {
			liveModels++
		}
	}
	if liveModels > 0 && f.llmRef == "" && (f.model != "" || f.promptFile != "") {
		fmt.Fprintf(a.stderr, "warning: %d live model call(s) were answered by %s's own model client, not a provider; name one with --llm-ref (%s)\n",
			liveModels, p.Target, strings.Join(resolve.Names(p.Registry), ", "))
	}
	if table {
		if err := writeCaseRunTable(a.stdout, rep.Calls, rep.Outcome); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
	} else if err := a.emit(rep.Outcome); err != nil {
		return err
	}
	if status != messages.ExitOK {
		return exitStatus(status)
	}
	return nil
}

// loadCase reads CASE: a bundle file when the argument names one, else a
// fixture hash read (verified) from the store. verb ("case run") starts its
// errors.
func (a *app) loadCase(ctx context.Context, verb, arg string) (*bundle.Canonical, error) {
	if st, err := os.Stat(arg); err == nil && !st.IsDir() {
		return readBundleFile(verb, arg)
	}
	if looksLikePath(arg) {
		return nil, fmt.Errorf("%s: no bundle file %s", verb, arg)
	}
	h, err := parseHash(arg)
	if err != nil {
		return nil, err
	}
	var cb *bundle.Canonical
	err = a.withStore(ctx, func(s store.Store) error {
		cb, err = store.LoadWith(ctx, s, h, bundle.Options{Decode: true})
		return err
	})
	return cb, err
}

// readBundleFile reads and verifies the bundle file path, decoding its
// results as it reads them (its callers decode it); verb ("case
// run") starts its errors.
func readBundleFile(verb, path string) (*bundle.Canonical, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", verb, err)
	}
	defer file.Close()
	cb, err := bundle.Read(file, bundle.Options{Decode: true})
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", verb, path, err)
	}
	return cb, nil
}

// looksLikePath says that a CASE argument that names no file was meant as a
// path, not a fixture hash.
func looksLikePath(arg string) bool {
	return strings.ContainsAny(arg, `/\`) || strings.HasSuffix(arg, ".case") || strings.HasSuffix(arg, ".json")
}

// agentOnly refuses --model and --prompt-file for a target that is not an
// agent: a workflow makes no model calls of its own to change.
func agentOnly(info host.TargetInfo, model, prompt bool) error {
	if info.Kind == bundle.KindAgent {
		return nil
	}
	switch {
	case model:
		return fmt.Errorf("--model applies to agents; %s is a %s", info.Name, info.Kind)
	case prompt:
		return fmt.Errorf("--prompt-file applies to agents; %s is a %s", info.Name, info.Kind)
	}
	return nil
}

// caseModelClient is the model client --llm-ref names for a case run: a
// replay-only run sends no model call, so the client is named (the
// outcome's llm_ref) but not opened, and needs no key.
func (a *app) caseModelClient(ref string, replayOnly bool) (flow.ModelClient, error) {
	if replayOnly {
		return nil, resolve.Check(ref, a.registry())
	}
	return a.modelClient(ref)
}

// modelClient opens the model client --llm-ref names (resolve.Open), with
// the built-in clients configured from the environment.
func (a *app) modelClient(name string) (flow.ModelClient, error) {
	return resolve.Open(name, a.registry(), a.getenv, llm.Policy{})
}

// writeEvents writes events as JSON lines to path, atomically.
func writeEvents(path string, events []json.RawMessage) error {
	_, err := writeFileAtomic(path, exportPerm, func(w io.Writer) error {
		for _, line := range events {
			if _, err := fmt.Fprintf(w, "%s\n", line); err != nil {
				return err
			}
		}
		return nil
	})
	return err
}

// readLimited reads a file of at most limit bytes.
func readLimited(name string, limit int64) ([]byte, error) {
	st, err := os.Stat(name)
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, at most %d", name, st.Size(), limit)
	}
	return os.ReadFile(name)
}

// cancelOnInterrupt returns a context for a case run that ends with cause
// flow.ErrRunCancelled when ctx ends (SIGINT or SIGTERM in the binary): the
// case run's journal belongs to this process and nobody could resume it, so
// an interrupt cancels the run (run:cancelled, outcome "cancelled", exit 3)
// rather than abandoning it as a crash would. stop releases it.
func cancelOnInterrupt(ctx context.Context) (run context.Context, stop func()) {
	run, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	unhook := context.AfterFunc(ctx, func() { cancel(flow.ErrRunCancelled) })
	return run, func() { unhook(); cancel(nil) }
}

// flagWords words a replay.OptionError with the flags of case run
// (--allow-write, the --supply file supply); other errors as they are.
func flagWords(err error, supply string) string {
	var oe *replay.OptionError
	if !errors.As(err, &oe) {
		return err.Error()
	}
	switch oe.Option {
	case replay.OptAllowWrite:
		return fmt.Sprintf("--allow-write %s %s", plainOrQuoted(oe.Value), oe.Problem)
	case replay.OptSupplyTools:
		return fmt.Sprintf("--supply %s: tools[%q] %s", supply, oe.Value, oe.Problem)
	}
	return fmt.Sprintf("--supply %s: calls[%q] %s", supply, oe.Value, oe.Problem)
}

// plainOrQuoted is s as it is when it reads unambiguously in a message
// (letters, digits and _-.:/), else quoted.
func plainOrQuoted(s string) string {
	if s == "" || strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-.:/", r))
	}) {
		return strconv.Quote(s)
	}
	return s
}
