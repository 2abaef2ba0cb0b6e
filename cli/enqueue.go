package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/redact"
	"github.com/pyrula/caseworker/internal/tracing"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/replay"
	"github.com/pyrula/caseworker/runevent"
	"github.com/pyrula/caseworker/suite"
	"github.com/pyrula/caseworker/worker/client"
)

// Environment of enqueue besides PYRULA_VALKEY_URL and PYRULA_NAMESPACE:
// the worker's streams, read as the worker reads them.
const (
	envCaseStream  = "PYRULA_CASE_STREAM"
	envReplyStream = "PYRULA_REPLY_STREAM"
	// envTraceparent and envTracestate carry the caller's W3C trace context
	// (a CI job's, as OpenTelemetry's CI tools set them): the message is
	// sent under it, so that the worker's spans continue that trace.
	envTraceparent = "TRACEPARENT"
	envTracestate  = "TRACESTATE"
)

// enqueueTypes are the message types enqueue sends.
var enqueueTypes = []messages.MessageType{messages.SaveCase, messages.RunCase, messages.DeleteCaseBundle, messages.StartRun, messages.RunSuite}

// enqueueCmd is `enqueue TYPE --body JSON|@FILE [--message-id ID] [--wait]
// [--follow] [--timeout D]`: the platform side of the worker protocol, for
// operators and tests.
func (a *app) enqueueCmd() *cobra.Command {
	var body, messageID, format, html string
	var wait, follow bool
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "enqueue TYPE --body JSON|@FILE",
		Short: "Send a message to the case worker and wait for its reply",
		Long: `Sends a message of TYPE (save_case, run_case, delete_case_bundle,
start_run or run_suite) with the JSON object --body (or @FILE, @- for standard input) to
the worker's case stream (PYRULA_CASE_STREAM, default <namespace>:case-messages,
on PYRULA_VALKEY_URL), asking for the reply on PYRULA_REPLY_STREAM (default
<namespace>:case-replies). The message id is --message-id or a new one;
resending an id gets the same reply. A W3C trace context in TRACEPARENT
(and TRACESTATE) goes with the message, so that the worker's spans of it
and of its run continue that trace.

Without --wait it prints what was sent: {"message_id", "type", "entry_id",
"stream", "reply_to"}. With --wait it prints the reply as one JSON line; with
--follow (implies --wait) it then prints each event of a start_run or
run_case run, or of a run_suite's suite, as a JSON line, as it arrives,
until the terminal one.

--format table prints the same for people: what was sent or the reply on
one line, one short line per event (run_seq, kind, the call and its
provenance, a run:error's code and message), then the run's id, status
and code and, for a case run, its outcome (cause, changes, changed axes,
counts, cost) and its divergence's detail; for a suite, its children by
status, its failures grouped by code, call and changed fields, and its
arms.

--html FILE, with --follow of a run_case or run_suite, also writes the
report as one self-contained HTML page once the run ends, as the case
commands do: a case run's outcome and call timeline, or a suite's failure
groups (each example child with its divergence and timeline, read from the
child's events), its arms and the arms against the first.

Exit status: 0 an ok reply (and, when following, a completed run: for a
suite, every child passed); 2 a refused reply; 3 an error reply, or a
followed run that ended with run:error (a suite with a child that did not
pass), was cancelled or suspended; 1 invalid input or an operational error
(including no reply within --timeout).`,
		Args: exactArgs("TYPE"),
		RunE: a.run(func(ctx context.Context, args []string) error {
			if err := checkFormat("enqueue", format); err != nil {
				return err
			}
			typ := messages.MessageType(args[0])
			if !isEnqueueType(typ) {
				return fmt.Errorf("enqueue: unknown message type %q (one of %s)", args[0], enqueueTypeList())
			}
			raw, err := a.readBody(body)
			if err != nil {
				return err
			}
			if timeout < 0 {
				return errors.New("enqueue: --timeout must not be negative")
			}
			if html != "" && (!follow || (typ != messages.RunCase && typ != messages.RunSuite)) {
				return fmt.Errorf("enqueue: --html needs --follow and a run_case or run_suite message, not %s", typ)
			}
			if err := checkHTMLPath("enqueue", html); err != nil {
				return err
			}
			return a.withValkey(func(vc valkey.Client, ns string) error {
				cl, err := client.New(vc, client.Options{
					Namespace: ns, CaseStream: a.getenv(envCaseStream), ReplyStream: a.getenv(envReplyStream),
				})
				if err != nil {
					return fmt.Errorf("enqueue: %w", err)
				}
				return a.enqueue(ctx, cl, client.Message{MessageID: messageID, Type: typ, Body: raw},
					enqueueFlags{wait: wait || follow, follow: follow, table: format == formatTable, timeout: timeout, html: html})
			})
		}),
	}
	c.Flags().StringVar(&body, "body", "", "the message body: a JSON object, or @FILE (@- for standard input)")
	c.Flags().StringVar(&messageID, "message-id", "", "the message id (default a new msg_<hex>)")
	c.Flags().BoolVar(&wait, "wait", false, "wait for the reply and print it")
	c.Flags().BoolVar(&follow, "follow", false, "wait for the reply, then print the run's events until the terminal one")
	c.Flags().DurationVar(&timeout, "timeout", 0, "give up waiting after this long, e.g. 30s (default: wait until interrupted)")
	c.Flags().StringVar(&format, "format", formatJSON, "json (JSON lines) or table")
	c.Flags().StringVar(&html, "html", "", "with --follow of a run_case or run_suite, also write its report as one self-contained HTML page to this file")
	a.journalFlags(c)
	return c
}

