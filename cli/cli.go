// Package cli is the `pyrula` command tree: `pyrula case import|export|list|
// show|delete|gc|save|run|test|diff|compare`, `run`, `targets`, `events`,
// `enqueue`, `db migrate` and `version`. It is
// a package rather than code in cmd/pyrula so that a user's own binary (which
// registers its own targets) can offer the same commands by calling Main or
// Options.Main.
//
// cli owns argument parsing, the JSON output shapes, exit statuses and the
// redaction of what it prints. It calls down into bundle, store,
// store/resolve and messages; nothing of the project imports cli except the
// binaries in cmd/.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/internal/redact"
	"github.com/pyrula/caseworker/messages"
)

// Options configure the command tree. The zero value is a CLI with no
// targets (the case store commands still work); a user's binary sets
// Register to its own registration function:
//
//	os.Exit(cli.Options{Register: flows.Register}.Run())
type Options struct {
	// Name is the program name used in usage lines and help ("pyrula" when
	// empty).
	Name string
	// Now is the clock gc uses to decide which bundles are new (time.Now
	// when nil).
	Now func() time.Time
	// Register registers the binary's targets. Main calls it on a new
	// registry before any command runs; its error, or a bad registration
	// found by flow.Registry.Check, stops the binary with one "error:" line
	// naming the target (exit 1).
	Register func(*flow.Registry) error
	// Registry holds targets registered beforehand; Register, when set,
	// adds to it. Either may be nil.
	Registry *flow.Registry
}

// Run runs the command tree on the process: os.Args, the environment,
// stdin, stdout and stderr, with a context that ends on SIGINT or SIGTERM.
// It returns the exit status for os.Exit (see Main).
func (o Options) Run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return o.Main(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
}

// Main runs pyrula's CLI with args (without the program name) and returns
// the process exit status; it is Options{}.Main.
func Main(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	return Options{}.Main(ctx, args, getenv, stdin, stdout, stderr)
}

// Main runs the command tree with args (without the program name), reading
// the environment through getenv, and returns the process exit status:
//
//   - 0 when the command did what was asked (and for --help);
//   - a refusal (an error carrying a messages.Code) prints {"code", "message"}
//     on stdout and returns the code's exit status (2 for every code the
//     store commands use);
//   - invalid input (unknown commands or flags, missing arguments, unreadable
//     files) and operational errors print one "error: …" line on stderr, with
//     URL passwords redacted and invalid UTF-8 replaced, and return 1;
//   - a started run that failed, was cancelled or suspended (run, dev,
//     case run, enqueue; a case of case test that did not pass, an arm of
//     case compare that did not complete) returns 3 after printing its
//     output;
//   - case diff returns 4 when the two cases differ.
func (o Options) Main(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	a := &app{opts: o, getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr}
	if dir, rest, given, err := splitAppDir(args); given || err != nil {
		// The user's own CLI, built from the module at dir, runs the
		// command (appdir.go).
		if err == nil {
			err = a.runAppDir(ctx, dir, rest)
		}
		if err == nil {
			return messages.ExitOK
		}
		return a.report(nil, &runError{err})
	}
	reg, err := o.registry()
	if err != nil {
		errorLine(stderr, err.Error())
		return messages.ExitError
	}
	a.reg = reg
	root := a.rootCmd()
	root.SetArgs(append([]string{}, args...)) // never nil: cobra would read os.Args
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)

	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return messages.ExitOK
	}
	return a.report(cmd, err)
}

// report prints err the way its kind asks for and returns the exit status.
func (a *app) report(cmd *cobra.Command, err error) int {
	var status exitStatus
	if errors.As(err, &status) {
		return int(status)
	}
	if e := messages.AsError(err); e != nil {
		msg := e.Message
		if msg == "" {
			msg = e.Error()
		}
		out := struct {
			Code    messages.Code `json:"code"`
			Message string        `json:"message"`
		}{e.Code, errorText(msg)}
		if werr := writeJSON(a.stdout, out); werr != nil {
			errorLine(a.stderr, werr.Error())
			return messages.ExitError
		}
		return e.Code.ExitStatus()
	}

	msg := oneLine(err.Error())
	var re *runError
	if !errors.As(err, &re) && cmd != nil {
		// Everything cobra itself returns (unknown commands and flags,
		// missing arguments) is a usage error: point at the help.
		msg = fmt.Sprintf("%s (see %q)", msg, cmd.CommandPath()+" --help")
	}
	errorLine(a.stderr, msg)
	return messages.ExitError
}

