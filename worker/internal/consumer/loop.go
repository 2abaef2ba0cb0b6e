package consumer

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap"

	"github.com/pyrula/caseworker/worker/internal/batch"
)

// Handler handles one delivery of an entry and returns its Verdict. It
// runs on its own goroutine, or, for a new entry with Deps.Tasks, as a
// task of Run's goroutine (batch.Task: it detaches before long work),
// under the work context Run was given.
type Handler func(ctx context.Context, d Delivery) Verdict

// Delivery is one delivery of a stream entry to a Handler.
type Delivery struct {
	// Entry is the stream entry.
	Entry valkey.XRangeEntry
	// Deliveries counts the entry's deliveries, this one included: 1 for
	// an entry read as new, more for a claimed or re-read one, 0 when
	// unknown (a re-read at start whose count could not be read). For a
	// dead letter by delivery count it is the deliveries that failed.
	Deliveries int64
	// ReadAt is when the read or claim that delivered the entry returned
	// (zero for a dead letter): the end of its wait in the stream, which
	// began at the time its entry id stamps.
	ReadAt time.Time

	c *Consumer // whose Policy Settle applies; nil outside Run
}

// verdictKind is what a Verdict says to do with its entry.
type verdictKind uint8

const (
	kindRetry verdictKind = iota
	kindAcked
	kindDeadLetter
)

// Verdict is what a Handler decided about a delivery: Acked (it acked the
// entry), Retry (leave it pending, to be claimed again after its backoff)
// or DeadLetter (end it now with a dead letter). The zero Verdict is
// Retry(nil).
type Verdict struct {
	kind    verdictKind
	cause   error
	settled bool // carried out by Settle: not counted or dead-lettered again
}

// Acked is the verdict of a handler that acked its entry: its slot is
// free again.
func Acked() Verdict { return Verdict{kind: kindAcked, settled: true} }

// Retry is the verdict of a handler that left its entry pending. A cause
// makes it a failure, which the stream's Policy.Failed counts; without one
// (the entry is held elsewhere, or was handed back) nothing is counted.
func Retry(cause error) Verdict { return Verdict{kind: kindRetry, cause: cause} }

// DeadLetter is the verdict of a handler whose entry no retry can help:
// it is dead-lettered at once (Policy.DeadLetter) with cause.
func DeadLetter(cause error) Verdict { return Verdict{kind: kindDeadLetter, cause: cause} }

// Acked reports whether the entry was acked.
func (v Verdict) Acked() bool { return v.kind == kindAcked }

// Cause is the failure a Retry or DeadLetter verdict names, nil if none.
func (v Verdict) Cause() error { return v.cause }

// ErrTooManyDeliveries is the cause Policy.DeadLetter is given for an
// entry dead-lettered because it was delivered Policy.MaxDeliveries times.
var ErrTooManyDeliveries = errors.New("consumer: delivered too many times")

// Settle carries out verdict v of delivery d now, by its stream's Policy,
// and returns what became of the entry: Acked when it was acked (v was
// Acked, or the entry was dead-lettered), else Retry (left pending). A
// DeadLetter verdict is dead-lettered (Policy.DeadLetter, 0 failures); one
// whose dead letter fails counts as a failure. A Retry with a cause is a
// failure: Policy.Failed counts it and, once the count reaches
// Policy.MaxFailures, the entry is dead-lettered. A Retry without a cause,
// and any verdict once ctx is done, is left pending uncounted.
//
// Run settles what a Handler returns. A handler that holds something the
// dead letter needs (a run's lease) settles its verdict itself before it
// lets go, and returns what Settle returned: a settled verdict is not
// settled again.
func (d Delivery) Settle(ctx context.Context, v Verdict) Verdict {
	if v.settled || d.c == nil {
		return v
	}
	v.settled = true
	if ctx.Err() != nil {
		if v.kind == kindDeadLetter {
			v.kind = kindRetry
		}
		return v
	}
	p := d.c.cfg.Policy
	if v.kind == kindDeadLetter {
		if p.DeadLetter != nil && p.DeadLetter(ctx, d, v.cause, 0) {
			return Acked()
		}
		v.kind = kindRetry
	}
	if v.kind != kindRetry || v.cause == nil || p.Failed == nil {
		return v
	}
	n := p.Failed(ctx, d, v.cause)
	if p.MaxFailures > 0 && n >= int64(p.MaxFailures) && p.DeadLetter(ctx, d, v.cause, n) {
		return Acked()
	}
	return v
}

