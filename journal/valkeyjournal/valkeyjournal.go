// Package valkeyjournal keeps run journals in Valkey (or Redis 7), the live
// tier of docs/runtime.md. A run is three keys sharing the hash tag {run_id}:
//
//	<ns>:{<run_id>}:meta     hash: run_id, namespace, target_name, code_version,
//	                         inputs, status, last_seq, lease_owner, lease_epoch,
//	                         lease_until (ms, server clock), created_at, finished_at
//	<ns>:{<run_id>}:events   stream: entry 0-<run_seq>, one field "event" holding
//	                         the event's canonical JSON
//	<ns>:{<run_id>}:results  hash: "kind:key" → the result record's canonical JSON
//
// Every write is one Lua script over those keys (one slot, so it works on a
// Valkey Cluster), which checks the lease and the run's state before it
// writes anything: appends are atomic and fenced, and run_seq is assigned by
// the server. The stream's explicit entry ids make the server itself refuse
// an event out of order. Every read is one MULTI/EXEC of plain reads over
// the same keys, so a run is read at one instant. The events stream is also
// what clients read to follow a run (XREAD on EventsKey).
//
// When a run finishes its keys expire after the completed TTL; with an
// Archive, the run is archived first, and reads fall back to the archive
// once the keys are gone.
//
// valkeyjournal imports journal and bundle, nothing else of the project.
package valkeyjournal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/internal/backend"
	"github.com/pyrula/caseworker/journal/internal/wire"
)

var _ journal.Journal = (*Journal)(nil)

// Options tune New; zero fields take the defaults.
type Options struct {
	// Namespace prefixes every key (journal.DefaultNamespace).
	Namespace string
	// CompletedTTL is how long a finished run's keys live
	// (journal.DefaultCompletedTTL). Valkey keeps milliseconds.
	CompletedTTL time.Duration
	// LeaseTTL is the lease time to live when a call does not give one
	// (journal.DefaultLeaseTTL).
	LeaseTTL time.Duration
	// Archive, when set, receives every finished run before its keys may
	// expire, and reads fall back to it.
	Archive journal.Archive
	// Now stamps events that have no at (time.Now). Leases use the
	// server's clock.
	Now func() time.Time
}

// Journal is a run journal in Valkey. It is safe for concurrent use; it does
// not own the client.
type Journal struct {
	c    valkey.Client
	opts backend.Options
}

// New returns a journal on client. It fails only for an invalid namespace.
func New(client valkey.Client, opts Options) (*Journal, error) {
	o, err := backend.Options{
		Namespace:    opts.Namespace,
		CompletedTTL: opts.CompletedTTL,
		LeaseTTL:     opts.LeaseTTL,
		Archive:      opts.Archive,
		Now:          opts.Now,
	}.Defaults()
	if err != nil {
		return nil, fmt.Errorf("valkeyjournal: %w", err)
	}
	return &Journal{c: client, opts: o}, nil
}

// Keys returns the keys of a run: its meta hash, its events stream and its
// results hash.
func Keys(namespace, runID string) (meta, events, results string) {
	p := namespace + ":{" + runID + "}:"
	return p + "meta", p + "events", p + "results"
}

// EventsKey is the key of a run's events stream, which clients XREAD to
// follow the run.
func EventsKey(namespace, runID string) string {
	_, events, _ := Keys(namespace, runID)
	return events
}

// Namespace implements journal.Journal.
func (j *Journal) Namespace() string { return j.opts.Namespace }

// keys returns the run's three keys.
func (j *Journal) keys(runID string) []string {
	m, e, r := Keys(j.opts.Namespace, runID)
	return []string{m, e, r}
}

// ms is d in whole milliseconds, at least 1.
func ms(d time.Duration) string { return strconv.FormatInt(max(d.Milliseconds(), 1), 10) }

