// Package memjournal is a run journal in memory: the embedded default when
// no Valkey is configured, and the journal of unit tests. It behaves like
// valkeyjournal in everything callers can observe: the same checks and
// errors, the same stored bytes, lease fencing and expiry, the completed TTL
// of finished runs, and archiving and read fallback when given an Archive.
// Its clock is injectable (Options.Now), so tests can move leases and TTLs
// forward without waiting.
//
// Runs live in one Journal value and are gone when the process ends.
//
// memjournal imports journal and bundle, nothing else of the project.
package memjournal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/internal/backend"
)

var _ journal.Journal = (*Journal)(nil)

// Options tune New; zero fields take the defaults.
type Options struct {
	// Namespace the runs are kept under (journal.DefaultNamespace).
	Namespace string
	// CompletedTTL is how long a finished run stays readable here
	// (journal.DefaultCompletedTTL).
	CompletedTTL time.Duration
	// LeaseTTL is the lease time to live when a call does not give one
	// (journal.DefaultLeaseTTL).
	LeaseTTL time.Duration
	// Archive, when set, receives every finished run before it may expire,
	// and reads fall back to it.
	Archive journal.Archive
	// Now is the clock of event stamps, leases and expiry (time.Now).
	Now func() time.Time
}

// Journal is a run journal in memory. It is safe for concurrent use.
type Journal struct {
	opts backend.Options

	mu   sync.Mutex
	runs map[string]*run
}

// run is one run; events and records are never modified once stored, so
// readers may keep them after unlocking.
type run struct {
	meta      journal.Meta
	events    [][]byte
	results   map[string][]byte
	expiresAt time.Time // zero: does not expire
}

// New returns an empty journal. It fails only for an invalid namespace.
func New(opts Options) (*Journal, error) {
	o, err := backend.Options{
		Namespace:    opts.Namespace,
		CompletedTTL: opts.CompletedTTL,
		LeaseTTL:     opts.LeaseTTL,
		Archive:      opts.Archive,
		Now:          opts.Now,
	}.Defaults()
	if err != nil {
		return nil, fmt.Errorf("memjournal: %w", err)
	}
	return &Journal{opts: o, runs: map[string]*run{}}, nil
}

// Namespace implements journal.Journal.
func (j *Journal) Namespace() string { return j.opts.Namespace }

// lookup returns the live run, dropping it when it has expired at now.
// j.mu must be held.
func (j *Journal) lookup(id string, now time.Time) *run {
	r := j.runs[id]
	if r != nil && !r.expiresAt.IsZero() && !now.Before(r.expiresAt) {
		delete(j.runs, id)
		return nil
	}
	return r
}

// writable returns the live run that lease may write to. j.mu must be held.
func (j *Journal) writable(id string, lease journal.Lease, now time.Time) (*run, error) {
	r := j.lookup(id, now)
	switch {
	case r == nil:
		return nil, journal.ErrRunNotFound
	case r.meta.Status.Terminal():
		return nil, fmt.Errorf("%w (%s)", journal.ErrRunFinished, r.meta.Status)
	case r.meta.LeaseOwner != lease.Owner || r.meta.LeaseEpoch != lease.Epoch:
		return nil, leaseLost(r.meta, lease)
	}
	return r, nil
}

// leaseLost describes who holds the run now.
func leaseLost(m journal.Meta, l journal.Lease) error {
	if m.LeaseOwner == "" {
		return fmt.Errorf("%w: %q epoch %d; the run is not leased (epoch %d)", journal.ErrLeaseLost, l.Owner, l.Epoch, m.LeaseEpoch)
	}
	return fmt.Errorf("%w: %q epoch %d; the run is leased to %q epoch %d", journal.ErrLeaseLost, l.Owner, l.Epoch, m.LeaseOwner, m.LeaseEpoch)
}

// notFound is ErrRunFinished for a run that is only in the archive, else
// ErrRunNotFound.
func (j *Journal) notFound(ctx context.Context, id string) error {
	if j.opts.Archive != nil {
		if _, err := j.opts.Archive.Meta(ctx, j.opts.Namespace, id); err == nil {
			return fmt.Errorf("%w (archived)", journal.ErrRunFinished)
		}
	}
	return journal.ErrRunNotFound
}