// Policy is what differs between the streams Run reads: how long a failed
// entry waits before it is claimed again, how failures are counted (by the
// entry's delivery count, or by the handler's own count), what a dead
// letter records, and what keeps the entries in flight from being claimed
// by other consumers.
type Policy struct {
	// ClaimIdle is how long a pending entry must be idle before it is
	// claimed for another delivery; Run needs it. Run looks for such
	// entries every quarter of it (at least 10 ms, at most 5 s).
	ClaimIdle time.Duration
	// BackoffPerDelivery doubles the idle time an entry needs per
	// delivery after the first, up to 32× ClaimIdle, so that an entry
	// that keeps failing is retried ever less often; without it every
	// entry waits ClaimIdle.
	BackoffPerDelivery bool
	// MaxDeliveries, when positive, dead-letters an entry claimed again
	// after that many deliveries (and an own pending entry re-read at
	// start after more than that many, the re-read being one) instead of
	// handling it: what keeps failing, or keeps taking its workers down,
	// ends. 0: deliveries are not counted.
	MaxDeliveries int
	// Failed, when set, counts a failure of delivery d (a Retry verdict
	// with a cause) and returns the failures counted so far (0 when it
	// cannot tell); once they reach MaxFailures (when positive) the entry
	// is dead-lettered at once.
	Failed      func(ctx context.Context, d Delivery, cause error) int64
	MaxFailures int
	// DeadLetter records the dead letter of d and acks the entry; it
	// reports whether it did (else the entry stays pending). cause and
	// failures are ErrTooManyDeliveries and the failed deliveries for an
	// entry dead-lettered by MaxDeliveries, the verdict's cause and 0 for
	// a DeadLetter verdict, the last failure and Failed's count at
	// MaxFailures. Required with MaxDeliveries or MaxFailures.
	DeadLetter func(ctx context.Context, d Delivery, cause error, failures int64) bool
	// KeepAlive, when set, runs from Run's start until reading stopped
	// and every handler returned (or work is done), to keep the entries
	// in flight (Consumer.Active) from being claimed by other consumers,
	// by touching them. A stream whose handler keeps its own entry alive
	// (a run's lease renewal) leaves it nil.
	KeepAlive func(ctx context.Context)
}

// backoff is how long an entry delivered n times must be idle before it
// is claimed again.
func (p Policy) backoff(n int64) time.Duration {
	if !p.BackoffPerDelivery {
		return p.ClaimIdle
	}
	return p.ClaimIdle << min(max(n-1, 0), 5)
}

// reclaimEvery is how often Run looks for entries to claim, the most its
// blocking read waits, and how often a Run waiting for a slot retries its
// parked entries.
func (p Policy) reclaimEvery() time.Duration {
	return min(max(p.ClaimIdle/4, 10*time.Millisecond), 5*time.Second)
}

// check reports what keeps p from being run.
func (p Policy) check() error {
	if p.ClaimIdle < 0 || p.MaxDeliveries < 0 || p.MaxFailures < 0 {
		return errors.New("consumer: negative claim idle time or maximum")
	}
	if (p.MaxDeliveries > 0 || p.MaxFailures > 0) && p.DeadLetter == nil {
		return errors.New("consumer: a maximum of deliveries or failures needs DeadLetter")
	}
	return nil
}

// Events are what Run tells its owner, for its logs, metrics and health.
// Each may be nil.
type Events struct {
	// Failed is told of a failed Valkey command of the loop (a read, a
	// reclaim pass) while ctx is live. It returns nil when it repaired the
	// cause (created a deleted consumer group again): the loop goes on at
	// once. Else it returns the error, which the loop logs and, for a
	// read, waits out (Backoff); a failed reclaim pass is tried again at
	// the next one.
	Failed func(ctx context.Context, err error) error
	// Read is told of each successful read of new entries, none included.
	Read func(entries []valkey.XRangeEntry)
	// Reclaimed is told of each pending entry claimed for another
	// delivery d, from consumer from, before it is handled (not of one
	// claimed to be dead-lettered).
	Reclaimed func(d Delivery, from string)
}

// DefaultReadBlock is how long one read of new entries blocks when
// Config.ReadBlock is 0.
const DefaultReadBlock = 500 * time.Millisecond