// scriptError turns a script's error reply into the journal's errors.
func scriptError(err error) error {
	verr, ok := valkey.IsValkeyErr(err)
	if !ok {
		return err
	}
	word, rest, _ := strings.Cut(verr.Error(), " ")
	switch word {
	case "PYRULA_NOTFOUND":
		return journal.ErrRunNotFound
	case "PYRULA_EXISTS":
		return journal.ErrRunExists
	case "PYRULA_FINISHED":
		return fmt.Errorf("%w (%s)", journal.ErrRunFinished, rest)
	case "PYRULA_NOTFINISHED":
		return fmt.Errorf("%w (%s)", journal.ErrRunNotFinished, rest)
	case "PYRULA_LEASE":
		epoch, owner, _ := strings.Cut(rest, " ")
		if owner == "" {
			return fmt.Errorf("%w: the run is not leased (epoch %s)", journal.ErrLeaseLost, epoch)
		}
		return fmt.Errorf("%w: the run is leased to %q epoch %s", journal.ErrLeaseLost, owner, epoch)
	case "PYRULA_HELD":
		f := strings.SplitN(rest, " ", 3)
		if len(f) == 3 {
			until, _ := strconv.ParseInt(f[1], 10, 64)
			return fmt.Errorf("%w: %q epoch %s until %s", journal.ErrLeaseHeld, f[2], f[0], time.UnixMilli(until).UTC().Format(time.RFC3339Nano))
		}
		return journal.ErrLeaseHeld
	case "PYRULA_SEQ":
		want, next, _ := strings.Cut(rest, " ")
		return fmt.Errorf("%w: event asked for run_seq %s, next is %s", journal.ErrSeqConflict, want, next)
	case "PYRULA_RESULT":
		return fmt.Errorf("%w: %s", journal.ErrResultConflict, rest)
	}
	return err
}

// exec runs a script and translates its errors.
func (j *Journal) exec(ctx context.Context, s *valkey.Lua, keys, args []string) valkey.ValkeyResult {
	return s.Exec(ctx, j.c, keys, args)
}

// wrap adds the operation and the run id; a not-found error of a write to a
// run that was archived becomes ErrRunFinished.
func (j *Journal) wrap(ctx context.Context, op, runID string, err error) error {
	if op != "create" && errors.Is(err, journal.ErrRunNotFound) && j.opts.Archive != nil {
		if _, aerr := j.opts.Archive.Meta(ctx, j.opts.Namespace, runID); aerr == nil {
			err = fmt.Errorf("%w (archived)", journal.ErrRunFinished)
		}
	}
	return fmt.Errorf("valkeyjournal: %s %s: %w", op, runID, err)
}

// pair reads a script's {epoch, until} reply.
func pair(res valkey.ValkeyResult) (epoch int64, until time.Time, err error) {
	v, err := res.AsIntSlice()
	if err != nil {
		return 0, time.Time{}, scriptError(err)
	}
	if len(v) != 2 {
		return 0, time.Time{}, fmt.Errorf("unexpected script reply %v", v)
	}
	if v[1] > 0 {
		until = time.UnixMilli(v[1]).UTC()
	}
	return v[0], until, nil
}

// Create implements journal.Journal.
func (j *Journal) Create(ctx context.Context, p journal.CreateParams) (journal.Lease, error) {
	if err := ctx.Err(); err != nil {
		return journal.Lease{}, j.wrap(ctx, "create", p.RunID, err)
	}
	c, err := backend.PrepareCreate(p, j.opts.Now(), j.opts.LeaseTTL)
	if err != nil {
		return journal.Lease{}, j.wrap(ctx, "create", p.RunID, err)
	}
	if a := j.opts.Archive; a != nil {
		if _, err := a.Meta(ctx, j.opts.Namespace, p.RunID); err == nil {
			return journal.Lease{}, j.wrap(ctx, "create", p.RunID, fmt.Errorf("%w (archived)", journal.ErrRunExists))
		} else if !backend.IsNotFound(err) {
			return journal.Lease{}, j.wrap(ctx, "create", p.RunID, fmt.Errorf("archive: %w", err))
		}
	}
	args := []string{
		p.Owner, ms(c.LeaseTTL), string(c.Event),
		"run_id", p.RunID,
		"namespace", j.opts.Namespace,
		"target_name", p.TargetName,
		"code_version", p.CodeVersion,
		"inputs", string(c.Inputs),
		"created_at", wire.FormatTime(c.CreatedAt),
	}
	epoch, until, err := pair(j.exec(ctx, createScript, j.keys(p.RunID), args))
	if err != nil {
		return journal.Lease{}, j.wrap(ctx, "create", p.RunID, err)
	}
	return journal.Lease{RunID: p.RunID, Owner: p.Owner, Epoch: epoch, Until: until, TTL: c.LeaseTTL}, nil
}

