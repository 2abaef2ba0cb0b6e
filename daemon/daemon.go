// Package daemon is the case worker's process: the one call a worker binary
// makes to serve its own targets. Options.Run (or Options.Main, for tests)
// gives a binary every subcommand of the worker — `serve` (the default),
// `demo`, `db migrate`, `version` and `--help` — with the configuration read
// from PYRULA_ variables, a zap logger, the HTTP listener of /healthz,
// /readyz and /metrics, SIGINT/SIGTERM handling and the graceful drain
// within PYRULA_SHUTDOWN_GRACE.
//
// A user's main hands over its registration function:
//
//	func main() { os.Exit(daemon.Options{Register: flows.Register}.Run()) }
//
// cmd/worker is exactly that over the example targets. daemon wires the
// worker (package worker) and `db migrate` (internal/dbschema);
// `demo` and its embedded server (memvalkey) are linked only into a build
// with the demo tag (go build -tags demo), so that the worker that is
// shipped does not carry a test server. Nothing of the project imports
// daemon except binaries.
package daemon

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/internal/dbschema"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/version"
	"github.com/pyrula/caseworker/worker"
)

// Options configure a worker binary. The zero value serves no targets.
type Options struct {
	// Name is the program name used in usage lines ("worker" when empty).
	Name string
	// Register registers the binary's targets. Main calls it on a new
	// registry before any subcommand that runs targets, then checks the
	// registry (flow.Registry.Check): a failed or bad registration stops
	// start-up with one "error:" line naming the target (exit 1).
	Register func(*flow.Registry) error
	// Registry holds targets registered beforehand; Register, when set,
	// adds to it. Either may be nil.
	Registry *flow.Registry
	// Getenv reads the environment: the PYRULA_ variables of the
	// configuration (worker.LoadConfigFrom) and those of the built-in
	// model clients (ANTHROPIC_API_KEY, …). os.Getenv when nil; tests pass
	// their own instead of changing the process's environment.
	Getenv func(string) string
}

// Run runs the process: the subcommand in os.Args, with a context that
// ends on SIGINT or SIGTERM. It returns the exit status for os.Exit: 0 done
// (serve: a clean shutdown), 1 an error (printed as one "error: …" line on
// stderr; for serve with PYRULA_LOG_FORMAT=json, as one JSON log line at
// level error).
func (o Options) Run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return o.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
}

// Main runs the subcommand args names (without the program name) until it
// is done or ctx ends, and returns the exit status. Configuration comes
// from the environment Getenv reads (PYRULA_ variables; see worker.Config).
func (o Options) Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if err := o.run(ctx, args, stdout, stderr); err != nil {
		if o.jsonErrors(args) {
			logError(stderr, oneLine(err.Error()))
		} else {
			fmt.Fprintf(stderr, "error: %s\n", oneLine(err.Error()))
		}
		return messages.ExitError
	}
	return messages.ExitOK
}

// jsonErrors says that the error ending args is printed as a JSON log
// line rather than an "error:" line: for serve (the default command), whose
// log lines are JSON, when PYRULA_LOG_FORMAT says json. Decision: only when
// the variable says so (unset, its default json included, keeps the plain
// line people read in a terminal), and only for serve: demo, db migrate,
// version and --help print plain text.
func (o Options) jsonErrors(args []string) bool {
	serving := len(args) == 0 || args[0] == "serve"
	return serving && o.getenv()("PYRULA_LOG_FORMAT") == "json"
}

// name is the program name.
func (o Options) name() string {
	if o.Name != "" {
		return o.Name
	}
	return "worker"
}

// getenv is Getenv, or os.Getenv when it is nil.
func (o Options) getenv() func(string) string {
	if o.Getenv != nil {
		return o.Getenv
	}
	return os.Getenv
}

// registry is the checked registry of the binary's targets.
func (o Options) registry() (*flow.Registry, error) {
	return host.Build(o.Registry, o.Register)
}

func (o Options) run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 {
		cmd = args[0]
	}
	switch cmd {
	case "-h", "--help", "help":
		return o.usage(stdout)
	case "version":
		_, err := fmt.Fprintln(stdout, version.Version)
		return err
	case "db":
		if len(args) != 2 || args[1] != "migrate" {
			return fmt.Errorf("usage: %s db migrate", o.name())
		}
		return migrate(ctx, o.getenv(), stdout)
	case "demo":
		reg, err := o.registry()
		if err != nil {
			return err
		}
		return demo(ctx, o.name(), reg, args[1:], stdout, stderr)
	case "serve":
		if len(args) > 1 {
			return fmt.Errorf("usage: %s [serve]", o.name())
		}
		reg, err := o.registry()
		if err != nil {
			return err
		}
		return serve(ctx, reg, o.getenv(), stderr)
	default:
		return fmt.Errorf("unknown command %q (see %s --help)", cmd, o.name())
	}
}

func (o Options) usage(w io.Writer) error {
	demoLine := "(%s demo --help lists its flags)"
	if !demoBuilt {
		demoLine = "(in a build with the demo tag: go run -tags demo ./cmd/%s demo)"
	}
	fmt.Fprintf(w, `Usage: %s [serve | demo [flags] | db migrate | version | --help]

  serve       consume the message stream (the default)
  demo        the whole flow on an embedded in-memory server: no Valkey needed
              `+demoLine+`
  db migrate  apply the archive's and the fixture store's migrations to
              PYRULA_POSTGRES_DSN
  version     print the version

Targets:
  serve and demo run the targets this binary registers: the Register
  function its main passes to daemon.Options (your own worker's
  flows.Register; see docs/your-own-targets.md). The project's own worker
  binary (cmd/worker) registers the example targets of flow/examples.
  A start_run or run_case naming a target not registered here is refused.

Environment:
`, o.name(), o.name())
	return worker.Usage(w)
}

// migrate applies every component's migrations to PYRULA_POSTGRES_DSN.
func migrate(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	applied, err := dbschema.Migrate(ctx, getenv(dbschema.EnvDSN))
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "applied %d migrations %v\n", len(applied), applied)
	return err
}
