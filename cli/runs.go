package cli

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/flow/journallog"
	"github.com/pyrula/caseworker/internal/dbschema"
	"github.com/pyrula/caseworker/internal/redact"
	"github.com/pyrula/caseworker/internal/valkeyconn"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/capture"
	jresolve "github.com/pyrula/caseworker/journal/resolve"
	"github.com/pyrula/caseworker/messages"
)

// Environment of the runtime commands (the worker reads the same).
const (
	envValkeyURL    = jresolve.EnvValkeyURL
	envNamespace    = jresolve.EnvNamespace
	envCompletedTTL = jresolve.EnvCompletedTTL
	envPostgresDSN  = jresolve.EnvPostgresDSN

	defaultValkeyURL = jresolve.DefaultValkeyURL
)

// journalFlags are the flags of the commands that read or write run
// journals.
func (a *app) journalFlags(c *cobra.Command) {
	c.Flags().StringVar(&a.namespace, "namespace", "",
		"journal namespace (default $PYRULA_NAMESPACE, then "+journal.DefaultNamespace+")")
}

// registry is the binary's registry of targets (empty when it registers
// none).
func (a *app) registry() *flow.Registry { return a.reg }

// journalNamespace is the namespace of the journal and the streams:
// --namespace, else PYRULA_NAMESPACE, else journal.DefaultNamespace.
func (a *app) journalNamespace() string {
	return cmp.Or(a.namespace, a.getenv(envNamespace), journal.DefaultNamespace)
}

// withJournal opens the run journal the environment names: Valkey at
// PYRULA_VALKEY_URL (default redis://127.0.0.1:6379/0) under --namespace /
// PYRULA_NAMESPACE, archiving finished runs in PostgreSQL when
// PYRULA_POSTGRES_DSN is set.
func (a *app) withJournal(ctx context.Context, f func(journal.Journal) error) error {
	ns := a.journalNamespace()
	if err := journal.CheckNamespace(ns); err != nil {
		return err
	}
	var ttl time.Duration
	if v := a.getenv(envCompletedTTL); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return messages.Errorf(messages.InvalidOverrides, "%s=%q is not a positive duration such as 24h", envCompletedTTL, v)
		}
		ttl = d
	}
	client, err := a.valkeyClient()
	if err != nil {
		return err
	}
	defer client.Close()
	j, err := jresolve.Open(ctx, jresolve.Config{URL: a.getenv(envValkeyURL), Client: client, Namespace: ns,
		CompletedTTL: ttl, ArchiveDSN: a.getenv(envPostgresDSN)})
	if err != nil {
		return err
	}
	defer j.Close()
	return f(j)
}

// runCmd is `run TARGET [--input K=JSON]…`: a live run of a registered
// target, recorded in the journal.
func (a *app) runCmd() *cobra.Command {
	var inputs []string
	var runID, llmRef, depsRef string
	c := &cobra.Command{
		Use:   "run TARGET",
		Short: "Run a registered target live, recording it in the journal",
		Long: `Runs TARGET live against the configured journal (Valkey at
PYRULA_VALKEY_URL, default redis://127.0.0.1:6379/0; finished runs archived
in PostgreSQL when PYRULA_POSTGRES_DSN is set) and prints one JSON object:
run_id, status (complete, error, cancelled or suspended), last_seq and the
terminal event. Exit 0 when the run completed, 3 when it failed, was
cancelled or suspended. Inputs not given take the target's defaults (see
pyrula targets). Running an existing run id resumes it from its journal.`,
		Args: exactArgs("TARGET"),
		RunE: a.run(func(ctx context.Context, args []string) error {
			in, err := parseInputs(inputs)
			if err != nil {
				return err
			}
			if runID == "" {
				runID = newRunID()
			}
			var models flow.ModelClient
			if llmRef != "" {
				if models, err = a.modelClient(llmRef); err != nil {
					return fmt.Errorf("run: --llm-ref: %w", err)
				}
			}
			deps, err := a.depSet("run", depsRef)
			if err != nil {
				return err
			}
			return a.withJournal(ctx, func(j journal.Journal) error {
				return a.runTarget(ctx, j, args[0], runID, in, models, deps)
			})
		}),
	}
	c.Flags().StringArrayVar(&inputs, "input", nil, "an input as KEY=JSON (repeatable), e.g. --input sku='\"SKU-42\"'")
	c.Flags().StringVar(&runID, "run-id", "", "the run id (default a new run_<hex>)")
	c.Flags().StringVar(&llmRef, "llm-ref", "", "the model client of an agent's model calls: anthropic, openai, or one the binary registered (default the agent's own)")
	c.Flags().StringVar(&depsRef, "deps-ref", "", "the dependency set of the run's steps and tools: NAME or PACKAGE:NAME of one the binary registered")
	a.journalFlags(c)
	return c
}