// Acquire implements journal.Journal.
func (j *Journal) Acquire(ctx context.Context, p journal.AcquireParams) (journal.Lease, error) {
	if err := ctx.Err(); err != nil {
		return journal.Lease{}, j.wrap(ctx, "acquire", p.RunID, err)
	}
	if err := journal.CheckRunID(p.RunID); err != nil {
		return journal.Lease{}, j.wrap(ctx, "acquire", p.RunID, err)
	}
	if p.Owner == "" {
		return journal.Lease{}, j.wrap(ctx, "acquire", p.RunID, fmt.Errorf("%w: no owner", journal.ErrInvalid))
	}
	ttl := backend.LeaseTTL(p.TTL, j.opts.LeaseTTL)
	meta, _, _ := Keys(j.opts.Namespace, p.RunID)
	epoch, until, err := pair(j.exec(ctx, acquireScript, []string{meta}, []string{p.Owner, ms(ttl)}))
	if err != nil {
		return journal.Lease{}, j.wrap(ctx, "acquire", p.RunID, err)
	}
	return journal.Lease{RunID: p.RunID, Owner: p.Owner, Epoch: epoch, Until: until, TTL: ttl}, nil
}

// Renew implements journal.Journal.
func (j *Journal) Renew(ctx context.Context, lease journal.Lease) (journal.Lease, error) {
	if err := ctx.Err(); err != nil {
		return lease, j.wrap(ctx, "renew", lease.RunID, err)
	}
	if err := backend.CheckLease(lease); err != nil {
		return lease, j.wrap(ctx, "renew", lease.RunID, err)
	}
	ttl := backend.LeaseTTL(lease.TTL, j.opts.LeaseTTL)
	meta, _, _ := Keys(j.opts.Namespace, lease.RunID)
	until, err := j.exec(ctx, renewScript, []string{meta}, []string{lease.Owner, strconv.FormatInt(lease.Epoch, 10), ms(ttl)}).AsInt64()
	if err != nil {
		return lease, j.wrap(ctx, "renew", lease.RunID, scriptError(err))
	}
	lease.Until, lease.TTL = time.UnixMilli(until).UTC(), ttl
	return lease, nil
}

// Release implements journal.Journal.
func (j *Journal) Release(ctx context.Context, lease journal.Lease, status journal.Status) error {
	if err := ctx.Err(); err != nil {
		return j.wrap(ctx, "release", lease.RunID, err)
	}
	if status != journal.StatusRunning && status != journal.StatusSuspended {
		return j.wrap(ctx, "release", lease.RunID, fmt.Errorf("%w: release to status %q (want running or suspended)", journal.ErrInvalid, status))
	}
	if err := backend.CheckLease(lease); err != nil {
		return j.wrap(ctx, "release", lease.RunID, err)
	}
	meta, _, _ := Keys(j.opts.Namespace, lease.RunID)
	if err := j.exec(ctx, releaseScript, []string{meta}, []string{lease.Owner, strconv.FormatInt(lease.Epoch, 10), string(status)}).Error(); err != nil {
		return j.wrap(ctx, "release", lease.RunID, scriptError(err))
	}
	return nil
}

// Append implements journal.Journal.
func (j *Journal) Append(ctx context.Context, lease journal.Lease, b journal.Batch) (int64, error) {
	return j.write(ctx, "append", lease, b, false)
}

// Finish implements journal.Journal.
func (j *Journal) Finish(ctx context.Context, lease journal.Lease, b journal.Batch) (int64, error) {
	last, err := j.write(ctx, "finish", lease, b, true)
	if err != nil || j.opts.Archive == nil {
		return last, err // without an archive the script has set the TTL
	}
	if err := j.Seal(ctx, lease.RunID); err != nil {
		return last, err
	}
	return last, nil
}