func isEnqueueType(t messages.MessageType) bool {
	for _, k := range enqueueTypes {
		if t == k {
			return true
		}
	}
	return false
}

func enqueueTypeList() string {
	names := make([]string, len(enqueueTypes))
	for i, t := range enqueueTypes {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}

// readBody reads --body: inline JSON or @FILE; it must be a JSON object.
func (a *app) readBody(flag string) (json.RawMessage, error) {
	if flag == "" {
		return nil, errors.New("enqueue: --body is required (a JSON object, or @FILE)")
	}
	raw := []byte(flag)
	if name, ok := strings.CutPrefix(flag, "@"); ok {
		var err error
		if name == "-" {
			raw, err = io.ReadAll(a.stdin)
		} else {
			raw, err = os.ReadFile(name)
		}
		if err != nil {
			return nil, fmt.Errorf("enqueue: read --body %s: %w", flag, err)
		}
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, errors.New("enqueue: --body is not a JSON object")
	}
	return json.RawMessage(strings.TrimSpace(string(raw))), nil
}

// withValkey connects to PYRULA_VALKEY_URL (default redis://127.0.0.1:6379/0)
// and resolves the namespace (--namespace, PYRULA_NAMESPACE, pyrula), as the
// journal commands do.
func (a *app) withValkey(f func(valkey.Client, string) error) error {
	ns := a.journalNamespace()
	if err := journal.CheckNamespace(ns); err != nil {
		return err
	}
	vc, err := a.valkeyClient()
	if err != nil {
		return err
	}
	defer vc.Close()
	return f(vc, ns)
}

// enqueueFlags say how far enqueue goes and how it prints.
type enqueueFlags struct {
	wait, follow, table bool
	timeout             time.Duration
	html                string // --html FILE: write the followed run's report there
}

// enqueue sends m and, when asked, waits for its reply and follows its run.
func (a *app) enqueue(ctx context.Context, cl *client.Client, m client.Message, f enqueueFlags) error {
	if tp := a.getenv(envTraceparent); tp != "" {
		var ok bool
		if ctx, ok = tracing.ContextOf(ctx, tp, a.getenv(envTracestate)); !ok {
			// Optional: the message goes without it, said once.
			fmt.Fprintf(a.stderr, "warning: %s is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>); the message is sent without a trace context\n", envTraceparent)
		}
	}
	sent, err := cl.Send(ctx, m)
	if err != nil {
		return err
	}
	if !f.wait {
		if f.table {
			_, err := fmt.Fprintf(a.stdout, "sent %s %s: entry %s on %s, reply to %s\n", sent.MessageID, sent.Type, sent.EntryID, sent.Stream, sent.ReplyTo)
			return err
		}
		return a.emit(sent)
	}
	timeout := f.timeout
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	r, err := cl.Reply(ctx, sent)
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("enqueue: no reply to %s within --timeout %s (is a worker consuming %s?)", sent.MessageID, timeout, sent.Stream)
	}
	if err != nil {
		return err
	}
	if f.table {
		err = writeReplyLine(a.stdout, r)
	} else {
		err = a.emit(r)
	}
	if err != nil {
		return err
	}
	switch r.Status {
	case messages.StatusRefused:
		return exitStatus(messages.ExitRefused)
	case messages.StatusError:
		return exitStatus(messages.ExitRunFailed)
	}
	if !f.follow || (m.Type != messages.StartRun && m.Type != messages.RunCase && m.Type != messages.RunSuite) {
		return nil
	}
	res, err := followed(r)
	if err != nil {
		return err
	}
	var sum followSummary
	var rep followedReport
	end, err := cl.Follow(ctx, res.Events, func(ev journal.Event) error {
		raw, err := ev.JSON()
		if err != nil {
			return err
		}
		if f.html != "" {
			rep.keep(ev, raw)
		}
		if !f.table {
			_, err = fmt.Fprintf(a.stdout, "%s\n", raw)
			return err
		}
		return sum.event(a.stdout, ev, raw)
	})
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("enqueue: run %s did not end within --timeout %s", res.RunID, timeout)
	}
	if err != nil {
		return err
	}
	if f.table {
		if err := sum.write(a.stdout, res.RunID, end); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
	}
	if f.html != "" {
		if !rep.ready() {
			// Nothing to draw (a run refused or cancelled before it
			// started): the run's end decides the exit status.
			fmt.Fprintf(a.stderr, "warning: --html: run %s ended with no outcome event, so no report was written\n", res.RunID)
		} else {
			r, err := rep.report(ctx, cl, res.RunID)
			if err == nil {
				err = writeReport(f.html, r)
			}
			if err != nil {
				return fmt.Errorf("enqueue: --html: %w", err)
			}
		}
	}
	if end.Status != journal.StatusComplete {
		return exitStatus(messages.ExitRunFailed)
	}
	return nil
}

