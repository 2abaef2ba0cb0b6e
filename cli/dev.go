package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/flow/journallog"
	"github.com/pyrula/caseworker/internal/redact"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/capture"
	"github.com/pyrula/caseworker/journal/memjournal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
	"github.com/pyrula/caseworker/version"
)

// defaultDevDir is where `dev` keeps the last run of each target.
const defaultDevDir = ".pyrula/last"

// devOutput is the last line `dev` prints.
type devOutput struct {
	RunID        string          `json:"run_id"`
	Status       host.Status     `json:"status"`
	Result       json.RawMessage `json:"result"`
	Code         messages.Code   `json:"code,omitempty"`
	Message      string          `json:"message,omitempty"`
	LastSeq      int64           `json:"last_seq"`
	Case         string          `json:"case"`
	FixtureHash  bundle.Hash     `json:"fixture_hash"`
	ForkAfterSeq int64           `json:"fork_after_seq"`
	Events       string          `json:"events"`
}

// devCmd is `dev TARGET [--input K=JSON]…`: a live run on an embedded
// journal, kept in .pyrula/last/ as a case and its events.
func (a *app) devCmd() *cobra.Command {
	var inputs []string
	var runID, dir, llmRef, depsRef string
	var fork int64
	c := &cobra.Command{
		Use:   "dev TARGET",
		Short: "Run a target live on an embedded journal and keep the run as a case in .pyrula/last/",
		Long: `Runs TARGET live in this process on an embedded, in-memory journal: no
Valkey, no store. Prints the run's events as JSON lines, then one object:
run_id, status, result (or code and message), last_seq, and where the run was
kept:

  <dir>/TARGET.case           the finished run as a case (a zstd bundle)
  <dir>/TARGET.events.jsonl   its events

<dir> is .pyrula/last unless --dir says otherwise; each dev run of TARGET
replaces the two files. The case forks right after run:start, so it keeps
every recorded call result and a case run re-executes the whole body against
them: pyrula case run <dir>/TARGET.case --replay-only checks that changed
code still makes the same calls, with no store and no Valkey.
--fork-after-seq picks another fork point (pyrula events --fork-points
explains them). The files hold the run's inputs and outputs unredacted: a
directory dev creates gets a .gitignore that keeps it out of version control
(pointing --dir at an existing directory, such as your test data, adds none).

Exit 0 when the run completed, 3 when it failed, was cancelled or suspended.`,
		Args: exactArgs("TARGET"),
	}
	c.RunE = a.run(func(ctx context.Context, args []string) error {
		in, err := parseInputs(inputs)
		if err != nil {
			return err
		}
		if runID == "" {
			runID = newRunID()
		}
		var forkAt *int64
		if c.Flags().Changed("fork-after-seq") {
			if fork < 0 {
				return fmt.Errorf("dev: --fork-after-seq %d is negative", fork)
			}
			forkAt = &fork
		}
		var models flow.ModelClient
		if llmRef != "" {
			if models, err = a.modelClient(llmRef); err != nil {
				return fmt.Errorf("dev: --llm-ref: %w", err)
			}
		}
		deps, err := a.depSet("dev", depsRef)
		if err != nil {
			return err
		}
		return a.dev(ctx, args[0], runID, dir, in, forkAt, models, deps)
	})
	c.Flags().StringArrayVar(&inputs, "input", nil, "an input as KEY=JSON (repeatable), e.g. --input sku='\"SKU-42\"'")
	c.Flags().StringVar(&runID, "run-id", "", "the run id (default a new run_<hex>)")
	c.Flags().StringVar(&dir, "dir", defaultDevDir, "where to keep the run's case and events")
	c.Flags().Int64Var(&fork, "fork-after-seq", 0, "the run_seq the kept case forks after (default: right after run:start)")
	c.Flags().StringVar(&llmRef, "llm-ref", "", "the model client of an agent's model calls: anthropic, openai, or one the binary registered (default the agent's own)")
	c.Flags().StringVar(&depsRef, "deps-ref", "", "the dependency set of the run's steps and tools: NAME or PACKAGE:NAME of one the binary registered")
	return c
}