// reclaimBatch is the most pending entries one reclaim pass looks at.
const reclaimBatch = 100

// Run is the consumer's loop: until ctx is done it reads its own pending
// entries (id 0 onwards: what it held before a restart), then new ones,
// and claims the group's entries idle past their backoff, and hands each
// to h on its own goroutine (Deps.Go), or, for new entries with
// Deps.Tasks, as a task of its own goroutine (runTasks), under work, which
// outlives ctx so that stopping lets the handlers finish. It never holds more entries
// than slots: every read and claim takes a slot first, and an entry h
// leaves pending is parked with its slot until Run claims it again or
// finds it gone to another consumer. Verdicts are settled (Settle) by
// Config.Policy; the entries to dead-letter by delivery count go to
// Policy.DeadLetter instead of h. Run returns once reading stopped and
// every handler returned; it returns an error at once when Config.Policy
// has no ClaimIdle. A Consumer runs one Run at a time.
func (c *Consumer) Run(ctx, work context.Context, h Handler) error {
	if c.cfg.Policy.ClaimIdle <= 0 {
		return errors.New("consumer: Run needs Policy.ClaimIdle")
	}
	keepCtx, stopKeep := context.WithCancel(work)
	defer stopKeep()
	var keep sync.WaitGroup
	if ka := c.cfg.Policy.KeepAlive; ka != nil {
		keep.Go(func() { ka(keepCtx) })
	}
	l := &loop{c: c, ctx: ctx, work: work, every: c.cfg.Policy.reclaimEvery(),
		handle: func(ctx context.Context, d Delivery) Verdict { return d.Settle(ctx, h(ctx, d)) },
		dead:   c.deadLetterHandler}
	if c.tasks {
		l.tasks = batch.NewTasks(c.nslots)
	}
	if l.readOwn() {
		l.readNew()
	}
	c.inflight.Wait()
	if l.tasks != nil {
		l.tasks.Close()
	}
	stopKeep()
	keep.Wait()
	return nil
}

// loop is one Run of a Consumer: everything but the dispatching happens
// on its one goroutine, so that only it removes parked entries.
type loop struct {
	c            *Consumer
	ctx, work    context.Context
	handle, dead Handler       // the Handler, its verdict settled; the dead letter by delivery count
	every        time.Duration // Policy.reclaimEvery
	backoff      Backoff       // the wait between failed reads
	tasks        *batch.Tasks  // the coroutines of runTasks, with Deps.Tasks
}

// readOwn reads the consumer's own pending entries, dead-letters those
// delivered more than MaxDeliveries times (the re-read is a delivery) and
// hands the others to the handler. It reports false once ctx is done.
func (l *loop) readOwn() bool {
	c, p := l.c, l.c.cfg.Policy
	last := "0"
	for l.ctx.Err() == nil {
		entries, err := c.Read(l.ctx, last, c.nslots, 0)
		if err != nil {
			if !l.readFailed(err) {
				return false
			}
			continue
		}
		readAt := time.Now()
		l.backoff.Reset()
		if len(entries) == 0 {
			return true
		}
		counts, err := c.DeliveryCounts(l.ctx, entries[0].ID, entries[len(entries)-1].ID, len(entries))
		if err != nil && l.ctx.Err() == nil {
			c.log.Warn("read the delivery counts of own pending entries", zap.String("stream", c.cfg.Stream), zap.Error(err))
		}
		for _, e := range entries {
			last = e.ID
			if !l.acquire() {
				return false
			}
			n, ok := counts[e.ID]
			switch {
			case ok && p.MaxDeliveries > 0 && n > int64(p.MaxDeliveries):
				l.deadLetter(Delivery{Entry: e, Deliveries: n - 1})
			case ok:
				l.dispatch(Delivery{Entry: e, Deliveries: max(n, 2), ReadAt: readAt}) // delivered before; a server may not count a re-read
			default:
				l.dispatch(Delivery{Entry: e, ReadAt: readAt})
			}
		}
	}
	return false
}

