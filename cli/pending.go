package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/worker/client"
)

// envConsumerGroup is the message stream's consumer group, read as the
// worker reads it.
const envConsumerGroup = "PYRULA_CONSUMER_GROUP"

// pendingCmd is `pending [--runs] [--min-idle D] [--format json|table]`:
// the entries the worker's groups delivered and did not ack, through
// worker/client.
func (a *app) pendingCmd() *cobra.Command {
	var runs bool
	var minIdle time.Duration
	var format string
	c := &cobra.Command{
		Use:   "pending [--runs] [--min-idle D] [--format json|table]",
		Short: "List the work delivered to a worker and not acknowledged",
		Long: `Lists the entries of the worker's message stream that were delivered to a
worker and not acknowledged yet (its consumer group's pending entries),
oldest first: PYRULA_CASE_STREAM (default <namespace>:case-messages), group
PYRULA_CONSUMER_GROUP (default case-workers). With --runs, those of the runs
stream, <namespace>:runs (group run-workers), each a run to execute.

An entry is pending while a worker handles it (the worker touches it, so
that its idle time stays under PYRULA_CLAIM_IDLE), after a transient
failure (it waits for its retry), or when its worker died. A worker reclaims
an entry idle past PYRULA_CLAIM_IDLE, doubled per delivery (up to 32×), and
dead-letters a message after PYRULA_MAX_DELIVERIES deliveries (see dead
list). A runs entry is reclaimed once idle past the larger of
PYRULA_CLAIM_IDLE and PYRULA_RUN_LEASE; its run is dead-lettered after
PYRULA_MAX_DELIVERIES transient failures.

Prints one JSON line per entry:

  messages: {"entry_id", "consumer", "idle", "idle_since", "deliveries",
             "message_id", "type"}
  runs:     {"entry_id", "consumer", "idle", "idle_since", "deliveries",
             "run_id", "status", "last_seq", "lease", "lease_owner",
             "lease_until"}

consumer is the worker it is pending to (its PYRULA_CONSUMER_NAME); idle is
the seconds since it was last delivered or touched (idle_since, by the
server's clock). message_id and type are read from the message's envelope;
its body is never printed. A run's status, last_seq and lease come from its
journal (Valkey, then the archive with PYRULA_POSTGRES_DSN): lease "held"
(by lease_owner until lease_until: a live worker renews it every third of
PYRULA_RUN_LEASE; if that worker died, the lease lapses at lease_until),
"lapsed" (its worker stopped renewing it: the next worker to reclaim the
entry resumes the run from its journal) or "none" (handed back or not
started: resumed when the entry is next reclaimed; or finished, and acked
then). An entry that cannot be read says why in "problem" (trimmed from
the stream, not a JSON envelope, a run in neither Valkey nor the archive).

--min-idle D lists only the entries idle at least D (e.g. 10m). --format
table prints the same for people. Reads PYRULA_VALKEY_URL and
PYRULA_NAMESPACE (or --namespace) as dead does. Exit status: 0 done (also
when nothing is pending); 1 invalid input or an operational error (Valkey
unreachable, no such stream or consumer group), one "error:" line.`,
		Args: exactArgs(),
		RunE: a.run(func(ctx context.Context, _ []string) error {
			if err := checkFormat("pending", format); err != nil {
				return err
			}
			if minIdle < 0 {
				return errors.New("pending: --min-idle must not be negative")
			}
			return a.withDead(ctx, runs, func(cl *client.Client, j journal.Journal) error {
				p := client.PendingParams{Runs: runs, MinIdle: minIdle, Journal: j}
				if !runs {
					p.Group = a.getenv(envConsumerGroup)
				}
				var entries []client.PendingEntry
				err := cl.Pending(ctx, p, func(e client.PendingEntry) error {
					if format == formatTable {
						entries = append(entries, e)
						return nil
					}
					return a.emit(e)
				})
				if err != nil {
					return pendingError(runs, err)
				}
				if format == formatTable {
					return writePendingTable(a.stdout, runs, entries)
				}
				return nil
			})
		}),
	}
	c.Flags().BoolVar(&runs, "runs", false, "the runs stream's pending entries (<namespace>:runs) instead of the messages'")
	c.Flags().DurationVar(&minIdle, "min-idle", 0, "only the entries idle at least this long, e.g. 10m")
	c.Flags().StringVar(&format, "format", formatJSON, "json (JSON lines) or table")
	a.journalFlags(c)
	return c
}

// pendingError words an error of client.Pending for an "error:" line:
// without the package's prefix, naming the command and, for a missing
// group, the settings that name it.
func pendingError(runs bool, err error) error {
	msg := strings.ReplaceAll(err.Error(), "client: ", "")
	switch {
	case errors.Is(err, client.ErrGroupNotFound) && runs:
		msg += "; is PYRULA_NAMESPACE (or --namespace) the worker's, and has a worker started?"
	case errors.Is(err, client.ErrGroupNotFound):
		msg += "; are PYRULA_NAMESPACE (or --namespace), PYRULA_CASE_STREAM and PYRULA_CONSUMER_GROUP the worker's, and has a worker started?"
	}
	return fmt.Errorf("pending: %s", msg)
}

// writePendingTable writes pending's lines for people: ENTRY, CONSUMER,
// IDLE (a duration), DELIVERIES, then MESSAGE and TYPE, or for runs RUN,
// STATUS, LAST_SEQ, LEASE, OWNER and UNTIL (to the second); PROBLEM last.
func writePendingTable(w io.Writer, runs bool, entries []client.PendingEntry) error {
	t := newTable()
	if runs {
		t.row("ENTRY", "CONSUMER", "IDLE", "DELIVERIES", "RUN", "STATUS", "LAST_SEQ", "LEASE", "OWNER", "UNTIL", "PROBLEM")
	} else {
		t.row("ENTRY", "CONSUMER", "IDLE", "DELIVERIES", "MESSAGE", "TYPE", "PROBLEM")
	}
	for _, e := range entries {
		idle := idleText(e.Idle)
		deliveries := strconv.FormatInt(e.Deliveries, 10)
		problem := cell(e.Problem)
		if !runs {
			t.row(e.EntryID, cell(e.Consumer), idle, deliveries, cell(e.MessageID), cell(string(e.Type)), problem)
			continue
		}
		until := "-"
		if e.LeaseUntil != nil {
			until = e.LeaseUntil.Format(time.RFC3339)
		}
		t.row(e.EntryID, cell(e.Consumer), idle, deliveries, cell(e.RunID), cell(string(e.Status)), numberText(e.LastSeq),
			cell(string(e.Lease)), cell(e.LeaseOwner), until, problem)
	}
	if len(entries) == 0 {
		t.row("(no pending entry)")
	}
	return t.writeTo(w)
}

// idleText is an idle time in seconds as a duration for people: to the
// tenth of a second under a minute, else to the second ("4.2s", "2h0m3s").
func idleText(seconds float64) string {
	d := time.Duration(seconds * float64(time.Second))
	if d < time.Minute {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
