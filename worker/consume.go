package worker

import (
	"context"
	"errors"
	"time"

	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap"

	"github.com/pyrula/caseworker/worker/internal/consumer"
)

// readBlock is how long one XREADGROUP waits for new entries, so that a
// stop is noticed within it even if the server ignores the cancellation.
const readBlock = 500 * time.Millisecond

// The message stream is read by w.cases (a consumer.Consumer with
// Concurrency slots): its Active set holds the entries being handled here
// (so that the reclaim loop never takes one of its own in-flight entries;
// the value is whether it was acked), its Parked set those left pending
// after a failed handling, each keeping its slot.

// dispatch handles entry in a goroutine holding one slot. The slot is
// released once the entry is acked; an entry left pending (a transient
// failure) is parked and keeps its slot until the reclaim loop takes it
// again or finds it gone to another consumer, so that this consumer never
// holds more pending entries than it has slots.
func (w *Worker) dispatch(work context.Context, e valkey.XRangeEntry, deliveries int64) {
	if !w.cases.Active.Add(e.ID) {
		w.cases.Release()
		return
	}
	w.handlers.Add(1)
	w.spawn.run(func() { // a reused goroutine (spawn.go)
		defer w.handlers.Done()
		w.handle(work, e, deliveries)
		w.settle(work, e.ID)
	})
}

// settle ends the handling of entry id (in w.cases.Active): releases its
// slot if it was acked (finish notes that), is no longer pending to this
// consumer, or the worker is stopping; else parks it with its slot.
func (w *Worker) settle(work context.Context, id string) {
	if w.cases.Active.WasAcked(id) || work.Err() != nil || !w.cases.StillMine(work, id) {
		w.cases.Done(id)
		return
	}
	w.cases.Park(id)
}

// readLoop reads the consumer's own pending entries (id 0 onwards), then new
// entries (>), never holding more than Concurrency in flight. It ends when
// ctx is done.
func (w *Worker) readLoop(ctx, work context.Context) {
	c := w.cases
	var backoff consumer.Backoff
	fail := func(err error) bool {
		return w.readFailed(ctx, w.casePos, "read the message stream", err, &backoff)
	}
	// Own pending entries first: what this consumer read before a restart.
	// Re-reading counts as a delivery; one delivered more than
	// MaxDeliveries times (it crashed workers) is dead-lettered, not retried.
	last := "0"
	for ctx.Err() == nil {
		entries, err := c.Read(ctx, last, w.cfg.Concurrency, 0)
		if err != nil {
			if !fail(err) {
				return
			}
			continue
		}
		backoff.Reset()
		if len(entries) == 0 {
			break
		}
		counts, err := c.DeliveryCounts(ctx, entries[0].ID, entries[len(entries)-1].ID, len(entries))
		if err != nil && ctx.Err() == nil {
			w.log.Warn("read the delivery counts of own pending entries", zap.Error(err))
		}
		for _, e := range entries {
			last = e.ID
			if !c.Acquire(ctx) {
				return
			}
			n, ok := counts[e.ID]
			if ok && n > int64(w.cfg.MaxDeliveries) {
				w.deadLetterHeld(work, e, n-1)
				continue
			}
			if ok {
				n = max(n, 2) // delivered before; a server may not count a re-read
			}
			w.dispatch(work, e, n)
		}
	}
	for ctx.Err() == nil {
		if !c.Acquire(ctx) {
			return
		}
		n := c.TakeFree(w.cfg.Concurrency)
		entries, err := w.readNew(ctx, n)
		c.ReleaseN(n - len(entries))
		if err != nil {
			if !fail(err) {
				return
			}
			continue
		}
		backoff.Reset()
		w.healthy.Store(true)
		if len(entries) > 0 {
			w.casePos.saw(entries[len(entries)-1].ID)
		}
		for _, e := range entries {
			w.dispatch(work, e, 1)
		}
	}
}

// readFailed handles a failed read of a read loop on the stream of group
// p, and reports whether to read on: a deleted group (NOGROUP) is created
// again at once (restoreGroup); another failure marks the worker unhealthy,
// is logged with msg and waited out with backoff. It reports false once
// ctx is done.
func (w *Worker) readFailed(ctx context.Context, p *groupPos, msg string, err error, backoff *consumer.Backoff) bool {
	if ctx.Err() != nil {
		return false
	}
	if isNoGroup(err) {
		// The group or the stream was deleted: create it again and read
		// on at once.
		rerr := w.restoreGroup(ctx, p, err)
		if rerr == nil {
			return true
		}
		err = rerr
	}
	w.healthy.Store(false)
	w.log.Warn(msg, zap.Error(err))
	return backoff.Wait(ctx)
}