// runOutput is what `run` prints.
type runOutput struct {
	RunID    string          `json:"run_id"`
	Status   host.Status     `json:"status"`
	LastSeq  int64           `json:"last_seq"`
	Terminal json.RawMessage `json:"terminal"`
}

func (a *app) runTarget(ctx context.Context, j journal.Journal, target, runID string, inputs map[string]json.RawMessage, models flow.ModelClient, deps flow.Deps) error {
	reg := a.registry()
	info, err := a.lookupTarget("run", target)
	if err != nil {
		return err
	}
	target = info.Name
	if err := needModelClient("run", reg, info, models != nil); err != nil {
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
	out, err := rt.Run(ctx, host.RunParams{RunID: runID, Target: target, Inputs: inputs, Models: models, Deps: deps})
	if err != nil {
		// The run did not end (its context ended or the journal failed): hand
		// it back so that it can be resumed.
		rerr := log.Release(context.WithoutCancel(ctx), runID, journal.StatusRunning)
		return errors.Join(fmt.Errorf("run %s: %w", runID, err), rerr)
	}
	if out.Status == host.StatusSuspended {
		if err := log.Release(ctx, runID, journal.StatusSuspended); err != nil {
			return err
		}
	}
	res := runOutput{RunID: out.RunID, Status: out.Status, LastSeq: out.LastSeq, Terminal: json.RawMessage("null")}
	if out.Terminal != nil {
		// The terminal event as the journal holds it: the same bytes as
		// pyrula events, the worker's event stream and the archive print.
		events, _, err := j.Events(ctx, runID)
		if err != nil {
			return fmt.Errorf("run %s: read its terminal event: %w", runID, err)
		}
		if n := len(events); n > 0 && events[n-1].RunSeq == out.Terminal.RunSeq {
			if res.Terminal, err = events[n-1].JSON(); err != nil {
				return err
			}
		}
	}
	if err := a.emit(res); err != nil {
		return err
	}
	if out.Status != host.StatusComplete {
		return exitStatus(messages.ExitRunFailed)
	}
	return nil
}

// parseInputs reads --input KEY=JSON flags.
func parseInputs(flags []string) (map[string]json.RawMessage, error) {
	in := map[string]json.RawMessage{}
	for _, f := range flags {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--input %q is not KEY=JSON", f)
		}
		if !json.Valid([]byte(v)) {
			return nil, fmt.Errorf("--input %s: the value is not JSON (quote strings: %s='\"text\"')", k, k)
		}
		if _, dup := in[k]; dup {
			return nil, fmt.Errorf("--input %s is given twice", k)
		}
		in[k] = json.RawMessage(v)
	}
	return in, nil
}

func newRunID() string {
	var b [8]byte
	rand.Read(b[:])
	return "run_" + hex.EncodeToString(b[:])
}

// processOwner names this process in run leases.
func processOwner() string {
	host, _ := os.Hostname()
	var b [4]byte
	rand.Read(b[:])
	return fmt.Sprintf("pyrula@%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// targetsCmd is `targets`: one JSON line per registered target.
func (a *app) targetsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "targets",
		Short: "List the registered targets",
		Long: `Prints one JSON line per target registered in this binary: name, kind,
code_version, registration (steps, and tools for agents) and the inputs it
accepts with their defaults.`,
		Args: exactArgs(),
		RunE: a.run(func(ctx context.Context, args []string) error {
			for _, t := range a.registry().Targets() {
				if err := a.emit(t); err != nil {
					return err
				}
			}
			return nil
		}),
	}
}