// write runs writeScript for b.
func (j *Journal) write(ctx context.Context, op string, lease journal.Lease, b journal.Batch, finish bool) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, j.wrap(ctx, op, lease.RunID, err)
	}
	if err := backend.CheckLease(lease); err != nil {
		return 0, j.wrap(ctx, op, lease.RunID, err)
	}
	p, err := backend.PrepareBatch(b, finish, j.opts.Now())
	if err != nil {
		return 0, j.wrap(ctx, op, lease.RunID, err)
	}
	args := make([]string, 0, 7+3*len(p.Events)+2*len(p.Results))
	args = append(args, lease.Owner, strconv.FormatInt(lease.Epoch, 10), string(p.Status), "", "0",
		strconv.Itoa(len(p.Events)), strconv.Itoa(len(p.Results)))
	if finish {
		args[3] = wire.FormatTime(p.FinishedAt)
		if j.opts.Archive == nil {
			args[4] = ms(j.opts.CompletedTTL)
		}
	}
	// The events' and results' bytes go as they are, not copied into
	// strings: the command is written before its reply is read.
	for _, e := range p.Events {
		args = append(args, strconv.FormatInt(e.Expect, 10), valkey.BinaryString(e.Head), valkey.BinaryString(e.Tail))
	}
	for _, r := range p.Results {
		args = append(args, r.ID, valkey.BinaryString(r.Record))
	}
	last, err := j.exec(ctx, writeScript, j.keys(lease.RunID), args).AsInt64()
	if err != nil {
		// Not released: a command cut off by ctx may still be on its way
		// out, reading the events' bytes.
		return 0, j.wrap(ctx, op, lease.RunID, scriptError(err))
	}
	p.Release() // the reply is read: the command is written
	return last, nil
}

// Seal implements journal.Journal.
func (j *Journal) Seal(ctx context.Context, runID string) error {
	if err := ctx.Err(); err != nil {
		return j.wrap(ctx, "seal", runID, err)
	}
	if err := journal.CheckRunID(runID); err != nil {
		return j.wrap(ctx, "seal", runID, err)
	}
	if a := j.opts.Archive; a != nil {
		r, err := j.liveRun(ctx, runID, "run", 0)
		if backend.IsNotFound(err) {
			return j.sealGone(ctx, runID)
		}
		if err != nil {
			return j.wrap(ctx, "seal", runID, err)
		}
		if !r.Meta.Status.Terminal() {
			return j.wrap(ctx, "seal", runID, fmt.Errorf("%w (%s)", journal.ErrRunNotFinished, r.Meta.Status))
		}
		if err := a.Put(ctx, r); err != nil {
			return j.wrap(ctx, "seal", runID, fmt.Errorf("archive: %w", err))
		}
	}
	err := j.exec(ctx, sealScript, j.keys(runID), []string{ms(j.opts.CompletedTTL)}).Error()
	if err = scriptError(err); backend.IsNotFound(err) {
		return j.sealGone(ctx, runID)
	}
	if err != nil {
		return j.wrap(ctx, "seal", runID, err)
	}
	return nil
}

// sealGone is Seal of a run with no live keys: nothing to do when it is
// archived, else ErrRunNotFound.
func (j *Journal) sealGone(ctx context.Context, runID string) error {
	if a := j.opts.Archive; a != nil {
		_, err := a.Meta(ctx, j.opts.Namespace, runID)
		if err == nil {
			return nil
		}
		if !backend.IsNotFound(err) {
			return j.wrap(ctx, "seal", runID, fmt.Errorf("archive: %w", err))
		}
	}
	return j.wrap(ctx, "seal", runID, journal.ErrRunNotFound)
}