// readNew reads at most count new entries of the message stream: first
// without BLOCK, batched with the handlers' commands (under load entries
// are waiting, readNow), then blocking up to readBlock.
func (w *Worker) readNew(ctx context.Context, count int) ([]valkey.XRangeEntry, error) {
	if entries, err := w.readNow(ctx, count); err != nil || len(entries) > 0 {
		return entries, err
	}
	return w.cases.Read(ctx, ">", count, readBlock)
}

// readNow reads up to count new entries without blocking, in the next
// batch. The read loop tries it before its blocking read: under load
// entries are waiting and the read shares a round trip with the handlers'
// commands; on an idle stream it costs one short round trip before the
// blocking read.
func (w *Worker) readNow(ctx context.Context, count int) ([]valkey.XRangeEntry, error) {
	cmd := w.client.B().Xreadgroup().Group(w.cfg.ConsumerGroup, w.cfg.ConsumerName).Count(int64(count)).
		Streams().Key(w.cfg.CaseStream).Id(">").Build()
	res, err := w.batch.Do(ctx, cmd).AsXRead()
	if valkey.IsValkeyNil(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return res[w.cfg.CaseStream], nil
}

// reclaimLoop periodically reclaims pending entries idle longer than their
// backoff, from any consumer of the group (this one included), and
// dead-letters those delivered MaxDeliveries times. It ends when ctx is done.
func (w *Worker) reclaimLoop(ctx, work context.Context) {
	every := min(max(w.cfg.ClaimIdle/4, 10*time.Millisecond), 5*time.Second)
	for consumer.Sleep(ctx, every) {
		if err := w.reclaim(ctx, work); err != nil && !errors.Is(err, context.Canceled) {
			w.healthy.Store(false)
			w.log.Warn("reclaim pending entries", zap.Error(err))
		}
	}
}

// reclaim is one pass of reclaimLoop: it frees the slots of parked entries
// gone to another consumer, then claims the entries idle past their backoff,
// each with a slot (a parked entry with its own). The read loop holds every
// free slot while its XREADGROUP blocks and frees them after it, so waiting
// one read block for a slot gets this pass one (TryAcquire alone never does
// on an idle worker).
func (w *Worker) reclaim(ctx, work context.Context) error {
	c := w.cases
	if err := c.Reconcile(ctx); err != nil {
		return err
	}
	pending, err := c.Pending(ctx, w.cfg.ClaimIdle, 100)
	if err != nil {
		return err
	}
	for _, p := range pending {
		if c.Active.Has(p.ID) {
			continue
		}
		need := w.backoff(p.Deliveries)
		if p.Idle < need {
			continue
		}
		parked := p.Consumer == w.cfg.ConsumerName && c.Parked.Has(p.ID)
		if !parked && !c.AcquireWithin(ctx, readBlock+100*time.Millisecond) {
			return nil // every slot is busy: the next pass continues
		}
		entries, err := c.Claim(ctx, p.ID, need)
		if err != nil {
			if !parked {
				c.Release()
			}
			return err
		}
		if parked {
			c.Parked.Remove(p.ID) // its slot goes with the claim
		}
		if len(entries) == 0 {
			c.Release() // another worker claimed it, or it was deleted
			continue
		}
		if p.Deliveries >= int64(w.cfg.MaxDeliveries) {
			w.deadLetterHeld(work, entries[0], p.Deliveries)
			continue
		}
		w.metrics.redeliveries.Inc()
		w.log.Info("reclaimed a pending entry", zap.String("entry_id", p.ID),
			zap.String("from", p.Consumer), zap.Int64("deliveries", p.Deliveries+1))
		w.dispatch(work, entries[0], p.Deliveries+1)
	}
	return nil
}

// deadLetterHeld dead-letters entry e, pending to this consumer, with the
// slot the caller holds: released once it is acked, else kept (parked).
func (w *Worker) deadLetterHeld(work context.Context, e valkey.XRangeEntry, deliveries int64) {
	if !w.cases.Active.Add(e.ID) {
		w.cases.Release()
		return
	}
	w.deadLetter(work, e, deliveries)
	w.settle(work, e.ID)
}