func (a *app) dev(ctx context.Context, target, runID, dir string, inputs map[string]json.RawMessage, forkAt *int64, models flow.ModelClient, deps flow.Deps) error {
	reg := a.registry()
	info, err := a.lookupTarget("dev", target)
	if err != nil {
		return err
	}
	target = info.Name
	if err := needModelClient("dev", reg, info, models != nil); err != nil {
		return err
	}
	if strings.ContainsAny(target, `/\`) || target == "." || target == ".." {
		return fmt.Errorf("dev: target name %q cannot name a file", target)
	}
	j, err := memjournal.New(memjournal.Options{})
	if err != nil {
		return err
	}
	log, err := journallog.New(j, journallog.Options{Owner: processOwner()})
	if err != nil {
		return err
	}
	rt, err := host.NewRuntime(host.Config{Registry: reg, Log: log})
	if err != nil {
		return err
	}
	runCtx, stop := cancelOnInterrupt(ctx)
	defer stop()
	out, err := rt.Run(runCtx, host.RunParams{RunID: runID, Target: target, Inputs: inputs, Models: models, Deps: deps})
	if err != nil {
		return fmt.Errorf("dev: run %s: %w", runID, err)
	}
	if out.Status == host.StatusSuspended {
		if err := log.Release(ctx, runID, journal.StatusSuspended); err != nil {
			return err
		}
	}
	events, _, err := j.Events(ctx, runID)
	if err != nil {
		return fmt.Errorf("dev: read run %s: %w", runID, err)
	}
	lines := make([]json.RawMessage, 0, len(events))
	for _, e := range events {
		raw, err := e.JSON()
		if err != nil {
			return err
		}
		lines = append(lines, raw)
		if _, err := fmt.Fprintf(a.stdout, "%s\n", raw); err != nil {
			return err
		}
	}
	if forkAt == nil {
		forkAt = startSeq(events)
	}
	cb, err := capture.FromJournal(ctx, j, capture.FromJournalParams{
		Target: target, RunID: runID, Registration: nil, SpillDir: os.TempDir(),
		Params: capture.Params{ForkAfterSeq: forkAt, PyrulaVersion: version.Version, Registration: info.Registration},
	})
	if err != nil {
		if _, coded := messages.CodeOf(err); coded {
			return err
		}
		return fmt.Errorf("dev: keep run %s as a case: %w", runID, err)
	}
	casePath, eventsPath, err := keepDevRun(dir, target, cb, lines)
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	res := devOutput{
		RunID: out.RunID, Status: out.Status, Result: out.Result, Code: out.Code, Message: redact.Secrets(oneLine(out.Message)),
		LastSeq: out.LastSeq, Case: casePath, FixtureHash: cb.Hash(), Events: eventsPath,
	}
	if forkAt != nil {
		res.ForkAfterSeq = *forkAt
	}
	if res.Result == nil {
		res.Result = json.RawMessage("null")
	}
	if err := a.emit(res); err != nil {
		return err
	}
	if out.Status != host.StatusComplete {
		return exitStatus(messages.ExitRunFailed)
	}
	return nil
}

// startSeq is the run_seq of the run's run:start event: the default fork
// point of a kept dev run (nil when the run never started).
func startSeq(events []journal.Event) *int64 {
	for _, e := range events {
		if e.Kind == runevent.RunStart {
			seq := e.RunSeq
			return &seq
		}
	}
	return nil
}

// keepDevRun writes TARGET.case and TARGET.events.jsonl into dir, each
// atomically, and returns their paths. A dir it creates gets a .gitignore
// of "*" (an existing one, such as a test data directory, is left as it
// is).
func keepDevRun(dir, target string, cb *bundle.Canonical, events []json.RawMessage) (casePath, eventsPath string, err error) {
	_, statErr := os.Stat(dir)
	created := errors.Is(statErr, os.ErrNotExist)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("keep the run: %w", err)
	}
	if created {
		ignore := filepath.Join(dir, ".gitignore")
		if err := os.WriteFile(ignore, []byte("# pyrula dev keeps the last run of each target here, unredacted.\n*\n"), 0o644); err != nil {
			return "", "", fmt.Errorf("keep the run: %w", err)
		}
	}
	casePath = filepath.Join(dir, target+".case")
	if _, err := writeFileAtomic(casePath, exportPerm, cb.WriteBlob); err != nil {
		return "", "", fmt.Errorf("keep the run: %w", err)
	}
	eventsPath = filepath.Join(dir, target+".events.jsonl")
	if err := writeEvents(eventsPath, events); err != nil {
		return "", "", fmt.Errorf("keep the run: %w", err)
	}
	return casePath, eventsPath, nil
}