// liveRun reads the parts of run runID that what names from Valkey at one
// instant: "meta", "events", "results", "run" (all three), "tail" (the
// meta and the last count events) or "head" (the meta and the first count
// events). One MULTI/EXEC transaction of plain reads (faster than a
// script, which would copy everything through Lua tables), on keys of one
// slot.
func (j *Journal) liveRun(ctx context.Context, runID, what string, count int64) (*journal.Run, error) {
	if err := journal.CheckRunID(runID); err != nil {
		return nil, err
	}
	mk, ek, rk := Keys(j.opts.Namespace, runID)
	cmds := make(valkey.Commands, 0, 5)
	cmds = append(cmds, j.c.B().Multi().Build(), j.c.B().Hgetall().Key(mk).Build())
	events := what == "events" || what == "run" || what == "tail" || what == "head"
	results := what == "results" || what == "run"
	switch {
	case what == "tail":
		cmds = append(cmds, j.c.B().Xrevrange().Key(ek).End("+").Start("-").Count(count).Build())
	case what == "head":
		cmds = append(cmds, j.c.B().Xrange().Key(ek).Start("-").End("+").Count(count).Build())
	case events:
		cmds = append(cmds, j.c.B().Xrange().Key(ek).Start("-").End("+").Build())
	}
	if results {
		cmds = append(cmds, j.c.B().Hgetall().Key(rk).Build())
	}
	cmds = append(cmds, j.c.B().Exec().Build())
	resps := j.c.DoMulti(ctx, cmds...)
	for _, r := range resps {
		if err := r.Error(); err != nil {
			return nil, err
		}
	}
	reply, err := resps[len(resps)-1].ToArray()
	if err != nil {
		return nil, err
	}
	if len(reply) != len(cmds)-2 {
		return nil, fmt.Errorf("unexpected transaction reply of %d parts", len(reply))
	}
	fields, err := reply[0].AsStrMap()
	if err != nil {
		return nil, fmt.Errorf("meta: %w", err)
	}
	if len(fields) == 0 {
		return nil, journal.ErrRunNotFound
	}
	r := &journal.Run{}
	if r.Meta, err = decodeMeta(fields); err != nil {
		return nil, err
	}
	reply = reply[1:]
	if events {
		entries, err := reply[0].ToArray()
		if err != nil {
			return nil, fmt.Errorf("events: %w", err)
		}
		r.Events = make([]journal.Event, len(entries))
		for i, entry := range entries {
			raw, err := eventOf(entry)
			if err != nil {
				return nil, err
			}
			if r.Events[i], err = backend.DecodeEvent(raw); err != nil {
				return nil, err
			}
		}
		if what == "tail" {
			slices.Reverse(r.Events) // XREVRANGE: newest first
		}
		reply = reply[1:]
	}
	r.Results = []bundle.Result{}
	if results {
		recs, err := reply[0].AsMap()
		if err != nil {
			return nil, fmt.Errorf("results: %w", err)
		}
		r.Results = make([]bundle.Result, 0, len(recs))
		for _, m := range recs {
			raw, err := m.AsBytes()
			if err != nil {
				return nil, fmt.Errorf("results: %w", err)
			}
			res, err := backend.DecodeResult(raw)
			if err != nil {
				return nil, err
			}
			r.Results = append(r.Results, res)
		}
		backend.SortResults(r.Results)
	}
	return r, nil
}

// eventOf returns the "event" field of an XRANGE entry [id, [field, value…]].
func eventOf(entry valkey.ValkeyMessage) ([]byte, error) {
	parts, err := entry.ToArray()
	if err != nil || len(parts) != 2 {
		return nil, fmt.Errorf("malformed events entry: %v", err)
	}
	kv, err := parts[1].ToArray()
	if err != nil {
		return nil, fmt.Errorf("malformed events entry: %w", err)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if name, _ := kv[i].ToString(); name == "event" {
			return kv[i+1].AsBytes()
		}
	}
	return nil, errors.New("events entry without an event field")
}

// decodeMeta reads the meta hash.
func decodeMeta(f map[string]string) (journal.Meta, error) {
	var m journal.Meta
	num := func(name string) (int64, error) {
		n, err := strconv.ParseInt(f[name], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("meta %s: %w", name, err)
		}
		return n, nil
	}
	var err error
	if m.LastSeq, err = num("last_seq"); err != nil {
		return m, err
	}
	if m.LeaseEpoch, err = num("lease_epoch"); err != nil {
		return m, err
	}
	until, err := num("lease_until")
	if err != nil {
		return m, err
	}
	if until > 0 {
		m.LeaseUntil = time.UnixMilli(until).UTC()
	}
	if m.CreatedAt, err = wire.ParseTime(f["created_at"]); err != nil {
		return m, fmt.Errorf("meta created_at: %w", err)
	}
	if s := f["finished_at"]; s != "" {
		if m.FinishedAt, err = wire.ParseTime(s); err != nil {
			return m, fmt.Errorf("meta finished_at: %w", err)
		}
	}
	m.RunID, m.Namespace, m.TargetName, m.CodeVersion = f["run_id"], f["namespace"], f["target_name"], f["code_version"]
	m.Inputs = []byte(f["inputs"])
	m.Status = journal.Status(f["status"])
	m.LeaseOwner = f["lease_owner"]
	m.Origin = journal.OriginValkey
	if !m.Status.Valid() {
		return m, fmt.Errorf("meta status %q", m.Status)
	}
	return m, nil
}

