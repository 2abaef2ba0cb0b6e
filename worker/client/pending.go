package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/messages"
)

// The worker's consumer groups.
const (
	// DefaultConsumerGroup is the message stream's group when
	// PYRULA_CONSUMER_GROUP is unset, as the worker's.
	DefaultConsumerGroup = "case-workers"
	// RunsGroup is the runs stream's group (it is not configurable).
	RunsGroup = "run-workers"
)

// ErrGroupNotFound: the stream, or its consumer group, does not exist (no
// worker has started on it, or another namespace, stream or group was
// named). Pending returns it wrapped with the stream and the group.
var ErrGroupNotFound = errors.New("client: no such consumer group")

// pendingPage is how many pending entries one XPENDING reads.
const pendingPage = 100

// RunsStream returns the runs stream, <ns>:runs: the runs submitted by
// start_run and run_case, each an entry naming its run_id, which the
// worker's executors read as group RunsGroup.
func (c *Client) RunsStream() string { return c.opts.Namespace + ":runs" }

// LeaseState says who may resume a pending run: the state of its lease in
// the run's journal, against the server's clock.
type LeaseState string

// The lease states of a pending run.
const (
	// LeaseHeld: a worker holds the run's lease until LeaseUntil. A live
	// worker renews it every third of PYRULA_RUN_LEASE (touching the
	// runs entry too); a worker that died lets it lapse at LeaseUntil.
	LeaseHeld LeaseState = "held"
	// LeaseLapsed: the lease ran out without being renewed: its worker
	// died or lost Valkey. The next worker that reclaims the runs entry
	// takes the lease and resumes the run from its journal.
	LeaseLapsed LeaseState = "lapsed"
	// LeaseNone: nobody holds the run: it was handed back (after a
	// transient failure, at a worker's shutdown) or has not started, and
	// is resumed by the worker that next reclaims its entry; or it
	// finished (its status says so), and its entry is acked then.
	LeaseNone LeaseState = "none"
)

// PendingEntry is one entry of a stream that the consumer group delivered
// to a worker and that was not acknowledged yet: the XPENDING row, what
// its entry names (never the message's body) and, for a run, its state
// in the journal.
type PendingEntry struct {
	// EntryID is the entry's id on the stream.
	EntryID string `json:"entry_id"`
	// Consumer is the group member the entry is pending to: the worker's
	// PYRULA_CONSUMER_NAME (a pod's name).
	Consumer string `json:"consumer"`
	// Idle is how long, in seconds, since the entry was last delivered,
	// or touched by the worker handling it (the XPENDING idle time).
	Idle float64 `json:"idle"`
	// IdleSince is when that was: the server's time less Idle.
	IdleSince time.Time `json:"idle_since"`
	// Deliveries is how many times the entry was delivered.
	Deliveries int64 `json:"deliveries"`

	// MessageID and Type are the message's, read from its envelope
	// (messages only; empty when the entry cannot tell: see Problem).
	MessageID string               `json:"message_id,omitempty"`
	Type      messages.MessageType `json:"type,omitempty"`

	// RunID is the run the entry names (runs only).
	RunID string `json:"run_id,omitempty"`
	// Status is the run's status in its journal (runs only; empty when
	// the run is not there).
	Status journal.Status `json:"status,omitempty"`
	// LastSeq is the run_seq of the run's last event (runs only).
	LastSeq *int64 `json:"last_seq,omitempty"`
	// Lease is the state of the run's lease (runs only).
	Lease LeaseState `json:"lease,omitempty"`
	// LeaseOwner is the lease's holder: the worker's consumer name and
	// a suffix of its process (runs not finished only; "" when none).
	LeaseOwner string `json:"lease_owner,omitempty"`
	// LeaseUntil is when the lease lapses, or lapsed (runs not finished
	// only; nil when none). Valkey measures it with the server's clock.
	LeaseUntil *time.Time `json:"lease_until,omitempty"`

	// Problem says why the entry's message or run could not be read:
	// the entry is gone from the stream (trimmed or deleted), its message
	// is not a JSON envelope, it names no run, or the run is not in the
	// journal. Empty when all was read.
	Problem string `json:"problem,omitempty"`
}

