package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/cli/internal/htmlreport"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/internal/redact"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/capture"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/replay"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/suite"
	"github.com/pyrula/caseworker/version"
)

// The statuses of a case test line.
const (
	suitePass  = "pass"
	suiteFail  = "fail"
	suiteError = "error"
)

// suiteCase is one case a suite found: a bundle file, a stored hash, or a
// recorded run of the journal at its fork.
type suiteCase struct {
	file string      // the file's path; empty for a hash
	hash bundle.Hash // the hash argument; empty for a file
	run  string      // a recorded run's id (--from-journal)
	fork *int64      // the run's fork; nil keeps its inputs only
}

// suiteLine is the {"type":"case"} line of one case of `case test`.
type suiteLine struct {
	Type string `json:"type"`
	// File is the bundle file's path (null for a hash argument).
	File *string `json:"file"`
	// RunID is the recorded run a --from-journal case was rebuilt from
	// (absent for other cases).
	RunID *string `json:"run_id,omitempty"`
	// FixtureHash is null when the file could not be read as a bundle.
	FixtureHash *string `json:"fixture_hash"`
	// Target is null when the case could not be read.
	Target *string `json:"target"`
	// Status is pass, fail (the case ran and did not pass) or error (it
	// could not run: an unreadable bundle, an unknown target).
	Status string `json:"status"`
	// RunStatus is the case run's status (complete, error, …), null when
	// it did not run.
	RunStatus *string `json:"run_status"`
	// Code is the reason code: the run's (prefix_diverged,
	// replay_diverged, runtime_error, …) or why it could not run
	// (bundle_corrupt, bundle_missing, …); null for a pass, and for a run
	// that completed but left recorded calls unconsumed.
	Code *string `json:"code"`
	// Reason is replay_diverged's reason: input_changed, unexpected_call
	// or recorded_error.
	Reason  *string `json:"reason"`
	Message *string `json:"message"`
	// StopKey is the call that stopped the run, as the outcome has it.
	StopKey json.RawMessage `json:"stop_key"`
	// Divergence is the call that left the recording, with both
	// fingerprints and the field-level input diff.
	Divergence *replay.Divergence `json:"divergence"`
	// ChangedAxes are what the case run changed from the recording
	// (replay.Outcome.ChangedAxes: under case test, code_version or none).
	ChangedAxes []string `json:"changed_axes"`
	// UnconsumedKeys are the recorded calls the run never made.
	UnconsumedKeys []string `json:"unconsumed_keys"`
	PrefixCalls    int      `json:"prefix_calls"`
	Calls          int      `json:"calls"`
	DurationMS     int64    `json:"duration_ms"`

	// name is the case's name in the JUnit report (the file or the hash).
	name     string
	duration time.Duration
	// timeline is the case run's calls, kept for the --html report of a
	// case that did not pass.
	timeline []htmlreport.Call
}

// suiteSummary is the last line of `case test`.
type suiteSummary struct {
	Type       string `json:"type"`
	Cases      int    `json:"cases"`
	Passed     int    `json:"passed"`
	Failed     int    `json:"failed"`
	Errors     int    `json:"errors"`
	DurationMS int64  `json:"duration_ms"`
}

// caseTestFlags are the flags of `case test`.
type caseTestFlags struct {
	target, junit, format, html string
	title                       string // the --html report's title
	parallel                    int
	values                      bool
	// The selections a run_suite makes: --stored TARGET [--limit N], or
	// --from-journal TARGET [--after T] [--before T] [--sample N --seed S]
	// [--fork F]; --min-cases N.
	stored, fromJournal, after, before, fork string
	limit, sample, minCases                  int
	seed                                     uint64
}