// read returns what of the run (liveRun) from Valkey, or else from the
// archive.
func (j *Journal) read(ctx context.Context, op, runID, what string, count int64) (*journal.Run, error) {
	r, origin, err := backend.ReadThrough(ctx, j.opts.Archive,
		func() (*journal.Run, error) { return j.liveRun(ctx, runID, what, count) },
		func(a journal.Archive) (*journal.Run, error) {
			switch what {
			case "meta":
				m, err := a.Meta(ctx, j.opts.Namespace, runID)
				return &journal.Run{Meta: m}, err
			case "events":
				evs, err := a.Events(ctx, j.opts.Namespace, runID)
				return &journal.Run{Events: evs}, err
			case "tail":
				evs, err := a.Events(ctx, j.opts.Namespace, runID)
				return &journal.Run{Events: evs[max(len(evs)-int(count), 0):]}, err
			case "head":
				m, err := a.Meta(ctx, j.opts.Namespace, runID)
				if err != nil {
					return nil, err
				}
				evs, err := a.Events(ctx, j.opts.Namespace, runID)
				return &journal.Run{Meta: m, Events: evs[:min(len(evs), int(count))]}, err
			case "results":
				rs, err := a.Results(ctx, j.opts.Namespace, runID)
				return &journal.Run{Results: rs}, err
			}
			return a.Run(ctx, j.opts.Namespace, runID)
		})
	if err != nil {
		return nil, fmt.Errorf("valkeyjournal: %s %s: %w", op, runID, err)
	}
	r.Meta.Origin = origin
	return r, nil
}

// Meta implements journal.Journal.
func (j *Journal) Meta(ctx context.Context, runID string) (journal.Meta, error) {
	r, err := j.read(ctx, "meta", runID, "meta", 0)
	if err != nil {
		return journal.Meta{}, err
	}
	return r.Meta, nil
}

// Events implements journal.Journal.
func (j *Journal) Events(ctx context.Context, runID string) ([]journal.Event, journal.Origin, error) {
	r, err := j.read(ctx, "events", runID, "events", 0)
	if err != nil {
		return nil, "", err
	}
	return r.Events, r.Meta.Origin, nil
}

// Tail implements journal.TailReader.
func (j *Journal) Tail(ctx context.Context, runID string, n int) ([]journal.Event, error) {
	if n <= 0 {
		return []journal.Event{}, nil
	}
	r, err := j.read(ctx, "tail", runID, "tail", int64(n))
	if err != nil {
		return nil, err
	}
	return r.Events, nil
}

// Head implements journal.HeadReader: one transaction of the run's meta
// and its first n events (XRANGE … COUNT n).
func (j *Journal) Head(ctx context.Context, runID string, n int) (journal.Meta, []journal.Event, error) {
	what := "head"
	if n <= 0 {
		what = "meta" // COUNT 0 is no limit
	}
	r, err := j.read(ctx, "head", runID, what, int64(n))
	if err != nil {
		return journal.Meta{}, nil, err
	}
	if r.Events == nil {
		r.Events = []journal.Event{}
	}
	return r.Meta, r.Events, nil
}

// Results implements journal.Journal.
func (j *Journal) Results(ctx context.Context, runID string) ([]bundle.Result, journal.Origin, error) {
	r, err := j.read(ctx, "results", runID, "results", 0)
	if err != nil {
		return nil, "", err
	}
	return r.Results, r.Meta.Origin, nil
}

// Run implements journal.Journal.
func (j *Journal) Run(ctx context.Context, runID string) (*journal.Run, error) {
	return j.read(ctx, "run", runID, "run", 0)
}