// wrap adds the operation and the run id; a not-found error of a write is
// refined by notFound.
func (j *Journal) wrap(ctx context.Context, op, id string, err error) error {
	if op != "create" && errors.Is(err, journal.ErrRunNotFound) {
		err = j.notFound(ctx, id)
	}
	return fmt.Errorf("memjournal: %s %s: %w", op, id, err)
}

// Create implements journal.Journal.
func (j *Journal) Create(ctx context.Context, p journal.CreateParams) (journal.Lease, error) {
	if err := ctx.Err(); err != nil {
		return journal.Lease{}, j.wrap(ctx, "create", p.RunID, err)
	}
	now := j.opts.Now()
	c, err := backend.PrepareCreate(p, now, j.opts.LeaseTTL)
	if err != nil {
		return journal.Lease{}, j.wrap(ctx, "create", p.RunID, err)
	}
	if a := j.opts.Archive; a != nil {
		if _, err := a.Meta(ctx, j.opts.Namespace, p.RunID); err == nil {
			return journal.Lease{}, j.wrap(ctx, "create", p.RunID, fmt.Errorf("%w (archived)", journal.ErrRunExists))
		} else if !isNotFound(err) {
			return journal.Lease{}, j.wrap(ctx, "create", p.RunID, err)
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.lookup(p.RunID, now) != nil {
		return journal.Lease{}, j.wrap(ctx, "create", p.RunID, journal.ErrRunExists)
	}
	lease := journal.Lease{RunID: p.RunID, TTL: c.LeaseTTL}
	if p.Owner != "" {
		lease.Owner, lease.Epoch, lease.Until = p.Owner, 1, now.Add(c.LeaseTTL)
	}
	j.runs[p.RunID] = &run{
		meta: journal.Meta{
			RunID:       p.RunID,
			Namespace:   j.opts.Namespace,
			TargetName:  p.TargetName,
			CodeVersion: p.CodeVersion,
			Inputs:      c.Inputs,
			Status:      journal.StatusRunning,
			LastSeq:     1,
			LeaseOwner:  lease.Owner,
			LeaseEpoch:  lease.Epoch,
			LeaseUntil:  lease.Until,
			CreatedAt:   c.CreatedAt,
		},
		events:  [][]byte{c.Event},
		results: map[string][]byte{},
	}
	return lease, nil
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
	j.mu.Lock()
	defer j.mu.Unlock()
	now := j.opts.Now()
	r := j.lookup(p.RunID, now)
	switch {
	case r == nil:
		return journal.Lease{}, j.wrap(ctx, "acquire", p.RunID, journal.ErrRunNotFound)
	case r.meta.Status.Terminal():
		return journal.Lease{}, j.wrap(ctx, "acquire", p.RunID, fmt.Errorf("%w (%s)", journal.ErrRunFinished, r.meta.Status))
	case r.meta.LeaseOwner != "" && r.meta.LeaseOwner != p.Owner && now.Before(r.meta.LeaseUntil):
		return journal.Lease{}, j.wrap(ctx, "acquire", p.RunID, fmt.Errorf("%w: %q epoch %d until %s",
			journal.ErrLeaseHeld, r.meta.LeaseOwner, r.meta.LeaseEpoch, r.meta.LeaseUntil.UTC().Format(time.RFC3339Nano)))
	}
	r.meta.LeaseOwner = p.Owner
	r.meta.LeaseEpoch++
	r.meta.LeaseUntil = now.Add(ttl)
	r.meta.Status = journal.StatusRunning
	return journal.Lease{RunID: p.RunID, Owner: p.Owner, Epoch: r.meta.LeaseEpoch, Until: r.meta.LeaseUntil, TTL: ttl}, nil
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
	j.mu.Lock()
	defer j.mu.Unlock()
	now := j.opts.Now()
	r, err := j.writable(lease.RunID, lease, now)
	if err != nil {
		return lease, j.wrap(ctx, "renew", lease.RunID, err)
	}
	r.meta.LeaseUntil = now.Add(ttl)
	lease.Until, lease.TTL = r.meta.LeaseUntil, ttl
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
	j.mu.Lock()
	defer j.mu.Unlock()
	r, err := j.writable(lease.RunID, lease, j.opts.Now())
	if err != nil {
		return j.wrap(ctx, "release", lease.RunID, err)
	}
	r.meta.LeaseOwner, r.meta.LeaseUntil, r.meta.Status = "", time.Time{}, status
	return nil
}

// Append implements journal.Journal.
func (j *Journal) Append(ctx context.Context, lease journal.Lease, b journal.Batch) (int64, error) {
	return j.write(ctx, "append", lease, b, false)
}

// Finish implements journal.Journal.
func (j *Journal) Finish(ctx context.Context, lease journal.Lease, b journal.Batch) (int64, error) {
	last, err := j.write(ctx, "finish", lease, b, true)
	if err != nil {
		return 0, err
	}
	if err := j.Seal(ctx, lease.RunID); err != nil {
		return last, err
	}
	return last, nil
}

// write appends b under lease, finishing the run when finish is set.
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
	defer p.Release() // what is kept is copied (AppendRecord.JSON, the records' clones)
	j.mu.Lock()
	defer j.mu.Unlock()
	r, err := j.writable(lease.RunID, lease, j.opts.Now())
	if err != nil {
		return 0, j.wrap(ctx, op, lease.RunID, err)
	}
	// Check everything before changing anything.
	seq := r.meta.LastSeq
	for i, e := range p.Events {
		if e.Expect != 0 && e.Expect != seq+int64(i)+1 {
			return 0, j.wrap(ctx, op, lease.RunID, fmt.Errorf("%w: event asked for run_seq %d, next is %d", journal.ErrSeqConflict, e.Expect, seq+int64(i)+1))
		}
	}
	for _, res := range p.Results {
		if cur, ok := r.results[res.ID]; ok && string(cur) != string(res.Record) {
			return 0, j.wrap(ctx, op, lease.RunID, fmt.Errorf("%w: %s", journal.ErrResultConflict, res.ID))
		}
	}
	for _, e := range p.Events {
		seq++
		r.events = append(r.events, e.JSON(seq))
	}
	for _, res := range p.Results {
		r.results[res.ID] = slices.Clone(res.Record)
	}
	r.meta.LastSeq = seq
	if finish {
		r.meta.Status = p.Status
		r.meta.FinishedAt = p.FinishedAt
		r.meta.LeaseUntil = time.Time{}
	}
	return seq, nil
}

// Seal implements journal.Journal.
func (j *Journal) Seal(ctx context.Context, runID string) error {
	if err := ctx.Err(); err != nil {
		return j.wrap(ctx, "seal", runID, err)
	}
	j.mu.Lock()
	r := j.lookup(runID, j.opts.Now())
	if r == nil {
		j.mu.Unlock()
		if a := j.opts.Archive; a != nil {
			if _, err := a.Meta(ctx, j.opts.Namespace, runID); err == nil {
				return nil
			} else if !isNotFound(err) {
				return j.wrap(ctx, "seal", runID, err)
			}
		}
		return j.wrap(ctx, "seal", runID, journal.ErrRunNotFound)
	}
	if !r.meta.Status.Terminal() {
		j.mu.Unlock()
		return j.wrap(ctx, "seal", runID, fmt.Errorf("%w (%s)", journal.ErrRunNotFinished, r.meta.Status))
	}
	if j.opts.Archive == nil {
		r.expiresAt = j.opts.Now().Add(j.opts.CompletedTTL)
		j.mu.Unlock()
		return nil
	}
	snap := j.snapshot(r)
	j.mu.Unlock()
	run, err := decode(snap)
	if err != nil {
		return j.wrap(ctx, "seal", runID, err)
	}
	if err := j.opts.Archive.Put(ctx, run); err != nil {
		return j.wrap(ctx, "seal", runID, fmt.Errorf("archive: %w", err))
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if r := j.lookup(runID, j.opts.Now()); r != nil {
		r.expiresAt = j.opts.Now().Add(j.opts.CompletedTTL)
	}
	return nil
}

// snap is a run's stored state, copied under the lock.
type snap struct {
	meta    journal.Meta
	events  [][]byte
	results [][]byte
}

// snapshot copies r's state. j.mu must be held.
func (j *Journal) snapshot(r *run) snap {
	s := snap{meta: r.meta, events: slices.Clip(r.events)}
	s.meta.Inputs = bytes.Clone(r.meta.Inputs)
	s.meta.Origin = journal.OriginValkey
	for _, id := range slices.Sorted(maps.Keys(r.results)) {
		s.results = append(s.results, r.results[id])
	}
	return s
}

// live reads the live run's stored state.
func (j *Journal) live(runID string) (snap, error) {
	if err := journal.CheckRunID(runID); err != nil {
		return snap{}, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	r := j.lookup(runID, j.opts.Now())
	if r == nil {
		return snap{}, journal.ErrRunNotFound
	}
	return j.snapshot(r), nil
}

// decode turns a snapshot into a journal.Run.
func decode(s snap) (*journal.Run, error) {
	r := &journal.Run{Meta: s.meta, Events: make([]journal.Event, len(s.events)), Results: make([]bundle.Result, len(s.results))}
	var err error
	for i, raw := range s.events {
		if r.Events[i], err = backend.DecodeEvent(bytes.Clone(raw)); err != nil {
			return nil, err
		}
	}
	for i, raw := range s.results {
		if r.Results[i], err = backend.DecodeResult(bytes.Clone(raw)); err != nil {
			return nil, err
		}
	}
	backend.SortResults(r.Results)
	return r, nil
}

// Meta implements journal.Journal.
func (j *Journal) Meta(ctx context.Context, runID string) (journal.Meta, error) {
	m, origin, err := backend.ReadThrough(ctx, j.opts.Archive,
		func() (journal.Meta, error) {
			s, err := j.live(runID)
			return s.meta, err
		},
		func(a journal.Archive) (journal.Meta, error) { return a.Meta(ctx, j.opts.Namespace, runID) })
	if err != nil {
		return m, fmt.Errorf("memjournal: meta %s: %w", runID, err)
	}
	m.Origin = origin
	return m, nil
}

// Events implements journal.Journal.
// Tail implements journal.TailReader: the run's last n events.
func (j *Journal) Tail(ctx context.Context, runID string, n int) ([]journal.Event, error) {
	evs, _, err := j.Events(ctx, runID)
	if err != nil {
		return nil, err
	}
	return evs[max(len(evs)-max(n, 0), 0):], nil
}

// Head implements journal.HeadReader.
func (j *Journal) Head(ctx context.Context, runID string, n int) (journal.Meta, []journal.Event, error) {
	r, err := j.Run(ctx, runID)
	if err != nil {
		return journal.Meta{}, nil, err
	}
	return r.Meta, r.Events[:min(len(r.Events), max(n, 0))], nil
}

// Events implements journal.Journal.
func (j *Journal) Events(ctx context.Context, runID string) ([]journal.Event, journal.Origin, error) {
	evs, origin, err := backend.ReadThrough(ctx, j.opts.Archive,
		func() ([]journal.Event, error) {
			s, err := j.live(runID)
			if err != nil {
				return nil, err
			}
			r, err := decode(snap{meta: s.meta, events: s.events})
			if err != nil {
				return nil, err
			}
			return r.Events, nil
		},
		func(a journal.Archive) ([]journal.Event, error) { return a.Events(ctx, j.opts.Namespace, runID) })
	if err != nil {
		return nil, "", fmt.Errorf("memjournal: events %s: %w", runID, err)
	}
	return evs, origin, nil
}

// Results implements journal.Journal.
func (j *Journal) Results(ctx context.Context, runID string) ([]bundle.Result, journal.Origin, error) {
	rs, origin, err := backend.ReadThrough(ctx, j.opts.Archive,
		func() ([]bundle.Result, error) {
			s, err := j.live(runID)
			if err != nil {
				return nil, err
			}
			r, err := decode(snap{meta: s.meta, results: s.results})
			if err != nil {
				return nil, err
			}
			return r.Results, nil
		},
		func(a journal.Archive) ([]bundle.Result, error) { return a.Results(ctx, j.opts.Namespace, runID) })
	if err != nil {
		return nil, "", fmt.Errorf("memjournal: results %s: %w", runID, err)
	}
	return rs, origin, nil
}

// Run implements journal.Journal.
func (j *Journal) Run(ctx context.Context, runID string) (*journal.Run, error) {
	r, origin, err := backend.ReadThrough(ctx, j.opts.Archive,
		func() (*journal.Run, error) {
			s, err := j.live(runID)
			if err != nil {
				return nil, err
			}
			return decode(s)
		},
		func(a journal.Archive) (*journal.Run, error) { return a.Run(ctx, j.opts.Namespace, runID) })
	if err != nil {
		return nil, fmt.Errorf("memjournal: run %s: %w", runID, err)
	}
	r.Meta.Origin = origin
	return r, nil
}

// isNotFound reports whether err is the archive's not-found.
func isNotFound(err error) bool { return backend.IsNotFound(err) }