// PendingParams name the entries Pending lists.
type PendingParams struct {
	// Runs lists the runs stream's entries (RunsStream) instead of the
	// message stream's.
	Runs bool
	// Group is the consumer group; empty means the worker's:
	// DefaultConsumerGroup on the message stream, RunsGroup on the runs
	// stream.
	Group string
	// MinIdle lists only the entries idle at least this long (the
	// XPENDING IDLE filter, to the millisecond); 0 lists all.
	MinIdle time.Duration
	// Journal reads each run's meta (Valkey, then the archive); required
	// with Runs.
	Journal journal.Journal
}

// Pending calls fn with every entry of the message stream (with p.Runs,
// the runs stream) that group p.Group delivered and that was not
// acknowledged, oldest first, read a page at a time (XPENDING with IDLE);
// an error from fn stops it and is returned. Each entry's message id and
// type are read from its envelope, or its run's status and lease from
// the journal; an entry that cannot be read says so in Problem. Message
// bodies are read but never returned. Idle times and lease states are
// taken against the server's clock (TIME, read with each page).
// Errors: ErrGroupNotFound.
func (c *Client) Pending(ctx context.Context, p PendingParams, fn func(PendingEntry) error) error {
	if p.MinIdle < 0 {
		return fmt.Errorf("client: pending: negative minimum idle time %s", p.MinIdle)
	}
	if p.Runs && p.Journal == nil {
		return errors.New("client: pending runs: no journal given")
	}
	stream, group := c.opts.CaseStream, p.Group
	if p.Runs {
		stream = c.RunsStream()
	}
	if group == "" {
		group = DefaultConsumerGroup
		if p.Runs {
			group = RunsGroup
		}
	}
	start := "-"
	for {
		now, err := c.serverTime(ctx)
		if err != nil {
			return err
		}
		rows, err := c.c.Do(ctx, c.c.B().Xpending().Key(stream).Group(group).Idle(p.MinIdle.Milliseconds()).
			Start(start).End("+").Count(pendingPage).Build()).ToArray()
		if isNoGroup(err) {
			return fmt.Errorf("%w %s on %s (the stream or its group does not exist)", ErrGroupNotFound, group, stream)
		}
		if err != nil {
			return fmt.Errorf("client: read the pending entries of %s, group %s: %w", stream, group, err)
		}
		entries, err := parsePending(rows, now)
		if err != nil {
			return fmt.Errorf("client: read the pending entries of %s, group %s: %w", stream, group, err)
		}
		if err := c.describePending(ctx, stream, entries, p, now); err != nil {
			return err
		}
		for _, e := range entries {
			if err := fn(e); err != nil {
				return err
			}
		}
		if len(rows) < pendingPage || len(entries) == 0 {
			return nil
		}
		next, ok := nextEntryID(entries[len(entries)-1].EntryID)
		if !ok {
			return nil
		}
		start = next
	}
}

// describePending fills in what entries' stream entries name (one XRANGE
// each, pipelined; the stream is one key, so one node) and, for runs, the
// runs' state in p.Journal.
func (c *Client) describePending(ctx context.Context, stream string, entries []PendingEntry, p PendingParams, now time.Time) error {
	if len(entries) == 0 {
		return nil
	}
	cmds := make(valkey.Commands, len(entries))
	for i, e := range entries {
		cmds[i] = c.c.B().Xrange().Key(stream).Start(e.EntryID).End(e.EntryID).Count(1).Build()
	}
	for i, r := range c.c.DoMulti(ctx, cmds...) {
		e := &entries[i]
		got, err := r.AsXRange()
		if err != nil {
			return fmt.Errorf("client: read entry %s of %s: %w", e.EntryID, stream, err)
		}
		if len(got) == 0 {
			e.Problem = "the entry is no longer in the stream (trimmed or deleted)"
			continue
		}
		fields := got[0].FieldValues
		if p.Runs {
			e.RunID = fields[deadFieldRunID]
			if journal.CheckRunID(e.RunID) != nil {
				e.Problem = fmt.Sprintf("the entry has no valid %s field", deadFieldRunID)
				e.RunID = ""
			}
			continue
		}
		raw, ok := fields[messages.MessageField]
		if !ok {
			e.Problem = fmt.Sprintf("the entry has no %q field", messages.MessageField)
			continue
		}
		var env struct {
			MessageID string               `json:"message_id"`
			Type      messages.MessageType `json:"type"`
		}
		if json.Unmarshal([]byte(raw), &env) != nil {
			e.Problem = "its message is not a JSON envelope"
			continue
		}
		e.MessageID, e.Type = env.MessageID, env.Type
	}
	if !p.Runs {
		return nil
	}
	for i := range entries {
		if err := c.describeRun(ctx, p.Journal, &entries[i], now); err != nil {
			return err
		}
	}
	return nil
}

