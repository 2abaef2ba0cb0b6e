package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/redact"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/worker/client"
)

// deadCmd is `dead list|show|redrive|purge`: the dead letters of the
// message stream and of the runs stream, through worker/client.
func (a *app) deadCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "dead",
		Short: "List, show, redrive and purge the worker's dead letters",
		Long: `The worker's dead letters: messages answered with an error after
PYRULA_MAX_DELIVERIES deliveries (the stream <case stream>:dead, where
PYRULA_CASE_STREAM defaults to <namespace>:case-messages) and, with --runs,
runs ended run:error after PYRULA_MAX_DELIVERIES transient failures
(<namespace>:runs:dead). ID is a dead letter's entry id, as list prints it.

Every command reads PYRULA_VALKEY_URL and PYRULA_NAMESPACE (or --namespace)
as the worker does. Exit status: 0 done; 1 invalid input, a dead letter
that is not there or cannot be redriven (one "error:" line); redrive --wait
exits as enqueue --wait does (2 a refused reply, 3 an error reply).`,
		Args: groupArgs,
		RunE: groupRun,
	}
	c.AddCommand(a.deadListCmd(), a.deadShowCmd(), a.deadRedriveCmd(), a.deadPurgeCmd())
	return c
}

// deadFlags are the flags of every dead command: --runs and --namespace.
func (a *app) deadFlags(c *cobra.Command, runs *bool) {
	c.Flags().BoolVar(runs, "runs", false, "the runs stream's dead letters (<namespace>:runs:dead) instead of the messages'")
	a.journalFlags(c)
}

// deadKind is the stream --runs names.
func deadKind(runs bool) client.DeadKind {
	if runs {
		return client.DeadRuns
	}
	return client.DeadMessages
}

// withDead runs f with a worker client on PYRULA_VALKEY_URL under the
// namespace and, for runs, the journal (Valkey and, with
// PYRULA_POSTGRES_DSN, the archive), which a dead run is read from.
func (a *app) withDead(ctx context.Context, runs bool, f func(*client.Client, journal.Journal) error) error {
	open := func(j journal.Journal) error {
		return a.withValkey(func(vc valkey.Client, ns string) error {
			cl, err := client.New(vc, client.Options{
				Namespace: ns, CaseStream: a.getenv(envCaseStream), ReplyStream: a.getenv(envReplyStream),
			})
			if err != nil {
				return err
			}
			return f(cl, j)
		})
	}
	if !runs {
		return open(nil)
	}
	return a.withJournal(ctx, open)
}

// deadError words the dead-letter errors of worker/client for an
// "error:" line: without the package's prefix, naming the command.
func deadError(verb string, err error) error {
	msg := strings.ReplaceAll(err.Error(), "client: ", "")
	switch {
	case errors.Is(err, client.ErrInvalidEntryID):
		msg += " (see dead list)"
	case errors.Is(err, client.ErrDeadLetterNotFound):
		msg += " (see dead list; purged, or another stream: --runs)"
	case errors.Is(err, client.ErrAlreadyRedriven):
		msg += " (dead show prints its redrive's reply)"
	}
	return fmt.Errorf("dead %s: %s", verb, msg)
}

// deadListCmd is `dead list [--runs] [--format json|table]`.
func (a *app) deadListCmd() *cobra.Command {
	var runs bool
	var format string
	c := &cobra.Command{
		Use:   "list [--runs] [--format json|table]",
		Short: "List the dead letters, oldest first",
		Long: `Prints one JSON line per dead letter, oldest first:

  messages: {"entry_id", "message_id", "type", "at", "reason", "deliveries",
             "reply_status", "redriven"}
  runs:     {"entry_id", "run_id", "message_id", "type", "at", "reason",
             "failures", "redriven"}

at is when it was dead-lettered (its entry id's time); reason is the last
error the worker recorded; redriven is null, or {"message_id", "run_id",
"entry_id", "at"} of its redrive. A run's message_id and type are those of
the message that submitted it, read from the run's journal in Valkey
(absent once its keys expired: dead show reads the archive too).
--format table prints the same for people.`,
		Args: exactArgs(),
		RunE: a.run(func(ctx context.Context, _ []string) error {
			if err := checkFormat("dead list", format); err != nil {
				return err
			}
			return a.withDead(ctx, false, func(cl *client.Client, _ journal.Journal) error {
				var letters []client.DeadLetter
				err := cl.DeadLetters(ctx, deadKind(runs), func(l client.DeadLetter) error {
					l.Reason = redact.Secrets(l.Reason)
					if format == formatTable {
						letters = append(letters, l)
						return nil
					}
					return a.emit(l)
				})
				if err != nil {
					return deadError("list", err)
				}
				if format == formatTable {
					return writeDeadTable(a.stdout, runs, letters)
				}
				return nil
			})
		}),
	}
	c.Flags().StringVar(&format, "format", formatJSON, "json (JSON lines) or table")
	a.deadFlags(c, &runs)
	return c
}

