package worker

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap"
)

// readBlock is how long one XREADGROUP waits for new entries, so that a
// stop is noticed within it even if the server ignores the cancellation.
const readBlock = 500 * time.Millisecond

// maxRetryWait caps the wait between failed reads.
const maxRetryWait = 5 * time.Second

// inflight is the set of entry ids being handled by this worker, so that
// the reclaim loop never takes one of its own in-flight entries.
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
	if f.ids[id] {
		return false
	}
	f.ids[id] = true
	return true
}

func (f *inflight) remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.ids, id)
}

func (f *inflight) has(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ids[id]
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

// dispatch handles entry in a goroutine holding one slot, which it releases.
func (w *Worker) dispatch(work context.Context, e valkey.XRangeEntry, deliveries int64) {
	if !w.active.add(e.ID) {
		w.release()
		return
	}
	w.handlers.Add(1)
	go func() {
		defer w.handlers.Done()
		defer w.release()
		defer w.active.remove(e.ID)
		w.handle(work, e, deliveries)
	}()
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
		w.healthy.Store(false)
		w.log.Warn("read the message stream", zap.Error(err))
		ok := sleep(ctx, wait)
		wait = min(wait*2, maxRetryWait)
		return ok
	}
	// Own pending entries first: what this consumer read before a restart.
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
		for _, e := range entries {
			last = e.ID
			if !w.acquire(ctx) {
				return
			}
			w.dispatch(work, e, 0)
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

// reclaim is one pass of reclaimLoop.
func (w *Worker) reclaim(ctx, work context.Context) error {
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
		if p.deliveries >= int64(w.cfg.MaxDeliveries) {
			entries, err := w.claim(ctx, p.id, need)
			if err != nil {
				return err
			}
			for _, e := range entries {
				w.deadLetter(work, e, p.deliveries)
			}
			continue
		}
		if !w.tryAcquire() {
			return nil // every slot is busy: the next pass continues
		}
		entries, err := w.claim(ctx, p.id, need)
		if err != nil {
			w.release()
			return err
		}
		if len(entries) == 0 {
			w.release() // another worker claimed it, or it was deleted
			continue
		}
		w.metrics.redeliveries.Inc()
		w.log.Info("reclaimed a pending entry", zap.String("entry_id", p.id),
			zap.String("from", p.consumer), zap.Int64("deliveries", p.deliveries+1))
		w.dispatch(work, entries[0], p.deliveries+1)
	}
	return nil
}

// pending lists up to 100 entries of the group idle at least ClaimIdle.
func (w *Worker) pending(ctx context.Context) ([]pendingEntry, error) {
	rows, err := w.client.Do(ctx, w.client.B().Xpending().Key(w.cfg.CaseStream).Group(w.cfg.ConsumerGroup).
		Idle(w.cfg.ClaimIdle.Milliseconds()).Start("-").End("+").Count(100).Build()).ToArray()
	if err != nil {
		return nil, err
	}
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
	return out, nil
}

// claim XCLAIMs entry id for this consumer if it is still idle at least
// minIdle (so that of several workers only one wins), returning it (none
// when another worker won or the entry was deleted).
func (w *Worker) claim(ctx context.Context, id string, minIdle time.Duration) ([]valkey.XRangeEntry, error) {
	return w.client.Do(ctx, w.client.B().Xclaim().Key(w.cfg.CaseStream).Group(w.cfg.ConsumerGroup).
		Consumer(w.cfg.ConsumerName).MinIdleTime(strconv.FormatInt(minIdle.Milliseconds(), 10)).Id(id).Build()).AsXRange()
}