// errorLine prints msg as the one "error: …" line of a failed command on w,
// in the form errorText gives it.
func errorLine(w io.Writer, msg string) {
	fmt.Fprintf(w, "error: %s\n", errorText(msg))
}

// errorText is msg as an error line or a refusal's message prints it: valid
// UTF-8 whatever the error echoes (a run id or a path given with invalid
// bytes: each invalid sequence becomes U+FFFD), on one line, with
// passwords redacted.
func errorText(msg string) string {
	return redact.Secrets(oneLine(validText(msg)))
}

// validText is s with each invalid UTF-8 sequence replaced by U+FFFD.
func validText(s string) string {
	return strings.ToValidUTF8(s, "\uFFFD")
}

// runError marks an error returned by a command's own work (not by cobra's
// parsing of the command line), so that report does not add a usage hint.
type runError struct{ err error }

func (e *runError) Error() string { return e.err.Error() }
func (e *runError) Unwrap() error { return e.err }

// app is one execution of the command tree: options, process environment and
// the values of global flags.
type app struct {
	opts   Options
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer

	// reg is the checked registry of the binary's targets.
	reg *flow.Registry

	// fixtureStore is the --fixture-store flag of the case commands.
	fixtureStore string
	// namespace is the --namespace flag of the journal commands.
	namespace string
}

// registry builds the binary's registry: Registry (or a new one), then
// Register, then Check.
func (o Options) registry() (*flow.Registry, error) {
	return host.Build(o.Registry, o.Register)
}

// name is the program name.
func (a *app) name() string {
	if a.opts.Name != "" {
		return a.opts.Name
	}
	return "pyrula"
}

// now is the clock.
func (a *app) now() func() time.Time {
	if a.opts.Now != nil {
		return a.opts.Now
	}
	return time.Now
}

// rootCmd builds the command tree.
func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   a.name(),
		Short: "Save, inspect and run saved cases",
		Long: a.name() + ` works with saved cases: content-addressed bundles of a recorded run
frozen at a fork point, kept in a fixture store. It also runs the binary's
registered targets live (run, dev) and sends messages to the case worker
(enqueue).

Outputs are JSON (one object, or JSON lines for lists). Exit status:
  0  done
  1  invalid input or an operational error (one "error:" line on stderr)
  2  refused ({"code", "message"} on stdout)
  3  a started run that failed, was cancelled or suspended (run, dev,
     case run, enqueue; case test: a case that did not pass; case
     compare: an arm that did not complete)
  4  case diff: the two cases differ`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          groupArgs,
		RunE:          groupRun,
		CompletionOptions: cobra.CompletionOptions{
			HiddenDefaultCmd: true,
		},
	}
	root.SetFlagErrorFunc(flagError)
	addVersionFlag(root)
	root.AddCommand(a.caseCmd(), a.devCmd(), a.runCmd(), a.targetsCmd(), a.eventsCmd(), a.dbCmd(), a.enqueueCmd(), a.deadCmd(), a.pendingCmd(), a.versionCmd())
	return root
}

// run wraps a command's work: it passes the command's context and marks the
// error as the command's own (see runError).
func (a *app) run(f func(ctx context.Context, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := f(cmd.Context(), args); err != nil {
			return &runError{err}
		}
		return nil
	}
}

// groupArgs refuses arguments of a command that only groups subcommands.
func groupArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %q?)", s[0])
	}
	return errors.New(msg)
}

// groupRun is the action of a command that only groups subcommands: called
// without one, it is a usage error.
func groupRun(cmd *cobra.Command, _ []string) error {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	return fmt.Errorf("%s needs a command, one of: %s", cmd.CommandPath(), strings.Join(names, ", "))
}

// flagError gives flag parsing errors their command.
func flagError(cmd *cobra.Command, err error) error {
	return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
}

// exactArgs requires one positional argument per name, naming what is
// missing or extra.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) < len(names):
			return fmt.Errorf("%s: missing argument %s", cmd.CommandPath(), strings.Join(names[len(args):], " "))
		case len(args) > len(names):
			return fmt.Errorf("%s: unexpected argument %q", cmd.CommandPath(), args[len(names)])
		}
		return nil
	}
}

// writeJSON writes v as one line of compact JSON, without HTML escaping.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// emit writes v as one JSON line on stdout.
func (a *app) emit(v any) error { return writeJSON(a.stdout, v) }

// warnUnredacted prints the warning of the product page: bundles hold raw
// inputs and outputs.
func (a *app) warnUnredacted(what string) {
	fmt.Fprintf(a.stderr, "warning: %s holds the run's inputs and outputs unredacted; treat it like the data the run touched\n", what)
}

// oneLine folds a multi-line message onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