// writeDeadTable writes dead list's lines for people: ENTRY, MESSAGE (and
// RUN for runs), TYPE, AT (to the second), DELIVERIES (FAILURES for runs),
// REPLY (messages: the reply's status), REDRIVEN (the redrive's message
// id) and REASON, shortened to one line.
func writeDeadTable(w io.Writer, runs bool, letters []client.DeadLetter) error {
	t := newTable()
	if runs {
		t.row("ENTRY", "RUN", "MESSAGE", "TYPE", "AT", "FAILURES", "REDRIVEN", "REASON")
	} else {
		t.row("ENTRY", "MESSAGE", "TYPE", "AT", "DELIVERIES", "REPLY", "REDRIVEN", "REASON")
	}
	for _, l := range letters {
		redriven := "-"
		if l.Redriven != nil {
			redriven = cell(l.Redriven.MessageID)
		}
		at := l.At.Format(time.RFC3339)
		reason := cell(clipText(oneLine(l.Reason), 160))
		if runs {
			t.row(l.EntryID, cell(l.RunID), cell(l.MessageID), cell(string(l.Type)), at, numberText(l.Failures), redriven, reason)
		} else {
			t.row(l.EntryID, cell(l.MessageID), cell(string(l.Type)), at, numberText(l.Deliveries), cell(string(l.ReplyStatus)), redriven, reason)
		}
	}
	if len(letters) == 0 {
		t.row("(no dead letter)")
	}
	return t.writeTo(w)
}

// redactRaw is raw JSON with the passwords redact.Secrets finds hidden (an error
// reply's message, a run:error's, may quote a URL), as long as that leaves
// it JSON.
func redactRaw(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return raw
	}
	if r := json.RawMessage(redact.Secrets(string(raw))); json.Valid(r) {
		return r
	}
	return raw
}

// numberText is n as a cell, "-" when unknown.
func numberText(n *int64) string {
	if n == nil {
		return "-"
	}
	return strconv.FormatInt(*n, 10)
}