// caseTestCmd is `case test PATH|HASH… [--target NAME] [--parallel N] [--junit FILE]`.
func (a *app) caseTestCmd() *cobra.Command {
	var f caseTestFlags
	c := &cobra.Command{
		Use:   "test PATH|HASH…",
		Short: "Replay every case found replay-only: a suite for CI, with JUnit XML",
		Long: `Case-runs every case found replay-only (no live calls, no model client)
against its manifest's target_name (or --target), --parallel at a time. A
PATH is a bundle file or a directory searched recursively for .case and
.json files (directories whose names start with "." are skipped below it);
a HASH is read from the fixture store.

Prints one {"type":"case"} line per case, in the order found (file, fixture
hash, target, status pass/fail/error, the run's code, reason, stop_key,
divergence and unconsumed_keys), then one {"type":"summary"} line.
--junit FILE also writes a JUnit XML report (one testcase per case, the
divergence in the failure message). --values puts the recorded and the
actual value at each path in the divergences (and warns on stderr: bundles
hold unredacted data). --format table prints a row per case, the detail of
each failure and the summary for people.

--stored TARGET also tests every case of TARGET in the fixture store;
--from-journal TARGET the completed runs of TARGET in the journal, each
rebuilt as a case forked after its start (--after, --before, --sample N
--seed S, --fork inputs_only), as a worker's run_suite selects them.
--min-cases N: fewer cases is suite_too_small (exit 3), never a pass.

Exit 0 when every case passes; 3 when one failed or could not run, or too
few were found (suite_too_small); 1 when no case was found or for invalid
input; 2 a refusal before any case ran (invalid_fixture_hash,
no_fixture_store).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 && f.stored == "" && f.fromJournal == "" {
				return fmt.Errorf("%s: missing argument PATH|HASH (or --stored TARGET, --from-journal TARGET)", cmd.CommandPath())
			}
			return nil
		},
	}
	c.RunE = a.run(func(ctx context.Context, args []string) error {
		return a.caseTest(ctx, args, f)
	})
	fl := c.Flags()
	fl.StringVar(&f.target, "target", "", "run every case against this registered target (default each case's target_name)")
	fl.IntVar(&f.parallel, "parallel", runtime.GOMAXPROCS(0), "how many cases run at once")
	fl.StringVar(&f.junit, "junit", "", "also write a JUnit XML report to this file")
	fl.BoolVar(&f.values, "values", false, "include the recorded and actual values at each path of a divergence")
	fl.StringVar(&f.html, "html", "", "also write the report as one self-contained HTML page to this file")
	fl.StringVar(&f.format, "format", formatJSON, "json (JSON lines) or table")
	fl.StringVar(&f.stored, "stored", "", "also test every case of this target in the fixture store, in hash order")
	fl.IntVar(&f.limit, "limit", 0, "with --stored: the first N cases only")
	fl.StringVar(&f.fromJournal, "from-journal", "", "also test the completed runs of this target in the journal (Valkey and the archive), each rebuilt as a case")
	fl.StringVar(&f.after, "after", "", "with --from-journal: runs that finished at or after this time (RFC 3339)")
	fl.StringVar(&f.before, "before", "", "with --from-journal: runs that finished before this time (RFC 3339)")
	fl.IntVar(&f.sample, "sample", 0, "with --from-journal: N runs drawn with --seed (the same runs and seed draw the same sample)")
	fl.Uint64Var(&f.seed, "seed", 0, "with --sample: the seed of the draw")
	fl.StringVar(&f.fork, "fork", messages.ForkAfterStart, "with --from-journal: after_start (every call replayed against the recording) or inputs_only")
	fl.IntVar(&f.minCases, "min-cases", 1, "the least number of cases that counts as a suite (fewer: suite_too_small, exit 3)")
	a.journalFlags(c)
	return c
}

func (a *app) caseTest(ctx context.Context, args []string, f caseTestFlags) error {
	if err := checkFormat("case test", f.format); err != nil {
		return err
	}
	if f.parallel < 1 {
		return fmt.Errorf("case test: --parallel %d: want 1 or more", f.parallel)
	}
	if f.target != "" {
		info, err := a.lookupTarget("case test", f.target)
		if err != nil {
			return err
		}
		f.target = info.Name
	}
	if f.junit != "" {
		if st, err := os.Stat(filepath.Dir(f.junit)); err != nil || !st.IsDir() {
			return fmt.Errorf("case test: --junit %s: its directory does not exist", f.junit)
		}
	}
	if err := checkHTMLPath("case test", f.html); err != nil {
		return err
	}
	f.title = a.name() + " case test " + strings.Join(args, " ")
	cases, err := findCases(args)
	if err != nil {
		return err
	}
	q, err := f.journalQuery()
	if err != nil {
		return err
	}
	if len(cases) == 0 && f.stored == "" && f.fromJournal == "" {
		return fmt.Errorf("case test: no case found in %s (a case is a .case or .json bundle file, or a fixture hash)", strings.Join(args, " "))
	}
	needStore := f.stored != "" || slices.ContainsFunc(cases, func(c suiteCase) bool { return c.hash != "" })
	withStore := func(run func(store.Store) error) error {
		if !needStore {
			return run(nil)
		}
		return a.withStore(ctx, run)
	}
	return withStore(func(s store.Store) error {
		if f.stored != "" {
			sel, err := suite.SelectStored(ctx, s, f.stored, f.limit)
			if err != nil {
				return fmt.Errorf("case test: --stored: %w", err)
			}
			for _, h := range sel.Cases {
				cases = append(cases, suiteCase{hash: bundle.Hash(h)})
			}
		}
		if f.fromJournal == "" {
			return a.runSuite(ctx, cases, s, nil, f)
		}
		return a.withJournal(ctx, func(j journal.Journal) error {
			sel, err := suite.SelectRuns(ctx, j, f.fromJournal, q)
			if err != nil {
				return fmt.Errorf("case test: --from-journal: %w", err)
			}
			for i, id := range sel.Cases {
				c := suiteCase{run: id}
				if i < len(sel.Forks) {
					c.fork = &sel.Forks[i]
				}
				cases = append(cases, c)
			}
			return a.runSuite(ctx, cases, s, j, f)
		})
	})
}

// journalQuery is --from-journal's selection: its bounds, sample and fork,
// checked.
func (f caseTestFlags) journalQuery() (messages.SuiteJournalCases, error) {
	q := messages.SuiteJournalCases{Sample: f.sample, Seed: f.seed, Fork: f.fork}
	for _, b := range []struct {
		flag, value string
		to          *time.Time
	}{{"--after", f.after, &q.After}, {"--before", f.before, &q.Before}} {
		if b.value == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, b.value)
		if err != nil {
			return q, fmt.Errorf("case test: %s %q is not an RFC 3339 time (2026-12-04T09:00:00Z)", b.flag, b.value)
		}
		*b.to = t
	}
	switch {
	case f.fork != messages.ForkAfterStart && f.fork != messages.ForkInputsOnly:
		return q, fmt.Errorf("case test: --fork %q is not %s or %s", f.fork, messages.ForkAfterStart, messages.ForkInputsOnly)
	case f.sample < 0 || f.limit < 0 || f.minCases < 0:
		return q, errors.New("case test: --sample, --limit and --min-cases must not be negative")
	case f.fromJournal == "" && (f.after != "" || f.before != "" || f.sample != 0):
		return q, errors.New("case test: --after, --before and --sample select runs of --from-journal TARGET")
	case f.stored == "" && f.limit != 0:
		return q, errors.New("case test: --limit applies to --stored TARGET")
	}
	return q, nil
}

// findCases expands the arguments into cases, in order: a file as given, a
// directory's .case and .json files in lexical order of their paths, a
// hash. A path that does not exist is invalid input; an argument that is
// neither a path nor a hash refuses with invalid_fixture_hash.
func findCases(args []string) ([]suiteCase, error) {
	var out []suiteCase
	for _, arg := range args {
		st, err := os.Stat(arg)
		switch {
		case err == nil && st.IsDir():
			err := filepath.WalkDir(arg, func(path string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if d.IsDir() {
					if path != arg && strings.HasPrefix(d.Name(), ".") {
						return filepath.SkipDir
					}
					return nil
				}
				if ext := filepath.Ext(path); (ext == ".case" || ext == ".json") && d.Type().IsRegular() {
					out = append(out, suiteCase{file: path})
				}
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("case test: %w", err)
			}
		case err == nil:
			out = append(out, suiteCase{file: arg})
		case looksLikePath(arg) || !errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("case test: %w", err)
		default:
			h, err := parseHash(arg)
			if err != nil {
				return nil, err
			}
			out = append(out, suiteCase{hash: h})
		}
	}
	return out, nil
}

// runSuite runs the cases, at most f.parallel at once, prints their lines
// in order as they finish and the summary, and writes the JUnit report.
func (a *app) runSuite(ctx context.Context, cases []suiteCase, s store.Store, j journal.Journal, f caseTestFlags) error {
	if len(cases) < max(f.minCases, 1) {
		var where []string
		if f.stored != "" {
			where = append(where, "the fixture store's cases of "+f.stored)
		}
		if f.fromJournal != "" {
			where = append(where, "the completed runs of "+f.fromJournal+" in the journal's namespace "+a.journalNamespace())
		}
		if len(where) == 0 {
			where = append(where, "the arguments")
		}
		return messages.Errorf(messages.SuiteTooSmall, "case test found %d case(s) in %s, fewer than --min-cases %d: a suite of fewer cases never passes",
			len(cases), strings.Join(where, " and "), max(f.minCases, 1))
	}
	if f.values {
		what := "the output of case test --values"
		if f.junit != "" {
			what += " (and its --junit report)"
		}
		a.warnUnredacted(what)
	}
	table := f.format == formatTable
	start := time.Now()
	runCtx, stop := cancelOnInterrupt(ctx)
	defer stop()
	done := make([]chan suiteLine, len(cases))
	for i := range done {
		done[i] = make(chan suiteLine, 1)
	}
	slots := make(chan struct{}, f.parallel)
	go func() {
		for i, c := range cases {
			slots <- struct{}{}
			go func() {
				defer func() { <-slots }()
				done[i] <- a.testOne(runCtx, c, s, j, f)
			}()
		}
	}()
	lines := make([]suiteLine, 0, len(cases))
	sum := suiteSummary{Type: "summary", Cases: len(cases)}
	var emitErr error
	for i := range cases {
		line := <-done[i]
		lines = append(lines, line)
		switch line.Status {
		case suitePass:
			sum.Passed++
		case suiteFail:
			sum.Failed++
		default:
			sum.Errors++
		}
		if emitErr == nil && !table {
			emitErr = a.emit(line)
		}
	}
	if emitErr != nil {
		return emitErr
	}
	elapsed := time.Since(start)
	sum.DurationMS = elapsed.Milliseconds()
	if f.junit != "" {
		if err := writeJUnit(f.junit, lines, sum, elapsed); err != nil {
			return fmt.Errorf("case test: --junit: %w", err)
		}
	}
	if f.html != "" {
		if err := writeReport(f.html, suiteReport(f.title, f.values, lines, sum)); err != nil {
			return fmt.Errorf("case test: --html: %w", err)
		}
	}
	if table {
		if err := writeSuiteTable(a.stdout, lines, sum); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
	} else if err := a.emit(sum); err != nil {
		return err
	}
	if sum.Passed != sum.Cases {
		return exitStatus(messages.ExitRunFailed)
	}
	return nil
}

// testOne reads one case and runs it replay-only, timing both.
func (a *app) testOne(ctx context.Context, c suiteCase, s store.Store, j journal.Journal, f caseTestFlags) suiteLine {
	start := time.Now()
	line := a.testCase(ctx, c, s, j, f)
	line.duration = time.Since(start)
	line.DurationMS = line.duration.Milliseconds()
	return line
}

// testCase reads one case and runs it replay-only; values puts the values
// at each path in its divergence.
func (a *app) testCase(ctx context.Context, c suiteCase, s store.Store, j journal.Journal, f caseTestFlags) suiteLine {
	line := suiteLine{Type: "case", UnconsumedKeys: []string{}, ChangedAxes: []string{}, StopKey: json.RawMessage("null")}
	switch {
	case c.file != "":
		line.File, line.name = strp(c.file), c.file
	case c.run != "":
		line.RunID, line.name = strp(c.run), c.run
	default:
		line.FixtureHash, line.name = strp(string(c.hash)), string(c.hash)
	}
	fail := func(err error) suiteLine {
		line.Status = suiteError
		msg := err.Error()
		if e := messages.AsError(err); e != nil {
			line.Code = strp(string(e.Code))
			msg = cmp.Or(e.Message, msg)
		}
		line.Message = strp(redact.Secrets(oneLine(msg)))
		return line
	}
	var cb *bundle.Canonical
	var err error
	switch {
	case c.file != "":
		cb, err = readBundleFile("case test", c.file)
	case c.run != "":
		cb, err = capture.FromJournal(ctx, j, capture.FromJournalParams{
			Target: f.fromJournal, RunID: c.run, Params: capture.Params{ForkAfterSeq: c.fork, PyrulaVersion: version.Version},
			Registration: func(target string) (bundle.Registration, error) {
				info, ok := a.registry().Lookup(target)
				if !ok {
					return bundle.Registration{}, fmt.Errorf("no target %q is registered in this binary (see %s targets)", target, a.name())
				}
				return info.Registration, nil
			},
		})
	default:
		cb, err = store.LoadWith(ctx, s, c.hash, bundle.Options{Decode: true})
	}
	if err != nil {
		return fail(err)
	}
	line.FixtureHash = strp(string(cb.Hash()))
	b, err := cb.Decode()
	if err != nil {
		return fail(err)
	}
	memLog := host.NewMemLog()
	p := replay.Params{Bundle: b, Canonical: true, FixtureHash: string(cb.Hash()), Registry: a.registry(),
		Log: memLog, Target: f.target, RunID: "case_" + strings.TrimPrefix(newRunID(), "run_")}
	p.ReplayOnly, p.Values = true, f.values
	if p.Target == "" {
		p.Target = b.Manifest.TargetName
	}
	line.Target = strp(p.Target)
	info, ok := p.Registry.Lookup(p.Target)
	if !ok {
		return fail(fmt.Errorf("no target %q is registered (see %s targets)", p.Target, a.name()))
	}
	if err := replay.CheckOptions(p.Options, info, b); err != nil {
		return fail(err)
	}
	rep, err := replay.Run(ctx, p)
	if err != nil {
		return fail(err)
	}
	o := rep.Outcome
	line.RunStatus = strp(string(o.Status))
	line.PrefixCalls, line.Calls = o.PrefixCalls, len(rep.Calls)
	if o.Code != "" {
		line.Code = strp(o.Code)
	}
	if o.Reason != "" {
		line.Reason = strp(o.Reason)
	}
	if o.Message != "" {
		line.Message = strp(redact.Secrets(oneLine(o.Message)))
	}
	if len(o.StopKey) > 0 {
		line.StopKey = o.StopKey
	}
	line.Divergence = o.Divergence
	if o.ChangedAxes != nil {
		line.ChangedAxes = o.ChangedAxes
	}
	if o.UnconsumedKeys != nil {
		line.UnconsumedKeys = *o.UnconsumedKeys
	}
	line.Status = suiteFail
	if rep.ExitStatus() == messages.ExitOK {
		line.Status = suitePass
	} else if line.Message == nil && len(line.UnconsumedKeys) > 0 {
		line.Message = strp(fmt.Sprintf("the run completed but never made %d recorded call(s): %s",
			len(line.UnconsumedKeys), strings.Join(line.UnconsumedKeys, ", ")))
	}
	if f.html != "" && line.Status != suitePass {
		line.timeline = timeline(memLog, p.RunID, rep.Calls, o, f.values)
	}
	return line
}

// writeSuiteTable writes case test's lines as a table for people: a row
// per case (STATUS, TARGET, CASE: the file or the hash's first 12
// characters, CODE/REASON, DIVERGENCE: the call and what changed), then
// for each case that did not pass its message, the recorded calls it never
// made and its divergence's detail (writeDivergence), then the summary.
func writeSuiteTable(w io.Writer, lines []suiteLine, sum suiteSummary) error {
	t := newTable()
	t.row("STATUS", "TARGET", "CASE", "CODE/REASON", "DIVERGENCE")
	for _, l := range lines {
		t.row(l.Status, cell(deref(l.Target)), cell(l.caseName()), cell(l.codeText()), divergenceText(l.Divergence))
	}
	if err := t.writeTo(w); err != nil {
		return err
	}
	for _, l := range lines {
		if l.Status == suitePass {
			continue
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "%s %s: %s\n", strings.ToUpper(l.Status), cell(l.caseName()), cell(l.codeText()))
		if l.Message != nil {
			field(w, "  ", "message", *l.Message)
		}
		if len(l.UnconsumedKeys) > 0 {
			field(w, "  ", "never made", listText(l.UnconsumedKeys))
		}
		if l.Divergence != nil {
			field(w, "  ", "divergence")
			writeDivergence(w, l.Divergence, "    ")
		}
	}
	fmt.Fprintln(w)
	_, err := fmt.Fprintf(w, "%s: %d passed, %d failed, %s in %d ms\n",
		count(sum.Cases, "case", "cases"), sum.Passed, sum.Failed, count(sum.Errors, "error", "errors"), sum.DurationMS)
	return err
}

// caseName is the case's file, else its hash's first 12 characters.
func (l suiteLine) caseName() string {
	switch {
	case l.File != nil:
		return *l.File
	case l.RunID != nil:
		return "run " + *l.RunID
	}
	return short(l.FixtureHash)
}

// codeText is the code and the reason, "unconsumed_keys" for a run that
// completed leaving recorded calls unconsumed, "" for a pass.
func (l suiteLine) codeText() string {
	if l.Status == suitePass {
		return ""
	}
	s := problemType(l)
	if l.Reason != nil {
		s += " (" + *l.Reason + ")"
	}
	return s
}

// divergenceText is a divergence on one cell: the call and what changed.
func divergenceText(d *replay.Divergence) string {
	if d == nil {
		return "-"
	}
	s := cmp.Or(d.Call, "(no call)")
	if what := d.What(); what != "" {
		s += ": " + what
	}
	return cell(s)
}

// The JUnit XML report: the schema CI systems read (Jenkins, GitLab,
// GitHub Actions' test reporters).
type (
	junitSuites struct {
		XMLName  xml.Name     `xml:"testsuites"`
		Name     string       `xml:"name,attr"`
		Tests    int          `xml:"tests,attr"`
		Failures int          `xml:"failures,attr"`
		Errors   int          `xml:"errors,attr"`
		Time     string       `xml:"time,attr"`
		Suites   []junitSuite `xml:"testsuite"`
	}
	junitSuite struct {
		Name      string      `xml:"name,attr"`
		Tests     int         `xml:"tests,attr"`
		Failures  int         `xml:"failures,attr"`
		Errors    int         `xml:"errors,attr"`
		Skipped   int         `xml:"skipped,attr"`
		Time      string      `xml:"time,attr"`
		Timestamp string      `xml:"timestamp,attr"`
		Cases     []junitCase `xml:"testcase"`
	}
	junitCase struct {
		Name      string        `xml:"name,attr"`
		Classname string        `xml:"classname,attr"`
		File      string        `xml:"file,attr,omitempty"`
		Time      string        `xml:"time,attr"`
		Failure   *junitProblem `xml:"failure,omitempty"`
		Error     *junitProblem `xml:"error,omitempty"`
	}
	junitProblem struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr"`
		Text    string `xml:",cdata"`
	}
)

