// Package journallog adapts a run journal (journal.Journal: Valkey, the
// archive, memory) to host.Log, the persistence the runtime writes to. It
// creates a run in the journal on the run's first append, holds the run's
// lease while the run executes (taking it over when it resumes a run that
// another process left), and translates the journal's errors into flow's.
// Events need no translation: host.Event and journal.Event are the one
// runevent.Event, so the runtime's events are given to the journal as they
// are and the journal's are the runtime's.
//
// A deferrable batch (an answered call's or a run:start,
// host.Batch.Deferrable) is held once the Log knows the run's last run_seq
// (a write returned it, or the caller told it: Seen), and written with the
// run's next batch that is not, or with its Finish or Release, or once the
// held batches reach MaxHeldEvents events or are MaxHoldFor old: a run
// replaying recorded calls writes once per many calls instead of once per
// call. Held batches are in no journal until then: a crash loses them, and
// the run resumed elsewhere makes them again (from its recording, or its
// run:start with the code that resumes it); what reaches the journal is
// always a prefix of the run, in run_seq order.
//
// journallog imports bundle, flow/host, journal and runevent.
package journallog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/runevent"
)

// Log is a host.Log over a journal.Journal. It is safe for concurrent use
// (a run's children are written concurrently with it).
type Log struct {
	j           journal.Journal
	owner       string
	leaseTTL    time.Duration
	afterFinish func(ctx context.Context, runID string) error
	beforeAct   func(ctx context.Context, runID string, seq int64) error

	mu     sync.Mutex
	leases map[string]journal.Lease
	held   map[string]*heldBatches
}

// Bounds of the batches a Log holds for one run: it writes them once they
// hold MaxHeldEvents events, or when a batch arrives MaxHoldFor after the
// first held one.
const (
	MaxHeldEvents = 512
	MaxHoldFor    = 50 * time.Millisecond
)

// heldBatches are a run's deferrable batches not yet written, and the
// run_seq of the last event written or held. mu orders the run's writes:
// held batches go to the journal before the batch that follows them.
type heldBatches struct {
	mu      sync.Mutex
	events  []journal.Event
	results []bundle.Result
	since   time.Time
	// lastSeq is the run_seq of the last event written or held; known once
	// a write returned one.
	lastSeq int64
	known   bool
}

var _ host.Log = (*Log)(nil)

// Options configure a Log.
type Options struct {
	// Owner names this process in the runs' leases; it should be unique per
	// process incarnation (host name, pid, a random suffix). Required.
	Owner string
	// LeaseTTL is the lease time to live (the journal's default when zero).
	LeaseTTL time.Duration
	// AfterFinish, when set, is called with each run this Log finished
	// (its terminal event written), before Finish returns; its error fails
	// the Finish. A worker waiting for replicas makes sure there that the
	// run's end is on them before the run's result is used (a parent
	// taking its child's result).
	AfterFinish func(ctx context.Context, runID string) error
	// BeforeAct, when set, is called after each append of a batch the run
	// acts on (host.Batch.Acts: a live model call's or write's call:start)
	// with the run_seq it got, before Append returns; its error fails the
	// Append, and the call is not made. A worker waiting for replicas makes
	// sure there that the run, and the call's start, are on them.
	BeforeAct func(ctx context.Context, runID string, seq int64) error
}

// New returns a Log that writes to j.
func New(j journal.Journal, opts Options) (*Log, error) {
	if opts.Owner == "" {
		return nil, errors.New("journallog: an owner is required")
	}
	return &Log{j: j, owner: opts.Owner, leaseTTL: opts.LeaseTTL, afterFinish: opts.AfterFinish, beforeAct: opts.BeforeAct,
		leases: map[string]journal.Lease{}, held: map[string]*heldBatches{}}, nil
}

// Load implements host.Log: the run's events and results, live or archived;
// an empty Recorded for a run the journal does not know. A lease this Log
// holds on such a run is forgotten (the run was lost, a failover rolled
// its creation back), so that its next Append creates it again.
func (l *Log) Load(ctx context.Context, runID string) (host.Recorded, error) {
	r, err := l.j.Run(ctx, runID)
	if errors.Is(err, journal.ErrRunNotFound) {
		l.forget(runID)
		return host.Recorded{}, nil
	}
	if err != nil {
		return host.Recorded{}, fmt.Errorf("journallog: load %s: %w", runID, err)
	}
	// host.Event and journal.Event are the one runevent.Event.
	return host.Recorded{Events: r.Events, Results: r.Results}, nil
}