// clipText shortens s to at most n runes, ending it with "…" when cut.
func clipText(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// deadShowOut is what dead show prints: the dead letter in full, its
// body's size and keys, and the body itself only with --values.
type deadShowOut struct {
	client.DeadLetterDetail
	// BodyBytes is the body's size in bytes as the dead letter holds it.
	BodyBytes int `json:"body_bytes"`
	// BodyKeys are the body's member names, sorted (null when it is not
	// an object).
	BodyKeys []string `json:"body_keys"`
	// Body is the body itself (--values).
	Body json.RawMessage `json:"body,omitempty"`
}

// deadShowCmd is `dead show ID [--runs] [--values]`.
func (a *app) deadShowCmd() *cobra.Command {
	var runs, values bool
	c := &cobra.Command{
		Use:   "show ID [--runs] [--values]",
		Short: "Print one dead letter in full",
		Long: `Prints one JSON object: the dead letter's list line (see dead list) and
stream, source_entry_id (the entry the worker dead-lettered), reply_to, reply
(the reply recorded for the message id, the one reply it got; null once its
record expired), redrive_reply (the reply of its redrive, once there is
one), body_bytes and body_keys (the body's size and member names). For a run
(--runs): target_name, status and terminal (its terminal event) from the
run's journal (Valkey, then the archive with PYRULA_POSTGRES_DSN), and the
body of the message that submitted it.

The body holds the run's inputs: it is printed only with --values, which
prints one warning line on stderr.`,
		Args: exactArgs("ID"),
		RunE: a.run(func(ctx context.Context, args []string) error {
			if err := client.CheckEntryID(args[0]); err != nil {
				return deadError("show", err)
			}
			return a.withDead(ctx, runs, func(cl *client.Client, j journal.Journal) error {
				d, err := cl.InspectDeadLetter(ctx, client.InspectParams{Kind: deadKind(runs), EntryID: args[0], Journal: j})
				if err != nil {
					return deadError("show", err)
				}
				d.Reason = redact.Secrets(d.Reason)
				d.Reply, d.RedriveReply, d.Terminal = redactRaw(d.Reply), redactRaw(d.RedriveReply), redactRaw(d.Terminal)
				out := deadShowOut{DeadLetterDetail: d, BodyBytes: len(d.Body)}
				var obj map[string]json.RawMessage
				if json.Unmarshal(d.Body, &obj) == nil && obj != nil {
					out.BodyKeys = make([]string, 0, len(obj))
					for k := range obj {
						out.BodyKeys = append(out.BodyKeys, k)
					}
					slices.Sort(out.BodyKeys)
				}
				if values {
					out.Body = d.Body
					a.warnUnredacted("the body of dead letter " + d.EntryID)
				}
				return a.emit(out)
			})
		}),
	}
	c.Flags().BoolVar(&values, "values", false, "print the body too (it holds the run's inputs, unredacted)")
	a.deadFlags(c, &runs)
	return c
}

// deadRedriveCmd is `dead redrive ID [--runs] [--wait] [--timeout D]`.
func (a *app) deadRedriveCmd() *cobra.Command {
	var runs, wait bool
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "redrive ID [--runs] [--wait] [--timeout D]",
		Short: "Send a dead letter back to the worker, once",
		Long: `Sends the dead letter back once, under a new message id: the message's id
and ".redrive-1" (a redrive's own redrive counts on: ".redrive-2"), with its
type, body and reply_to, to the case stream. The dead message's id keeps the
one reply it got (the error); the redrive gets its own.

With --runs, the dead run is submitted again as a new run: the message that
submitted it (its journal's run:submitted event: message_type and request)
is sent under its message id and ".redrive-1", with run_id the run's id and
".redrive-1", replying to PYRULA_REPLY_STREAM. The new run starts afresh
with no failures counted: it does not resume the dead run, which ended
run:error (its calls are made again).

The dead letter is then marked redriven (dead list shows it); a second
redrive of it is refused. Refused too: a message whose reply was not an
error (its work was done: resend it with its own id to get its reply
again), and a run gone from the journal or not ended run:error.

Prints {"entry_id", "message_id", "run_id", "redrive": {"message_id",
"run_id", "entry_id", "at"}, "reply_to"}; with --wait, then the redrive's
reply as one JSON line, and exits as enqueue --wait: 2 refused, 3 error.`,
		Args: exactArgs("ID"),
		RunE: a.run(func(ctx context.Context, args []string) error {
			if err := client.CheckEntryID(args[0]); err != nil {
				return deadError("redrive", err)
			}
			if timeout < 0 {
				return errors.New("dead redrive: --timeout must not be negative")
			}
			return a.withDead(ctx, runs, func(cl *client.Client, j journal.Journal) error {
				r, err := cl.Redrive(ctx, client.RedriveParams{Kind: deadKind(runs), EntryID: args[0], Journal: j, Now: a.now()})
				if err != nil {
					return deadError("redrive", err)
				}
				if err := a.emit(r); err != nil {
					return err
				}
				if !wait {
					return nil
				}
				if timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, timeout)
					defer cancel()
				}
				reply, err := cl.Reply(ctx, r.Sent)
				if errors.Is(err, context.DeadlineExceeded) {
					return fmt.Errorf("dead redrive: no reply to %s within --timeout %s (is a worker consuming %s?)", r.Sent.MessageID, timeout, r.Sent.Stream)
				}
				if err != nil {
					return err
				}
				if err := a.emit(reply); err != nil {
					return err
				}
				switch reply.Status {
				case messages.StatusRefused:
					return exitStatus(messages.ExitRefused)
				case messages.StatusError:
					return exitStatus(messages.ExitRunFailed)
				}
				return nil
			})
		}),
	}
	c.Flags().BoolVar(&wait, "wait", false, "wait for the redrive's reply and print it")
	c.Flags().DurationVar(&timeout, "timeout", 0, "with --wait, give up after this long, e.g. 30s (default: wait until interrupted)")
	a.deadFlags(c, &runs)
	return c
}