// writeJUnit writes the report atomically.
func writeJUnit(path string, lines []suiteLine, sum suiteSummary, elapsed time.Duration) error {
	suite := junitSuite{Name: "pyrula case test", Tests: sum.Cases, Failures: sum.Failed, Errors: sum.Errors,
		Time: seconds(elapsed), Timestamp: time.Now().UTC().Add(-elapsed).Format("2006-01-02T15:04:05"),
		Cases: make([]junitCase, 0, len(lines))}
	for _, l := range lines {
		tc := junitCase{Name: l.name, Classname: "pyrula." + deref(l.Target), File: deref(l.File), Time: seconds(l.duration)}
		if l.Target == nil {
			tc.Classname = "pyrula"
		}
		if l.Status != suitePass {
			body, err := json.MarshalIndent(l, "", "  ")
			if err != nil {
				return err
			}
			p := &junitProblem{Message: failureMessage(l), Type: problemType(l), Text: string(body)}
			if l.Status == suiteError {
				tc.Error = p
			} else {
				tc.Failure = p
			}
		}
		suite.Cases = append(suite.Cases, tc)
	}
	doc := junitSuites{Name: suite.Name, Tests: suite.Tests, Failures: suite.Failures, Errors: suite.Errors,
		Time: suite.Time, Suites: []junitSuite{suite}}
	_, err := writeFileAtomic(path, exportPerm, func(w io.Writer) error {
		if _, err := io.WriteString(w, xml.Header); err != nil {
			return err
		}
		enc := xml.NewEncoder(w)
		enc.Indent("", "  ")
		if err := enc.Encode(doc); err != nil {
			return err
		}
		_, err := io.WriteString(w, "\n")
		return err
	})
	return err
}