// Append implements host.Log. The run's first append creates it in the
// journal (its run:start gives the inputs and code version); an append to a
// run this Log holds no lease on takes the lease over first. A deferrable
// batch may be held (see the package doc); it returns the run_seq its last
// event will have.
func (l *Log) Append(ctx context.Context, runID string, b host.Batch) (int64, error) {
	lease, err := l.lease(ctx, runID, b)
	if err != nil {
		return 0, err
	}
	h := l.heldFor(runID)
	h.mu.Lock()
	defer h.mu.Unlock()
	if b.Deferrable && h.known && len(h.events)+len(b.Events) < MaxHeldEvents &&
		(len(h.events) == 0 || time.Since(h.since) < MaxHoldFor) {
		if len(h.events) == 0 {
			h.since = time.Now()
			if h.events == nil {
				h.events, h.results = getHeld()
			}
		}
		// Copies: the caller reuses the batch's slices.
		h.events = append(h.events, b.Events...)
		h.results = append(h.results, b.Results...)
		h.lastSeq += int64(len(b.Events))
		return h.lastSeq, nil
	}
	batch := journal.Batch{Events: b.Events, Results: b.Results}
	if len(h.events) > 0 {
		batch = journal.Batch{Events: append(h.events, b.Events...), Results: append(h.results, b.Results...)}
	}
	h.events, h.results = h.events[:0], h.results[:0]
	seq, err := l.j.Append(ctx, lease, batch)
	if err != nil {
		h.known = false
		l.mu.Lock()
		if l.held[runID] == h {
			delete(l.held, runID)
		}
		if errors.Is(err, journal.ErrRunNotFound) {
			delete(l.leases, runID) // lost: the next Append creates it again
		}
		l.mu.Unlock()
		return 0, fmt.Errorf("journallog: append %s: %w", runID, translate(err))
	}
	h.lastSeq, h.known = seq, true
	if b.Acts && l.beforeAct != nil {
		if err := l.beforeAct(ctx, runID, seq); err != nil {
			return 0, fmt.Errorf("journallog: append %s: the run acts on it: %w", runID, err)
		}
	}
	return seq, nil
}

// heldSlices are the backing arrays of a finished run's held batches,
// recycled by the runs after it (heldPool): a run replaying recorded calls
// holds hundreds of events at a time, and growing a new slice for each run
// was most of what a case run on a worker allocated.
type heldSlices struct {
	events  []journal.Event
	results []bundle.Result
}

var heldPool sync.Pool // of *heldSlices

// getHeld returns empty slices to hold a run's batches in: recycled ones
// when there are, else nil (append makes them).
func getHeld() ([]journal.Event, []bundle.Result) {
	if hs, ok := heldPool.Get().(*heldSlices); ok {
		return hs.events, hs.results
	}
	return nil, nil
}

// putHeld recycles the backing arrays of events and results, which nothing
// uses any more (a journal copies what it is given), cleared so that they
// keep nothing of the run alive.
func putHeld(events []journal.Event, results []bundle.Result) {
	if cap(events) == 0 || cap(events) > 4*MaxHeldEvents {
		return
	}
	clear(events[:cap(events)])
	clear(results[:cap(results)])
	heldPool.Put(&heldSlices{events: events[:0], results: results[:0]})
}

// forget drops what the Log keeps of run runID: its lease and held
// batches.
func (l *Log) forget(runID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.leases, runID)
	delete(l.held, runID)
}

// heldFor is runID's held batches, made on first use.
func (l *Log) heldFor(runID string) *heldBatches {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, ok := l.held[runID]
	if !ok {
		h = &heldBatches{}
		l.held[runID] = h
	}
	return h
}

// takeHeld removes runID's held batches from the Log and returns them,
// locked (the caller unlocks); nil when there are none.
func (l *Log) takeHeld(runID string) *heldBatches {
	l.mu.Lock()
	h, ok := l.held[runID]
	delete(l.held, runID)
	l.mu.Unlock()
	if !ok {
		return nil
	}
	h.mu.Lock()
	return h
}

// Finish implements host.Log: the run's held batches and terminal in one
// write.
func (l *Log) Finish(ctx context.Context, runID string, terminal host.Event) (int64, error) {
	lease, err := l.lease(ctx, runID, host.Batch{})
	if err != nil {
		return 0, err
	}
	batch := journal.Batch{Events: []journal.Event{terminal}}
	if h := l.takeHeld(runID); h != nil {
		batch = journal.Batch{Events: append(h.events, terminal), Results: h.results}
		h.events, h.results, h.known = nil, nil, false
		defer h.mu.Unlock()
		defer putHeld(batch.Events, batch.Results) // the journal keeps none of them
	}
	seq, err := l.j.Finish(ctx, lease, batch)
	if err != nil {
		return 0, fmt.Errorf("journallog: finish %s: %w", runID, translate(err))
	}
	l.mu.Lock()
	delete(l.leases, runID)
	l.mu.Unlock()
	if l.afterFinish != nil {
		if err := l.afterFinish(ctx, runID); err != nil {
			return 0, fmt.Errorf("journallog: finish %s: %w", runID, err)
		}
	}
	return seq, nil
}