// purgeLine is one line of dead purge.
type purgeLine struct {
	EntryID   string               `json:"entry_id"`
	RunID     string               `json:"run_id,omitempty"`
	MessageID string               `json:"message_id,omitempty"`
	Type      messages.MessageType `json:"type,omitempty"`
	At        *time.Time           `json:"at,omitempty"`
	Redriven  bool                 `json:"redriven"`
	Action    string               `json:"action"`
}

// The actions of dead purge's lines.
const (
	purgeCandidate = "candidate"
	purgeDeleted   = "deleted"
	purgeMissing   = "missing"
)

// deadPurgeCmd is `dead purge ID…|--all [--runs] [--yes]`.
func (a *app) deadPurgeCmd() *cobra.Command {
	var runs, all, yes bool
	c := &cobra.Command{
		Use:   "purge ID...|--all [--runs] [--yes]",
		Short: "List (with --yes, delete) dead letters",
		Long: `The dead letters named, or with --all every one there is, are the
candidates. Without --yes purge only lists them; with --yes it deletes them
(with their redrive marks). A dead letter that arrives after purge --all
listed the stream is not deleted.

Prints one JSON line per dead letter, in the order given (--all: oldest
first): {"entry_id", "run_id", "message_id", "type", "at", "redriven",
"action"} with action "candidate" (without --yes), "deleted" (with --yes) or
"missing" (no such dead letter: never there, or purged already; that still
exits 0).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if all && len(args) > 0 {
				return fmt.Errorf("%s: give IDs or --all, not both", cmd.CommandPath())
			}
			if !all && len(args) == 0 {
				return fmt.Errorf("%s: missing argument ID (or --all)", cmd.CommandPath())
			}
			return nil
		},
		RunE: a.run(func(ctx context.Context, args []string) error {
			for _, id := range args {
				if err := client.CheckEntryID(id); err != nil {
					return deadError("purge", err)
				}
			}
			return a.withDead(ctx, false, func(cl *client.Client, _ journal.Journal) error {
				return a.purge(ctx, cl, deadKind(runs), args, all, yes)
			})
		}),
	}
	c.Flags().BoolVar(&all, "all", false, "every dead letter of the stream")
	c.Flags().BoolVar(&yes, "yes", false, "delete the candidates (without it purge only lists them)")
	a.deadFlags(c, &runs)
	return c
}

// purge lists, and with yes deletes, the dead letters ids (or all).
func (a *app) purge(ctx context.Context, cl *client.Client, kind client.DeadKind, ids []string, all, yes bool) error {
	var lines []purgeLine
	line := func(l client.DeadLetter) purgeLine {
		at := l.At
		return purgeLine{EntryID: l.EntryID, RunID: l.RunID, MessageID: l.MessageID, Type: l.Type, At: &at,
			Redriven: l.Redriven != nil, Action: purgeCandidate}
	}
	if all {
		err := cl.DeadLetters(ctx, kind, func(l client.DeadLetter) error {
			lines = append(lines, line(l))
			return nil
		})
		if err != nil {
			return deadError("purge", err)
		}
	} else {
		seen := map[string]bool{}
		for _, id := range ids {
			if seen[id] {
				continue
			}
			seen[id] = true
			l, err := cl.DeadLetterByID(ctx, kind, id)
			switch {
			case errors.Is(err, client.ErrDeadLetterNotFound):
				lines = append(lines, purgeLine{EntryID: id, Action: purgeMissing})
			case err != nil:
				return deadError("purge", err)
			default:
				lines = append(lines, line(l))
			}
		}
	}
	if yes {
		var doomed []string
		for _, l := range lines {
			if l.Action == purgeCandidate {
				doomed = append(doomed, l.EntryID)
			}
		}
		deleted, err := cl.PurgeDeadLetters(ctx, kind, doomed)
		k := 0
		for i := range lines {
			if lines[i].Action != purgeCandidate {
				continue
			}
			switch {
			case k >= len(deleted):
				lines[i].Action = "" // not reached: the purge failed first
			case deleted[k]:
				lines[i].Action = purgeDeleted
			default:
				lines[i].Action = purgeMissing // purged by someone else meanwhile
			}
			k++
		}
		// Print what was done even when the purge stopped early.
		for _, l := range lines {
			if l.Action == "" {
				continue
			}
			if werr := a.emit(l); werr != nil {
				return werr
			}
		}
		if err != nil {
			return deadError("purge", err)
		}
		return nil
	}
	for _, l := range lines {
		if err := a.emit(l); err != nil {
			return err
		}
	}
	return nil
}