// readNew reads new entries (>) and, every reclaimEvery, claims idle
// pending entries with the slots in hand (so that the blocking read never
// starves the claims of slots), until ctx is done.
func (l *loop) readNew() {
	c := l.c
	block := min(cmpOr(c.cfg.ReadBlock, DefaultReadBlock), l.every)
	lastClaim := time.Now()
	drained := false // the last read, without BLOCK, found nothing new
	for l.ctx.Err() == nil {
		if !l.acquire() {
			return
		}
		n := c.TakeFree(c.nslots)
		if time.Since(lastClaim) >= l.every {
			lastClaim = time.Now()
			used, more, err := l.reclaim(n)
			if err != nil {
				l.failed("reclaim pending entries", err)
			}
			if more {
				lastClaim = time.Time{} // claimable entries are left: again with the next slot
			}
			if n -= used; n == 0 {
				continue
			}
		}
		if c.tasks && n > 1 {
			// Half the slots, so that the first round of the entries'
			// tasks reads more with the others (runTasks).
			c.ReleaseN(n / 2)
			n -= n / 2
		}
		entries, err := l.readNewEntries(n, block, !drained)
		drained = false
		c.ReleaseN(n - len(entries))
		if err != nil {
			if !l.readFailed(err) {
				return
			}
			continue
		}
		l.backoff.Reset()
		if r := c.events.Read; r != nil {
			r(entries)
		}
		readAt := time.Now()
		if c.tasks {
			drained = l.runTasks(entries, readAt, lastClaim)
			continue
		}
		for _, e := range entries {
			l.dispatch(Delivery{Entry: e, Deliveries: 1, ReadAt: readAt})
		}
	}
}

// loopTask is the handler of one new entry run as a task of the loop's
// goroutine (runTasks), and its verdict once it returned.
type loopTask struct {
	d Delivery
	t *batch.Task
	v Verdict
}

// runTasks runs the handlers of entries, new entries read at readAt with
// the slots the caller holds, as tasks of the loop's goroutine
// (Deps.Tasks), round after round until each task ended or detached. Each
// round sends the commands the tasks wait for in one round trip, with a
// read of as many new entries as slots are free (their tasks join the
// next round), until ctx is done or the next reclaim pass is due (every
// after lastClaim). It reports whether the last round's read found no new
// entry (the next read may block at once).
func (l *loop) runTasks(entries []valkey.XRangeEntry, readAt, lastClaim time.Time) (drained bool) {
	c := l.c
	var live, next []*loopTask
	var tasks []*batch.Task
	start := func(entries []valkey.XRangeEntry, readAt time.Time) {
		for _, e := range entries {
			if !c.Active.Add(e.ID) {
				c.Release()
				continue
			}
			lt := &loopTask{d: Delivery{Entry: e, Deliveries: 1, ReadAt: readAt, c: c}}
			c.inflight.Add(1)
			lt.t = l.tasks.Start(l.work, func(ctx context.Context) { lt.v = l.handle(ctx, lt.d) })
			live = l.step(lt, live)
		}
	}
	start(entries, readAt)
	for len(live) > 0 {
		drained = false
		var read []valkey.Completed
		n := 0
		if l.ctx.Err() == nil && time.Since(lastClaim) < l.every {
			if n = c.takeUpTo(c.nslots); n > 0 {
				read = append(read, c.readNewNow(n))
			}
		}
		tasks = tasks[:0]
		for _, lt := range live {
			tasks = append(tasks, lt.t)
		}
		res := c.batcher.Round(l.work, tasks, read...)
		next = next[:0]
		for _, lt := range live {
			next = l.step(lt, next)
		}
		live, next = next, live
		if n == 0 {
			continue
		}
		got, err := res[0].AsXRead()
		if err != nil && !valkey.IsValkeyNil(err) {
			c.ReleaseN(n)
			l.failed("read new entries", err)
			lastClaim = time.Time{} // no more reads in this run of tasks
			continue
		}
		entries := got[c.cfg.Stream]
		c.ReleaseN(n - len(entries))
		if len(entries) == 0 {
			drained = true
			continue
		}
		if r := c.events.Read; r != nil {
			r(entries)
		}
		start(entries, time.Now())
	}
	return drained
}

// step goes on with task lt after it ran: one that waits for a command is
// appended to live, one that detached goes on on a goroutine of its own,
// and the verdict of one that ended is carried out. It returns live.
func (l *loop) step(lt *loopTask, live []*loopTask) []*loopTask {
	switch {
	case lt.t.Pending():
		return append(live, lt)
	case lt.t.Detached():
		l.c.spawn(func() {
			lt.t.Resume()
			l.c.end(l.work, lt.d, lt.v)
		})
	default:
		l.c.end(l.work, lt.d, lt.v)
	}
	return live
}