// failureMessage words a failed case on one line: the code and reason,
// the diverging call with both fingerprints and the input paths that
// differ, or the unconsumed calls.
func failureMessage(l suiteLine) string {
	var b strings.Builder
	b.WriteString(problemType(l))
	if l.Reason != nil {
		fmt.Fprintf(&b, " (%s)", *l.Reason)
	}
	if d := l.Divergence; d != nil {
		call := cmp.Or(d.Call, "(no call)")
		fmt.Fprintf(&b, " at %s", call)
		if d.RecordedCall != "" && d.RecordedCall != d.Call {
			fmt.Fprintf(&b, ", recorded %s", d.RecordedCall)
		}
		if what := d.What(); what != "" {
			fmt.Fprintf(&b, ": %s", what)
		}
		if d.RecordedFingerprint != "" {
			fmt.Fprintf(&b, " (recorded fingerprint %s, actual %s)", d.RecordedFingerprint, d.ActualFingerprint)
		}
		if d.RulesChanged != nil {
			b.WriteString("; the code's volatile-field rules differ from the recorded ones")
		}
	} else if l.Message != nil {
		fmt.Fprintf(&b, ": %s", *l.Message)
	}
	return b.String()
}

// problemType names why a case did not pass when its line has no code: a
// case that could not run is an "error"; one that ran is "unconsumed_keys"
// (it completed and left recorded calls unmade).
func problemType(l suiteLine) string {
	switch {
	case l.Code != nil:
		return *l.Code
	case l.Status == suiteError:
		return suiteError
	}
	return "unconsumed_keys"
}

// seconds is a duration in seconds with millisecond precision, as JUnit
// writes times.
func seconds(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }
