package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap"
)

// readBlock is how long one XREADGROUP waits for new entries, so that a
// stop is noticed within it even if the server ignores the cancellation.
const readBlock = 500 * time.Millisecond

// maxRetryWait caps the wait between failed reads (doubling from 100 ms),
// so that reading resumes within it once Valkey is back.
const maxRetryWait = 2 * time.Second

// inflight is a set of entry ids: those being handled by this worker (so
// that the reclaim loop never takes one of its own in-flight entries), or
// those it left pending after a failed handling (parked, each keeping its
// slot). The value of an id in flight is whether it was acked.
type inflight struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (f *inflight) add(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ids == nil {
		f.ids = map[string]bool{}
	}
	if _, ok := f.ids[id]; ok {
		return false
	}
	f.ids[id] = false
	return true
}

// remove removes id and reports whether it was there.
func (f *inflight) remove(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.ids[id]
	delete(f.ids, id)
	return ok
}

func (f *inflight) has(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.ids[id]
	return ok
}

// acked notes that entry id, if it is in the set, was acked.
func (f *inflight) acked(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.ids[id]; ok {
		f.ids[id] = true
	}
}

// wasAcked reports whether acked was called for id since it was added.
func (f *inflight) wasAcked(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ids[id]
}

// list returns the ids in the set.
func (f *inflight) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.ids))
	for id := range f.ids {
		out = append(out, id)
	}
	return out
}

// acquire takes one slot, waiting until one is free or ctx is done.
func (w *Worker) acquire(ctx context.Context) bool {
	select {
	case w.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// tryAcquire takes one slot if one is free.
func (w *Worker) tryAcquire() bool {
	select {
	case w.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

func (w *Worker) release() { <-w.slots }

// acquireWithin takes one slot, waiting up to d or until ctx is done. The
// read loop holds every free slot while its XREADGROUP blocks and frees
// them after it, so waiting one read block gets the reclaim loop a slot
// (tryAcquire alone never does on an idle worker).
func (w *Worker) acquireWithin(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case w.slots <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// dispatch handles entry in a goroutine holding one slot. The slot is
// released once the entry is acked; an entry left pending (a transient
// failure) is parked and keeps its slot until the reclaim loop takes it
// again or finds it gone to another consumer, so that this consumer never
// holds more pending entries than it has slots.
func (w *Worker) dispatch(work context.Context, e valkey.XRangeEntry, deliveries int64) {
	if !w.active.add(e.ID) {
		w.release()
		return
	}
	w.handlers.Add(1)
	w.spawn.run(func() { // a reused goroutine (spawn.go)
		defer w.handlers.Done()
		w.handle(work, e, deliveries)
		w.settle(work, e.ID)
	})
}

// settle ends the handling of entry id (in w.active): releases its slot if
// it was acked (finish notes that), is no longer pending to this consumer,
// or the worker is stopping; else parks it with its slot.
func (w *Worker) settle(work context.Context, id string) {
	if w.active.wasAcked(id) || work.Err() != nil || !w.stillMine(work, id) {
		w.active.remove(id)
		w.release()
		return
	}
	w.parked.add(id) // before leaving active, so reclaim never sees neither
	w.active.remove(id)
}

// stillMine reports whether entry id is pending to this consumer; when
// Valkey cannot tell, it assumes so (reconcile checks again later).
func (w *Worker) stillMine(ctx context.Context, id string) bool {
	rows, err := w.client.Do(ctx, w.client.B().Xpending().Key(w.cfg.CaseStream).Group(w.cfg.ConsumerGroup).
		Start(id).End(id).Count(1).Build()).ToArray()
	return err != nil || pendingOwner(rows) == w.cfg.ConsumerName
}

// sleep waits d or until ctx is done, and reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// readLoop reads the consumer's own pending entries (id 0 onwards), then new
// entries (>), never holding more than Concurrency in flight. It ends when
// ctx is done.
func (w *Worker) readLoop(ctx, work context.Context) {
	wait := 100 * time.Millisecond
	fail := func(err error) bool {
		if ctx.Err() != nil {
			return false
		}
		if isNoGroup(err) {
			// The group or the stream was deleted: create it again and
			// read on at once.
			rerr := w.restoreGroup(ctx, w.casePos, err)
			if rerr == nil {
				return true
			}
			err = rerr
		}
		w.healthy.Store(false)
		w.log.Warn("read the message stream", zap.Error(err))
		ok := sleep(ctx, wait)
		wait = min(wait*2, maxRetryWait)
		return ok
	}
	// Own pending entries first: what this consumer read before a restart.
	// Re-reading counts as a delivery; one delivered more than
	// MaxDeliveries times (it crashed workers) is dead-lettered, not retried.
	last := "0"
	for ctx.Err() == nil {
		entries, err := w.read(ctx, last, 0)
		if err != nil {
			if !fail(err) {
				return
			}
			continue
		}
		wait = 100 * time.Millisecond
		if len(entries) == 0 {
			break
		}
		counts, err := w.deliveryCounts(ctx, entries[0].ID, entries[len(entries)-1].ID, len(entries))
		if err != nil && ctx.Err() == nil {
			w.log.Warn("read the delivery counts of own pending entries", zap.Error(err))
		}
		for _, e := range entries {
			last = e.ID
			if !w.acquire(ctx) {
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
		if !w.acquire(ctx) {
			return
		}
		n := 1
		for n < w.cfg.Concurrency && w.tryAcquire() {
			n++
		}
		entries, err := w.read(ctx, ">", n)
		for i := len(entries); i < n; i++ {
			w.release()
		}
		if err != nil {
			if !fail(err) {
				return
			}
			continue
		}
		wait = 100 * time.Millisecond
		w.healthy.Store(true)
		if len(entries) > 0 {
			w.casePos.saw(entries[len(entries)-1].ID)
		}
		for _, e := range entries {
			w.dispatch(work, e, 1)
		}
	}
}

// read runs one XREADGROUP from id: ">" blocks up to readBlock for at most
// count new entries; another id reads the consumer's pending entries after
// it (Concurrency at a time).
func (w *Worker) read(ctx context.Context, id string, count int) ([]valkey.XRangeEntry, error) {
	b := w.client.B().Xreadgroup().Group(w.cfg.ConsumerGroup, w.cfg.ConsumerName)
	var cmd valkey.Completed
	if id == ">" {
		// First without BLOCK, batched with the handlers' commands: under
		// load entries are waiting (batch.go).
		if entries, err := w.readNow(ctx, count); err != nil || len(entries) > 0 {
			return entries, err
		}
		cmd = b.Count(int64(count)).Block(readBlock.Milliseconds()).Streams().Key(w.cfg.CaseStream).Id(id).Build()
	} else {
		cmd = b.Count(int64(w.cfg.Concurrency)).Streams().Key(w.cfg.CaseStream).Id(id).Build()
	}
	res, err := w.client.Do(ctx, cmd).AsXRead()
	if valkey.IsValkeyNil(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return res[w.cfg.CaseStream], nil
}

// pendingEntry is one row of XPENDING's extended form.
type pendingEntry struct {
	id         string
	consumer   string
	idle       time.Duration
	deliveries int64
}

// reclaimLoop periodically reclaims pending entries idle longer than their
// backoff, from any consumer of the group (this one included), and
// dead-letters those delivered MaxDeliveries times. It ends when ctx is done.
func (w *Worker) reclaimLoop(ctx, work context.Context) {
	every := min(max(w.cfg.ClaimIdle/4, 10*time.Millisecond), 5*time.Second)
	for sleep(ctx, every) {
		if err := w.reclaim(ctx, work); err != nil && !errors.Is(err, context.Canceled) {
			w.healthy.Store(false)
			w.log.Warn("reclaim pending entries", zap.Error(err))
		}
	}
}

// reclaim is one pass of reclaimLoop: it frees the slots of parked entries
// gone to another consumer, then claims the entries idle past their backoff,
// each with a slot (a parked entry with its own).
func (w *Worker) reclaim(ctx, work context.Context) error {
	if err := w.reconcile(ctx); err != nil {
		return err
	}
	pending, err := w.pending(ctx)
	if err != nil {
		return err
	}
	for _, p := range pending {
		if w.active.has(p.id) {
			continue
		}
		need := w.backoff(p.deliveries)
		if p.idle < need {
			continue
		}
		parked := p.consumer == w.cfg.ConsumerName && w.parked.has(p.id)
		if !parked && !w.acquireWithin(ctx, readBlock+100*time.Millisecond) {
			return nil // every slot is busy: the next pass continues
		}
		entries, err := w.claim(ctx, p.id, need)
		if err != nil {
			if !parked {
				w.release()
			}
			return err
		}
		if parked {
			w.parked.remove(p.id) // its slot goes with the claim
		}
		if len(entries) == 0 {
			w.release() // another worker claimed it, or it was deleted
			continue
		}
		if p.deliveries >= int64(w.cfg.MaxDeliveries) {
			w.deadLetterHeld(work, entries[0], p.deliveries)
			continue
		}
		w.metrics.redeliveries.Inc()
		w.log.Info("reclaimed a pending entry", zap.String("entry_id", p.id),
			zap.String("from", p.consumer), zap.Int64("deliveries", p.deliveries+1))
		w.dispatch(work, entries[0], p.deliveries+1)
	}
	return nil
}

// deadLetterHeld dead-letters entry e, pending to this consumer, with the
// slot the caller holds: released once it is acked, else kept (parked).
func (w *Worker) deadLetterHeld(work context.Context, e valkey.XRangeEntry, deliveries int64) {
	if !w.active.add(e.ID) {
		w.release()
		return
	}
	w.deadLetter(work, e, deliveries)
	w.settle(work, e.ID)
}

// reconcile releases the slots of parked entries that are no longer pending
// to this consumer: another worker claimed them, or they were deleted.
func (w *Worker) reconcile(ctx context.Context) error {
	ids := w.parked.list()
	if len(ids) == 0 {
		return nil
	}
	cmds := make(valkey.Commands, len(ids))
	for i, id := range ids {
		cmds[i] = w.client.B().Xpending().Key(w.cfg.CaseStream).Group(w.cfg.ConsumerGroup).Start(id).End(id).Count(1).Build()
	}
	for i, r := range w.client.DoMulti(ctx, cmds...) {
		rows, err := r.ToArray()
		if err != nil {
			return fmt.Errorf("XPENDING %s %s: %w", w.cfg.CaseStream, ids[i], err)
		}
		if pendingOwner(rows) != w.cfg.ConsumerName && w.parked.remove(ids[i]) {
			w.release()
		}
	}
	return nil
}

// pendingOwner is the consumer of the one row of an extended XPENDING
// reply, "" when there is none.
func pendingOwner(rows []valkey.ValkeyMessage) string {
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

// deliveryCounts returns the delivery counts of this consumer's pending
// entries from start to end (at most count of them).
func (w *Worker) deliveryCounts(ctx context.Context, start, end string, count int) (map[string]int64, error) {
	rows, err := w.client.Do(ctx, w.client.B().Xpending().Key(w.cfg.CaseStream).Group(w.cfg.ConsumerGroup).
		Start(start).End(end).Count(int64(count)).Consumer(w.cfg.ConsumerName).Build()).ToArray()
	if err != nil {
		return nil, fmt.Errorf("XPENDING %s: %w", w.cfg.CaseStream, err)
	}
	out := make(map[string]int64, len(rows))
	for _, p := range parsePending(rows) {
		out[p.id] = p.deliveries
	}
	return out, nil
}

// pending lists up to 100 entries of the group idle at least ClaimIdle.
func (w *Worker) pending(ctx context.Context) ([]pendingEntry, error) {
	rows, err := w.client.Do(ctx, w.client.B().Xpending().Key(w.cfg.CaseStream).Group(w.cfg.ConsumerGroup).
		Idle(w.cfg.ClaimIdle.Milliseconds()).Start("-").End("+").Count(100).Build()).ToArray()
	if err != nil {
		return nil, err
	}
	return parsePending(rows), nil
}

// parsePending parses the rows of an extended XPENDING reply.
func parsePending(rows []valkey.ValkeyMessage) []pendingEntry {
	out := make([]pendingEntry, 0, len(rows))
	for _, r := range rows {
		f, err := r.ToArray()
		if err != nil || len(f) < 4 {
			continue
		}
		id, _ := f[0].ToString()
		consumer, _ := f[1].ToString()
		idle, _ := f[2].AsInt64()
		n, _ := f[3].AsInt64()
		out = append(out, pendingEntry{id: id, consumer: consumer, idle: time.Duration(idle) * time.Millisecond, deliveries: n})
	}
	return out
}

// claim XCLAIMs entry id for this consumer if it is still idle at least
// minIdle (so that of several workers only one wins), returning it (none
// when another worker won or the entry was deleted).
func (w *Worker) claim(ctx context.Context, id string, minIdle time.Duration) ([]valkey.XRangeEntry, error) {
	return w.client.Do(ctx, w.client.B().Xclaim().Key(w.cfg.CaseStream).Group(w.cfg.ConsumerGroup).
		Consumer(w.cfg.ConsumerName).MinIdleTime(strconv.FormatInt(minIdle.Milliseconds(), 10)).Id(id).Build()).AsXRange()
}