// followed is the run an ok reply of start_run, run_case or run_suite
// names: its id and its events stream.
func followed(r messages.Reply) (messages.RunResult, error) {
	if r.Type != messages.RunSuite {
		return client.RunResult(r)
	}
	var res messages.RunSuiteResult
	if err := json.Unmarshal(r.Result, &res); err != nil || res.SuiteID == "" || res.Events == "" {
		return messages.RunResult{}, fmt.Errorf("enqueue: the reply's result %.200s is not {suite_id, events}", r.Result)
	}
	return messages.RunResult{RunID: res.SuiteID, Events: res.Events}, nil
}

// writeReplyLine writes a reply on one line for people: the message, its
// status, the code and message of a refusal or an error, the result of an
// ok reply.
func writeReplyLine(w io.Writer, r messages.Reply) error {
	line := fmt.Sprintf("reply %s %s: %s", cell(r.MessageID), r.Type, r.Status)
	if r.Code != "" {
		line += " " + string(r.Code)
	}
	if r.Message != "" {
		line += ": " + redact.Secrets(oneLine(r.Message))
	}
	if len(r.Result) > 0 {
		line += " " + rawText(r.Result)
	}
	_, err := fmt.Fprintln(w, line)
	return err
}

// followEvent is what a followed run's event line for people shows, and
// what the summary keeps of a run:error.
type followEvent struct {
	RunSeq int64  `json:"run_seq"`
	Kind   string `json:"kind"`
	Call   *struct {
		Kind string `json:"kind"`
		Key  string `json:"key"`
	} `json:"call"`
	// Provenance is a string on call:done and case:call (the counts by
	// provenance on case:outcome).
	Provenance json.RawMessage    `json:"provenance"`
	Code       string             `json:"code"`
	Message    string             `json:"message"`
	Status     string             `json:"status"`
	Change     *replay.Divergence `json:"change"`
	Divergence *replay.Divergence `json:"divergence"`
}

// followSummary is what the summary after a followed run needs: the
// case:outcome of a case run, the change of its cause (a case:call) and
// the run:error's divergence and message.
type followSummary struct {
	outcome    *replay.Outcome
	suite      *suite.Outcome
	cause      *replay.Divergence
	divergence *replay.Divergence
	message    string
}

// event writes one event of a followed run as a short line for people
// (run_seq, kind, the call and its provenance, the role of a changed call,
// a run:error's code and message, a case:outcome's status) and keeps what
// the summary needs.
func (s *followSummary) event(w io.Writer, e journal.Event, raw []byte) error {
	var ev followEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		// A member of another shape than the kinds known here have: the
		// line says what every event has.
		ev = followEvent{RunSeq: e.RunSeq, Kind: string(e.Kind)}
	}
	line := fmt.Sprintf("%5d  %-13s", ev.RunSeq, ev.Kind)
	if ev.Call != nil {
		line += "  " + cell(ev.Call.Kind+":"+ev.Call.Key)
	}
	if p := rawString(ev.Provenance); p != "" {
		line += "  " + p
	}
	if ev.Change != nil && ev.Change.Role != "" {
		line += " (" + roleText(ev.Change.Role, ev.Change.CausedBy) + ")"
		if ev.Change.Role == replay.RoleCause && s.cause == nil {
			s.cause = ev.Change
		}
	}
	switch journal.Kind(ev.Kind) {
	case runevent.RunError:
		line += "  " + ev.Code
		if ev.Message != "" {
			line += ": " + redact.Secrets(oneLine(ev.Message))
		}
		s.divergence, s.message = ev.Divergence, ev.Message
	case runevent.SuiteProgress:
		var p suite.Progress
		if json.Unmarshal(raw, &p) == nil {
			line += fmt.Sprintf("  %d/%d done: %d pass, %d fail, %d error", p.Done, p.Total, p.ByStatus[suite.Pass], p.ByStatus[suite.Fail], p.ByStatus[suite.Error])
		}
	case runevent.SuitePlan:
		var p suite.Plan
		if json.Unmarshal(raw, &p) == nil {
			line += fmt.Sprintf("  %s × %s = %s", count(len(p.Cases), "case", "cases"), count(len(p.Arms), "arm", "arms"), count(p.Total, "child", "children"))
		}
	case runevent.SuiteOutcome:
		var o suite.Outcome
		if err := json.Unmarshal(raw, &o); err != nil {
			return fmt.Errorf("enqueue: suite:outcome of event %d: %w", ev.RunSeq, err)
		}
		s.suite = &o
		line += "  " + o.Status
		if o.Code != "" {
			line += " " + string(o.Code)
		}
	case runevent.CaseCharge:
		var c struct {
			CostUSD float64 `json:"cost_usd"`
		}
		if json.Unmarshal(raw, &c) == nil {
			line += fmt.Sprintf("  $%g counted: in flight when a worker died", c.CostUSD)
		}
	case runevent.CaseOutcome:
		var o replay.Outcome
		if err := json.Unmarshal(raw, &o); err != nil {
			return fmt.Errorf("enqueue: case:outcome of event %d: %w", ev.RunSeq, err)
		}
		s.outcome = &o
		line += "  " + cell(string(o.Status))
		if o.Code != "" {
			line += " " + o.Code
		}
	}
	_, err := fmt.Fprintln(w, strings.TrimRight(line, " "))
	return err
}

// write writes the summary after the run ended: its id, status and code
// and, for a case run, its outcome (writeOutcome), then the divergence's
// detail (the outcome's, else the run:error's), or, for a case run that did
// not diverge, the detail of its cause's change, as case run's table does.
func (s *followSummary) write(w io.Writer, runID string, end client.End) error {
	fmt.Fprintln(w)
	if s.suite != nil {
		return writeSuiteOutcome(w, *s.suite)
	}
	d := s.divergence
	if s.outcome != nil {
		writeOutcome(w, *s.outcome, "")
		if s.outcome.Divergence != nil {
			d = s.outcome.Divergence
		}
	} else {
		field(w, "", "run", runID)
		status := string(end.Status)
		if end.Code != "" {
			status += " " + string(end.Code)
		}
		field(w, "", "status", status)
		if s.message != "" {
			field(w, "", "message", redact.Secrets(oneLine(s.message)))
		}
	}
	switch {
	case d != nil:
		fmt.Fprintln(w)
		fmt.Fprintln(w, "divergence:")
		writeDivergence(w, d, "  ")
	case s.cause != nil:
		fmt.Fprintln(w)
		fmt.Fprintf(w, "cause %s:\n", cell(s.cause.Call))
		writeDivergence(w, s.cause, "  ")
	}
	return nil
}