// readNewEntries reads at most count new entries: first without BLOCK in
// Deps.Batcher's next batch when it is set and tryBatch (under load entries
// are waiting, and the read shares a round trip with the handlers'
// commands), then blocking up to block.
func (l *loop) readNewEntries(count int, block time.Duration, tryBatch bool) ([]valkey.XRangeEntry, error) {
	c := l.c
	if c.batcher != nil && tryBatch {
		res, err := c.batcher.Do(l.ctx, c.readNewNow(count)).AsXRead()
		if err != nil && !valkey.IsValkeyNil(err) {
			return nil, err
		}
		if entries := res[c.cfg.Stream]; len(entries) > 0 {
			return entries, nil
		}
	}
	return c.Read(l.ctx, ">", count, block)
}

// readFailed handles a failed read: it reports whether to read on, at
// once when Events.Failed repaired the cause, else after the backoff. It
// reports false once ctx is done.
func (l *loop) readFailed(err error) bool {
	if l.ctx.Err() != nil {
		return false
	}
	if err = l.report(err); err == nil {
		return true
	}
	l.c.log.Warn("read "+l.c.cfg.Name, zap.String("stream", l.c.cfg.Stream), zap.Error(err))
	return l.backoff.Wait(l.ctx)
}

// failed logs a failed reclaim step with msg, unless ctx is done or
// Events.Failed repaired its cause.
func (l *loop) failed(msg string, err error) {
	if l.ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return
	}
	if err = l.report(err); err != nil {
		l.c.log.Warn(msg, zap.String("stream", l.c.cfg.Stream), zap.Error(err))
	}
}

// report tells Events.Failed of err and returns what it returns.
func (l *loop) report(err error) error {
	if f := l.c.events.Failed; f != nil {
		return f(l.ctx, err)
	}
	return err
}

// acquire takes one slot, waiting until one is free or ctx is done; every
// reclaimEvery without a free slot it retries the parked entries, which
// hold the slots (retryParked), so that a consumer whose every slot is
// parked neither stalls nor takes more entries than slots. It reports
// whether it took a slot.
func (l *loop) acquire() bool {
	return l.c.TryAcquire() || l.c.AcquireEvery(l.ctx, l.every, l.retryParked)
}

// retryParked frees the slots of parked entries gone to another consumer
// (or deleted), and claims again those idle past their backoff, each
// handled (or dead-lettered) with the slot it holds.
func (l *loop) retryParked() {
	mine, err := l.c.reconcile(l.ctx)
	if err != nil {
		l.failed("check parked entries", err)
		return
	}
	for _, p := range mine {
		need := l.c.cfg.Policy.backoff(p.Deliveries)
		if p.Idle < need {
			continue
		}
		if _, err := l.claim(p, need, true); err != nil {
			l.failed("retry parked entries", err)
			return
		}
	}
}

// reclaim is one pass over the group's entries idle past ClaimIdle, of
// any consumer: it frees the slots of parked entries gone elsewhere, then
// claims each entry idle past its backoff that is not in flight here, a
// parked one with its own slot, another with one of the held slots the
// caller holds. It returns how many of those it used, and whether
// claimable entries were left for want of a slot.
func (l *loop) reclaim(held int) (used int, more bool, err error) {
	c := l.c
	if _, err := c.reconcile(l.ctx); err != nil {
		return 0, false, err
	}
	pending, err := c.Pending(l.ctx, c.cfg.Policy.ClaimIdle, reclaimBatch)
	if err != nil {
		return 0, false, err
	}
	for _, p := range pending {
		if c.Active.Has(p.ID) {
			continue
		}
		need := c.cfg.Policy.backoff(p.Deliveries)
		if p.Idle < need {
			continue
		}
		parked := p.Consumer == c.cfg.Consumer && c.Parked.Has(p.ID)
		if !parked && used == held {
			more = true
			continue
		}
		took, err := l.claim(p, need, parked)
		if took && !parked {
			used++
		}
		if err != nil {
			return used, more, err
		}
	}
	return used, more, nil
}

