// Package consumer is the worker's stream consumer: one member of a
// consumer group on one stream and its loop (Run), used for both of the
// worker's streams. The loop reads its own pending entries first, then new
// ones, never holding more entries than slots (an entry left pending keeps
// its slot, parked, until it is claimed again or found gone elsewhere),
// claims the group's entries idle past their backoff, and dead-letters
// what keeps failing. A Handler returns a Verdict (acked, retry, dead
// letter); what differs between the streams (the backoff, how failures
// are counted, what a dead letter records, what keeps entries in flight
// alive) is the Policy a Consumer is given. The stream commands it runs
// (XREADGROUP, XPENDING, XCLAIM) and the parsing of their replies are
// here too.
//
// It imports only valkey-go, zap, the standard library and the worker's
// batch package (which imports nothing of the project), so that the
// worker's parts can share it without cycles.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap"

	"github.com/pyrula/caseworker/worker/internal/batch"
)

// Config names the stream and the consumer group member a Consumer reads
// as, how many entries it may hold, and the Policy its Run follows.
type Config struct {
	Stream   string // the stream key
	Group    string // the consumer group
	Consumer string // this member's name in the group
	Slots    int    // the most entries in flight or parked at once (at least 1)
	// Name names the stream in log lines ("the message stream").
	Name string
	// ReadBlock is how long one read of new entries blocks
	// (DefaultReadBlock when 0), at most a quarter of Policy.ClaimIdle so
	// that claims are not late.
	ReadBlock time.Duration
	// Policy is what Run does with failed entries; Run needs its ClaimIdle.
	Policy Policy
}

// Deps are what a Consumer uses.
type Deps struct {
	Client valkey.Client
	// Logger receives Run's warnings (zap.NewNop when nil).
	Logger *zap.Logger
	// Go runs each handler on a goroutine of its own (a go statement when
	// nil), so that the caller can reuse goroutines.
	Go func(fn func())
	// Batcher, when set, is the handlers' batcher: Run tries a read of new
	// entries without BLOCK in its next batch before its blocking read, so
	// that under load the read shares a round trip with the handlers'
	// commands.
	Batcher *batch.Batcher
	// Tasks, with Batcher, runs the handlers of new entries as tasks of
	// Run's own goroutine (batch.Tasks): their commands through Batcher go
	// in one round trip per round (Batcher.Round), with the read of the next
	// new entries, and a handler goes on on a goroutine of its own (Go) only
	// once it detaches (batch.Detach). Reclaimed and re-read entries, and
	// dead letters, keep goroutines of their own.
	Tasks bool
	// Events are told what Run did.
	Events Events
}

// Consumer is one member of a consumer group on one stream, with its
// slots and its sets of entries. Its methods are safe for concurrent use.
type Consumer struct {
	cfg     Config
	client  valkey.Client
	log     *zap.Logger
	spawn   func(fn func())
	batcher *batch.Batcher
	tasks   bool // Deps.Tasks, with a batcher
	events  Events
	slots   chan struct{}
	nslots  int

	// Active holds the entries being handled here; Parked those left
	// pending here after a failed handling, each keeping its slot until
	// it is claimed again or found gone to another consumer.
	Active, Parked Set

	inflight sync.WaitGroup // the handlers Run started
}

// New returns the Consumer cfg describes.
func New(cfg Config, deps Deps) (*Consumer, error) {
	if cfg.Stream == "" || cfg.Group == "" || cfg.Consumer == "" {
		return nil, errors.New("consumer: stream, group and consumer name are required")
	}
	if deps.Client == nil {
		return nil, errors.New("consumer: a Valkey client is required")
	}
	if err := cfg.Policy.check(); err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		cfg.Name = cfg.Stream
	}
	log := deps.Logger
	if log == nil {
		log = zap.NewNop()
	}
	spawn := deps.Go
	if spawn == nil {
		spawn = func(fn func()) { go fn() }
	}
	n := max(cfg.Slots, 1)
	return &Consumer{cfg: cfg, client: deps.Client, log: log, spawn: spawn, batcher: deps.Batcher, tasks: deps.Tasks && deps.Batcher != nil, events: deps.Events,
		slots: make(chan struct{}, n), nslots: n}, nil
}

// Config returns the consumer's configuration.
func (c *Consumer) Config() Config { return c.cfg }