// Release gives up the lease on a run that stopped without finishing: status
// journal.StatusSuspended for a run waiting on something outside,
// journal.StatusRunning to hand it back to be resumed. A run this Log holds
// no lease on is left alone.
func (l *Log) Release(ctx context.Context, runID string, status journal.Status) error {
	l.mu.Lock()
	lease, ok := l.leases[runID]
	delete(l.leases, runID)
	l.mu.Unlock()
	if h := l.takeHeld(runID); h != nil {
		// The held batches first, under the lease still held: what the run
		// did is kept. A failure loses only them (the run makes them
		// again); the lease is released all the same.
		if ok && len(h.events) > 0 {
			_, _ = l.j.Append(ctx, lease, journal.Batch{Events: h.events, Results: h.results})
		}
		putHeld(h.events, h.results)
		h.events, h.results, h.known = nil, nil, false
		h.mu.Unlock()
	}
	if !ok {
		return nil
	}
	if err := l.j.Release(ctx, lease, status); err != nil && !errors.Is(err, journal.ErrRunFinished) {
		return fmt.Errorf("journallog: release %s: %w", runID, err)
	}
	return nil
}

// lease returns the lease this Log holds on runID, creating the run (from
// b's run:start) or taking its lease over as needed.
func (l *Log) lease(ctx context.Context, runID string, b host.Batch) (journal.Lease, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lease, ok := l.leases[runID]; ok {
		return lease, nil
	}
	lease, err := l.j.Acquire(ctx, journal.AcquireParams{RunID: runID, Owner: l.owner, TTL: l.leaseTTL})
	if errors.Is(err, journal.ErrRunNotFound) {
		lease, err = l.create(ctx, runID, b)
	}
	if err != nil {
		return journal.Lease{}, fmt.Errorf("journallog: lease %s: %w", runID, translate(err))
	}
	l.leases[runID] = lease
	return lease, nil
}

func (l *Log) create(ctx context.Context, runID string, b host.Batch) (journal.Lease, error) {
	p := journal.CreateParams{RunID: runID, TargetName: b.Target, Owner: l.owner, LeaseTTL: l.leaseTTL}
	for _, e := range b.Events {
		if e.Kind == runevent.RunStart {
			p.Inputs, p.CodeVersion = e.Inputs, e.CodeVersion
			break
		}
	}
	// The run was submitted when its first event happened, so that
	// run:submitted is never stamped after the run:start it precedes.
	for _, e := range b.Events {
		if !e.At.IsZero() && (p.At.IsZero() || e.At.Before(p.At)) {
			p.At = e.At
		}
	}
	if p.TargetName == "" {
		return journal.Lease{}, fmt.Errorf("%w: run %s is not in the journal and the append names no target", journal.ErrInvalid, runID)
	}
	return l.j.Create(ctx, p)
}

// translate maps the journal's errors onto the ones host.Log documents.
func translate(err error) error {
	switch {
	case errors.Is(err, journal.ErrRunFinished):
		return fmt.Errorf("%w: %w", host.ErrFinished, err)
	case errors.Is(err, journal.ErrResultConflict):
		return fmt.Errorf("%w: %w", host.ErrResultExists, err)
	}
	return err
}

// Adopt makes lease, a lease the caller took on lease.RunID with this Log's
// owner (journal.Acquire or Create), the one this Log writes under, so that
// an executor can take a run's lease (and see ErrLeaseHeld) before it runs
// the run through this Log, and renew it with Renew while it executes.
func (l *Log) Adopt(lease journal.Lease) error {
	if lease.Owner != l.owner {
		return fmt.Errorf("journallog: adopt %s: the lease is %q's, not %q's", lease.RunID, lease.Owner, l.owner)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leases[lease.RunID] = lease
	return nil
}

// Seen tells the Log that run runID's journal ends at run_seq lastSeq, as
// the caller read it while this Log holds the run's lease (Adopt): the Log
// may then hold the run's deferrable batches from its first append on (a
// worker's run then writes its run:start with its first batch that is not
// deferrable) instead of only once a write returned the run's last
// run_seq. A run this Log holds no lease on, or whose last run_seq it
// knows already, is left as it is.
func (l *Log) Seen(runID string, lastSeq int64) {
	l.mu.Lock()
	_, leased := l.leases[runID]
	l.mu.Unlock()
	if !leased {
		return
	}
	h := l.heldFor(runID)
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.known {
		h.lastSeq, h.known = lastSeq, true
	}
}

// Renew extends the lease this Log holds on runID (journal.Renew) and keeps
// the renewed lease. It returns false when the Log holds no lease on the
// run (it finished or was released). Errors wrap the journal's
// (ErrLeaseLost when another owner took the run over, ErrRunFinished).
func (l *Log) Renew(ctx context.Context, runID string) (bool, error) {
	l.mu.Lock()
	lease, ok := l.leases[runID]
	l.mu.Unlock()
	if !ok {
		return false, nil
	}
	renewed, err := l.j.Renew(ctx, lease)
	if err != nil {
		return true, fmt.Errorf("journallog: renew %s: %w", runID, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur, ok := l.leases[runID]; ok && cur.Epoch == renewed.Epoch {
		l.leases[runID] = renewed
	}
	return true, nil
}