// describeRun fills in the status and lease of e's run from its meta in j,
// against the server's time now.
func (c *Client) describeRun(ctx context.Context, j journal.Journal, e *PendingEntry, now time.Time) error {
	if e.RunID == "" {
		return nil
	}
	m, err := j.Meta(ctx, e.RunID)
	if errors.Is(err, journal.ErrRunNotFound) {
		e.Problem = "the run is in neither Valkey nor the archive"
		return nil
	}
	if err != nil {
		return fmt.Errorf("client: read run %s of pending entry %s: %w", e.RunID, e.EntryID, err)
	}
	lastSeq := m.LastSeq
	e.Status, e.LastSeq, e.Lease = m.Status, &lastSeq, LeaseNone
	if m.Status.Terminal() || m.LeaseOwner == "" {
		return nil
	}
	e.LeaseOwner = m.LeaseOwner
	if !m.LeaseUntil.IsZero() {
		until := m.LeaseUntil.UTC()
		e.LeaseUntil = &until
	}
	if m.LeaseUntil.After(now) {
		e.Lease = LeaseHeld
	} else {
		e.Lease = LeaseLapsed
	}
	return nil
}

// parsePending reads the rows of an extended XPENDING reply: {id,
// consumer, idle milliseconds, deliveries}.
func parsePending(rows []valkey.ValkeyMessage, now time.Time) ([]PendingEntry, error) {
	out := make([]PendingEntry, 0, len(rows))
	for _, r := range rows {
		f, err := r.ToArray()
		if err != nil || len(f) < 4 {
			return nil, fmt.Errorf("unexpected XPENDING row %v", r)
		}
		id, err1 := f[0].ToString()
		consumer, err2 := f[1].ToString()
		idle, err3 := f[2].AsInt64()
		n, err4 := f[3].AsInt64()
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return nil, fmt.Errorf("unexpected XPENDING row: %w", err)
		}
		d := time.Duration(idle) * time.Millisecond
		out = append(out, PendingEntry{EntryID: id, Consumer: consumer, Idle: float64(idle) / 1000,
			IdleSince: now.Add(-d).Truncate(time.Millisecond), Deliveries: n})
	}
	return out, nil
}

// serverTime reads the server's clock (TIME), which measures idle times
// and leases.
func (c *Client) serverTime(ctx context.Context) (time.Time, error) {
	v, err := c.c.Do(ctx, c.c.B().Time().Build()).AsStrSlice()
	if err == nil && len(v) != 2 {
		err = fmt.Errorf("unexpected reply %q", v)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("client: read the server's clock (TIME): %w", err)
	}
	sec, err1 := strconv.ParseInt(v[0], 10, 64)
	usec, err2 := strconv.ParseInt(v[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return time.Time{}, fmt.Errorf("client: read the server's clock (TIME): %w", err)
	}
	return time.Unix(sec, usec*1000).UTC(), nil
}

// nextEntryID is the smallest stream entry id after id, where the next
// page of a range starts; false when id is the last there is (or not an
// entry id).
func nextEntryID(id string) (string, bool) {
	msText, seqText, ok := strings.Cut(id, "-")
	ms, err1 := strconv.ParseUint(msText, 10, 64)
	seq, err2 := strconv.ParseUint(seqText, 10, 64)
	switch {
	case !ok || err1 != nil || err2 != nil:
		return "", false
	case seq < math.MaxUint64:
		return msText + "-" + strconv.FormatUint(seq+1, 10), true
	case ms < math.MaxUint64:
		return strconv.FormatUint(ms+1, 10) + "-0", true
	}
	return "", false
}

// isNoGroup reports whether err is Valkey's NOGROUP error: the consumer
// group, or its stream, does not exist.
func isNoGroup(err error) bool {
	ve, ok := valkey.IsValkeyErr(err)
	return ok && strings.HasPrefix(ve.Error(), "NOGROUP")
}