// claim XCLAIMs pending entry p if it is still idle at least need (so that
// of several consumers only one wins) and hands it to the handler, or
// dead-letters it when it was delivered MaxDeliveries times. A parked
// entry goes with its own slot; another takes one the caller holds, and
// took reports whether it did. An entry another consumer won, or one
// deleted, is not taken (a parked one's slot is released).
func (l *loop) claim(p PendingEntry, need time.Duration, parked bool) (took bool, err error) {
	c := l.c
	entries, err := c.Claim(l.ctx, p.ID, need)
	if err != nil {
		return false, err
	}
	if parked {
		c.Parked.Remove(p.ID) // its slot goes with the claim
	}
	if len(entries) == 0 {
		if parked {
			c.Release()
		}
		return false, nil
	}
	if max := c.cfg.Policy.MaxDeliveries; max > 0 && p.Deliveries >= int64(max) {
		l.deadLetter(Delivery{Entry: entries[0], Deliveries: p.Deliveries})
		return true, nil
	}
	d := Delivery{Entry: entries[0], Deliveries: p.Deliveries + 1, ReadAt: time.Now()}
	if r := c.events.Reclaimed; r != nil {
		r(d, p.Consumer)
	}
	l.dispatch(d)
	return true, nil
}

// dispatch hands d to the handler on its own goroutine, with the slot the
// caller holds; an entry already in flight here is skipped (its slot
// released).
func (l *loop) dispatch(d Delivery) { l.start(d, l.handle) }

// deadLetter dead-letters d, delivered MaxDeliveries times, on its own
// goroutine with the slot the caller holds.
func (l *loop) deadLetter(d Delivery) { l.start(d, l.dead) }

// deadLetterHandler is the Handler of an entry delivered MaxDeliveries
// times: Policy.DeadLetter, cause ErrTooManyDeliveries.
func (c *Consumer) deadLetterHandler(ctx context.Context, d Delivery) Verdict {
	if ctx.Err() == nil && c.cfg.Policy.DeadLetter(ctx, d, ErrTooManyDeliveries, d.Deliveries) {
		return Acked()
	}
	return Verdict{settled: true}
}

// start runs fn on d on its own goroutine under work, holding d's slot
// (and d in Active) until fn's verdict is carried out: the slot is
// released once the entry is acked, no longer pending to this consumer,
// or work is done; else the entry is parked with it.
func (l *loop) start(d Delivery, fn Handler) {
	c := l.c
	if !c.Active.Add(d.Entry.ID) {
		c.Release()
		return
	}
	d.c = c
	c.inflight.Add(1)
	j := getJob()
	j.d, j.fn, j.work = d, fn, l.work
	c.spawn(j.run)
}

// job is one handler call of start: delivery d handed to fn under work on
// a goroutine of Deps.Go. Jobs are recycled with their run func bound
// once, so that handing an entry to a goroutine allocates nothing.
type job struct {
	d    Delivery
	fn   Handler
	work context.Context
	run  func() // j.do
}

// jobs recycles jobs.
var jobs sync.Pool

// getJob returns a recycled job, or a new one.
func getJob() *job {
	if j, ok := jobs.Get().(*job); ok {
		return j
	}
	j := new(job)
	j.run = j.do
	return j
}

// do runs the job, which it recycles first, and carries out its verdict:
// the slot is released once the entry is acked, no longer pending to this
// consumer, or work is done; else the entry is parked with it.
func (j *job) do() {
	d, fn, work := j.d, j.fn, j.work
	*j = job{run: j.run}
	jobs.Put(j)
	d.c.end(work, d, fn(work, d))
}

// end carries out verdict v of delivery d, whose handler returned: the
// slot is released once the entry is acked, no longer pending to this
// consumer, or work is done; else the entry is parked with it.
func (c *Consumer) end(work context.Context, d Delivery, v Verdict) {
	defer c.inflight.Done()
	if v.Acked() || work.Err() != nil || !c.StillMine(work, d.Entry.ID) {
		c.Done(d.Entry.ID)
		return
	}
	c.Park(d.Entry.ID)
}

// readNewNow is the XREADGROUP of at most count new entries without BLOCK
// (sent in a batch or a round).
func (c *Consumer) readNewNow(count int) valkey.Completed {
	return c.client.B().Xreadgroup().Group(c.cfg.Group, c.cfg.Consumer).Count(int64(count)).
		Streams().Key(c.cfg.Stream).Id(">").Build()
}

// cmpOr returns d, or def when d is not positive.
func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