// eventsCmd is `events RUN_ID [--fork-points]`: the run's events as JSON
// lines, or which of their run_seq values are fork points.
func (a *app) eventsCmd() *cobra.Command {
	var forks bool
	c := &cobra.Command{
		Use:   "events RUN_ID",
		Short: "Print a run's events, to pick a fork point",
		Long: `Prints the run's events as JSON lines in run_seq order, from Valkey or,
once the run has left it, from the PostgreSQL archive. --fork-after-seq of
case save takes a run_seq.

With --fork-points, prints one line per event instead: run_seq, kind, call
(kind:key, for call events), fork_point (true when case save
--fork-after-seq RUN_SEQ would accept it) and why (for the others: the calls
in flight at that point, or done without a recorded result).`,
		Args: exactArgs("RUN_ID"),
		RunE: a.run(func(ctx context.Context, args []string) error {
			return a.withJournal(ctx, func(j journal.Journal) error {
				return a.printEvents(ctx, j, args[0], forks)
			})
		}),
	}
	c.Flags().BoolVar(&forks, "fork-points", false, "say which run_seq values are valid --fork-after-seq points, and why the others are not")
	a.journalFlags(c)
	return c
}

// printEvents prints run runID's events, or its fork points.
func (a *app) printEvents(ctx context.Context, j journal.Journal, runID string, forks bool) error {
	notFound := func() error {
		return fmt.Errorf("events: run %s is in neither Valkey (namespace %s) nor the archive", runID, j.Namespace())
	}
	if forks {
		r, err := j.Run(ctx, runID)
		if errors.Is(err, journal.ErrRunNotFound) {
			return notFound()
		}
		if err != nil {
			return err
		}
		for _, fp := range capture.ForkPoints(r) {
			if err := a.emit(fp); err != nil {
				return err
			}
		}
		return nil
	}
	events, _, err := j.Events(ctx, runID)
	if errors.Is(err, journal.ErrRunNotFound) {
		return notFound()
	}
	if err != nil {
		return err
	}
	for _, e := range events {
		raw, err := e.JSON()
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(a.stdout, "%s\n", raw); err != nil {
			return err
		}
	}
	return nil
}

// dbCmd is `db migrate`.
func (a *app) dbCmd() *cobra.Command {
	db := &cobra.Command{Use: "db", Short: "Manage the PostgreSQL tables (run archive, fixture store)", Args: groupArgs, RunE: groupRun}
	db.AddCommand(&cobra.Command{
		Use:   "migrate",
		Short: "Apply the run archive's and the fixture store's migrations",
		Long: `Applies the embedded SQL migrations of the run archive and of the
PostgreSQL fixture store (each component's own, recorded apart) to the
database at PYRULA_POSTGRES_DSN, under an advisory lock (safe when several
processes run it at once; a second run applies nothing). Prints
{"applied": ["<component>/<migration>", ...]}, an empty list when the
database was up to date.`,
		Args: exactArgs(),
		RunE: a.run(func(ctx context.Context, args []string) error {
			applied, err := dbschema.Migrate(ctx, a.getenv(envPostgresDSN))
			if err != nil {
				return err
			}
			return a.emit(struct {
				Applied []string `json:"applied"`
			}{applied})
		}),
	})
	return db
}

// exitStatus is an error that only sets the exit status: what to print was
// printed.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// valkeyClient connects to the Valkey that PYRULA_VALKEY_URL names (default
// redis://127.0.0.1:6379/0), with PYRULA_VALKEY_USERNAME and
// PYRULA_VALKEY_PASSWORD and the TLS files of PYRULA_VALKEY_CA_FILE,
// PYRULA_VALKEY_CERT_FILE and PYRULA_VALKEY_KEY_FILE (valkeyconn), without
// client-side caching; errors name the variable and never print the URL's
// password.
func (a *app) valkeyClient() (valkey.Client, error) {
	url := a.getenv(envValkeyURL)
	if url == "" {
		url = defaultValkeyURL
	}
	opt, err := valkeyconn.Options(url, valkeyconn.FromEnv(a.getenv))
	if errors.Is(err, valkeyconn.ErrInvalidURL) {
		return nil, fmt.Errorf("%s: not a redis:// or rediss:// URL", envValkeyURL)
	}
	if err != nil {
		return nil, err
	}
	c, err := valkey.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("connect to Valkey at %s (%s): %w", redact.Secrets(url), envValkeyURL, err)
	}
	return c, nil
}