// Acquire takes one slot, waiting until one is free or ctx is done; it
// reports whether it took one.
func (c *Consumer) Acquire(ctx context.Context) bool {
	select {
	case c.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// TryAcquire takes one slot if one is free.
func (c *Consumer) TryAcquire() bool {
	select {
	case c.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// AcquireEvery takes one slot, waiting until one is free or ctx is done,
// and calls idle every d while none is (to free or use the slots of parked
// entries); it reports whether it took one.
func (c *Consumer) AcquireEvery(ctx context.Context, d time.Duration, idle func()) bool {
	for {
		t := time.NewTimer(d)
		select {
		case c.slots <- struct{}{}:
			t.Stop()
			return true
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
			idle()
		}
	}
}

// TakeFree adds to the one slot the caller holds every free slot, up to n
// in all, and returns how many it holds.
func (c *Consumer) TakeFree(n int) int {
	return 1 + c.takeUpTo(n-1)
}

// takeUpTo takes free slots, up to n, without waiting, and returns how
// many it took.
func (c *Consumer) takeUpTo(n int) int {
	took := 0
	for took < n && c.TryAcquire() {
		took++
	}
	return took
}

// Release frees one slot.
func (c *Consumer) Release() { <-c.slots }

// ReleaseN frees n slots.
func (c *Consumer) ReleaseN(n int) {
	for range n {
		c.Release()
	}
}

// Read runs one XREADGROUP from id for at most count entries: ">" reads new
// entries, blocking up to block (at least 1 ms); another id reads this
// member's pending entries after it, without blocking. Valkey's nil reply
// is no entries.
func (c *Consumer) Read(ctx context.Context, id string, count int, block time.Duration) ([]valkey.XRangeEntry, error) {
	b := c.client.B().Xreadgroup().Group(c.cfg.Group, c.cfg.Consumer).Count(int64(count))
	var cmd valkey.Completed
	if id == ">" {
		cmd = b.Block(max(block.Milliseconds(), 1)).Streams().Key(c.cfg.Stream).Id(id).Build()
	} else {
		cmd = b.Streams().Key(c.cfg.Stream).Id(id).Build()
	}
	res, err := c.client.Do(ctx, cmd).AsXRead()
	if valkey.IsValkeyNil(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return res[c.cfg.Stream], nil
}

// Claim XCLAIMs entry id for this member if it is still idle at least
// minIdle (so that of several workers only one wins), returning it (none
// when another worker won or the entry was deleted).
func (c *Consumer) Claim(ctx context.Context, id string, minIdle time.Duration) ([]valkey.XRangeEntry, error) {
	return c.client.Do(ctx, c.client.B().Xclaim().Key(c.cfg.Stream).Group(c.cfg.Group).
		Consumer(c.cfg.Consumer).MinIdleTime(strconv.FormatInt(minIdle.Milliseconds(), 10)).Id(id).Build()).AsXRange()
}

// Pending lists up to count entries of the group idle at least idle, of
// any member.
func (c *Consumer) Pending(ctx context.Context, idle time.Duration, count int) ([]PendingEntry, error) {
	rows, err := c.client.Do(ctx, c.client.B().Xpending().Key(c.cfg.Stream).Group(c.cfg.Group).
		Idle(idle.Milliseconds()).Start("-").End("+").Count(int64(count)).Build()).ToArray()
	if err != nil {
		return nil, err
	}
	return ParsePending(rows), nil
}

// DeliveryCounts returns the delivery counts of this member's pending
// entries from start to end (at most count of them).
func (c *Consumer) DeliveryCounts(ctx context.Context, start, end string, count int) (map[string]int64, error) {
	rows, err := c.client.Do(ctx, c.client.B().Xpending().Key(c.cfg.Stream).Group(c.cfg.Group).
		Start(start).End(end).Count(int64(count)).Consumer(c.cfg.Consumer).Build()).ToArray()
	if err != nil {
		return nil, fmt.Errorf("XPENDING %s: %w", c.cfg.Stream, err)
	}
	out := make(map[string]int64, len(rows))
	for _, p := range ParsePending(rows) {
		out[p.ID] = p.Deliveries
	}
	return out, nil
}

// StillMine reports whether entry id is pending to this member; when
// Valkey cannot tell, it assumes so (Reconcile checks again later).
func (c *Consumer) StillMine(ctx context.Context, id string) bool {
	rows, err := c.client.Do(ctx, c.client.B().Xpending().Key(c.cfg.Stream).Group(c.cfg.Group).
		Start(id).End(id).Count(1).Build()).ToArray()
	return err != nil || PendingOwner(rows) == c.cfg.Consumer
}

// Reconcile releases the slots of parked entries that are no longer
// pending to this member: another worker claimed them, or they were
// deleted.
func (c *Consumer) Reconcile(ctx context.Context) error {
	_, err := c.reconcile(ctx)
	return err
}

// reconcile is Reconcile, returning the pending rows of the parked entries
// still pending to this member.
func (c *Consumer) reconcile(ctx context.Context) ([]PendingEntry, error) {
	ids := c.Parked.List()
	if len(ids) == 0 {
		return nil, nil
	}
	cmds := make(valkey.Commands, len(ids))
	for i, id := range ids {
		cmds[i] = c.client.B().Xpending().Key(c.cfg.Stream).Group(c.cfg.Group).Start(id).End(id).Count(1).Build()
	}
	var mine []PendingEntry
	for i, r := range c.client.DoMulti(ctx, cmds...) {
		rows, err := r.ToArray()
		if err != nil {
			return mine, fmt.Errorf("XPENDING %s %s: %w", c.cfg.Stream, ids[i], err)
		}
		if p := ParsePending(rows); len(p) == 1 && p[0].Consumer == c.cfg.Consumer {
			mine = append(mine, p[0])
			continue
		}
		if c.Parked.Remove(ids[i]) {
			c.Release()
		}
	}
	return mine, nil
}

// Park moves entry id from Active to Parked, keeping its slot: parked
// first, so that a reclaim pass never sees it in neither set.
func (c *Consumer) Park(id string) {
	c.Parked.Add(id)
	c.Active.Remove(id)
}

// Done removes entry id from Active and releases its slot.
func (c *Consumer) Done(id string) {
	c.Active.Remove(id)
	c.Release()
}

// PendingEntry is one row of XPENDING's extended form.
type PendingEntry struct {
	ID         string
	Consumer   string
	Idle       time.Duration
	Deliveries int64
}

// ParsePending parses the rows of an extended XPENDING reply, skipping
// rows it cannot read.
func ParsePending(rows []valkey.ValkeyMessage) []PendingEntry {
	out := make([]PendingEntry, 0, len(rows))
	for _, r := range rows {
		f, err := r.ToArray()
		if err != nil || len(f) < 4 {
			continue
		}
		id, _ := f[0].ToString()
		consumer, _ := f[1].ToString()
		idle, _ := f[2].AsInt64()
		n, _ := f[3].AsInt64()
		out = append(out, PendingEntry{ID: id, Consumer: consumer, Idle: time.Duration(idle) * time.Millisecond, Deliveries: n})
	}
	return out
}

// PendingOwner is the consumer of the one row of an extended XPENDING
// reply, "" when there is none.
func PendingOwner(rows []valkey.ValkeyMessage) string {
	if len(rows) != 1 {
		return ""
	}
	f, err := rows[0].ToArray()
	if err != nil || len(f) < 2 {
		return ""
	}
	owner, _ := f[1].ToString()
	return owner
}

// Sleep waits d or until ctx is done, and reports whether ctx is still
// live.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Set is a set of entry (or run) ids. The zero Set is empty and ready to
// use; it is safe for concurrent use.
type Set struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

// Add adds id and reports whether it was not there yet.
func (s *Set) Add(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[string]struct{}{}
	}
	if _, ok := s.ids[id]; ok {
		return false
	}
	s.ids[id] = struct{}{}
	return true
}

// Remove removes id and reports whether it was there.
func (s *Set) Remove(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.ids[id]
	delete(s.ids, id)
	return ok
}

// Has reports whether id is in the set.
func (s *Set) Has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.ids[id]
	return ok
}

// List returns the ids in the set, in no order.
func (s *Set) List() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.ids))
	for id := range s.ids {
		out = append(out, id)
	}
	return out
}

// FirstRetryWait and MaxRetryWait bound the wait between failed reads: from
// the first, doubling per failure up to the cap, so that reading resumes
// within the cap once Valkey is back.
const (
	FirstRetryWait = 100 * time.Millisecond
	MaxRetryWait   = 2 * time.Second
)

// Backoff is the wait between failed reads of one read loop. The zero
// Backoff starts at FirstRetryWait. It is not safe for concurrent use.
type Backoff struct{ wait time.Duration }

// Wait waits the current backoff or until ctx is done, doubles it (up to
// MaxRetryWait), and reports whether ctx is still live.
func (b *Backoff) Wait(ctx context.Context) bool {
	if b.wait == 0 {
		b.wait = FirstRetryWait
	}
	ok := Sleep(ctx, b.wait)
	b.wait = min(b.wait*2, MaxRetryWait)
	return ok
}

// Reset starts the backoff again from FirstRetryWait, after a success.
func (b *Backoff) Reset() { b.wait = 0 }
