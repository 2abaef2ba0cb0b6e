package worker

import (
	"context"
	"time"

	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap"

	"github.com/pyrula/caseworker/worker/internal/consumer"
)

// readBlock is how long one XREADGROUP waits for new entries, so that a
// stop is noticed within it even if the server ignores the cancellation.
const readBlock = 500 * time.Millisecond

// newCaseConsumer returns the consumer of the message stream (w.cases),
// with Concurrency slots and the message stream's policy: a failed entry
// waits ClaimIdle doubled per delivery; failures are counted by the
// entries' delivery counts, and an entry delivered MaxDeliveries times is
// answered with an error and dead-lettered (deadLetter, handle.go); the
// entries in flight are kept alive by keepAliveLoop (keepalive.go).
// Handlers run on reused goroutines (spawn.go), and under load the read
// of new entries shares the handlers' batches (w.batch).
func (w *Worker) newCaseConsumer() (*consumer.Consumer, error) {
	return consumer.New(consumer.Config{
		Stream: w.cfg.CaseStream, Group: w.cfg.ConsumerGroup, Consumer: w.cfg.ConsumerName,
		Slots: w.cfg.Concurrency, Name: "the message stream", ReadBlock: readBlock,
		Policy: consumer.Policy{
			ClaimIdle:          w.cfg.ClaimIdle,
			BackoffPerDelivery: true,
			MaxDeliveries:      w.cfg.MaxDeliveries,
			DeadLetter: func(ctx context.Context, d consumer.Delivery, _ error, deliveries int64) bool {
				return w.deadLetter(ctx, d.Entry, deliveries)
			},
			KeepAlive: w.keepAliveLoop,
		},
	}, consumer.Deps{
		Client: w.client, Logger: w.log, Go: w.spawn.run, Batched: w.batch.Do,
		Events: consumer.Events{
			Failed: func(ctx context.Context, err error) error { return w.streamFailed(ctx, w.casePos, err) },
			Read: func(entries []valkey.XRangeEntry) {
				w.healthy.Store(true)
				if len(entries) > 0 {
					w.casePos.saw(entries[len(entries)-1].ID)
				}
			},
			Reclaimed: func(d consumer.Delivery, from string) {
				w.metrics.redeliveries.Inc()
				w.log.Info("reclaimed a pending entry", zap.String("entry_id", d.Entry.ID),
					zap.String("from", from), zap.Int64("deliveries", d.Deliveries))
			},
		},
	})
}

// handleMessage is the message stream's consumer.Handler (handle.go).
func (w *Worker) handleMessage(ctx context.Context, d consumer.Delivery) consumer.Verdict {
	return w.handle(ctx, d.Entry, d.Deliveries)
}

// streamFailed is told of a failed command of the consumer loop of the
// stream of group p (a read, a reclaim pass): a deleted group (NOGROUP) is
// created again at once (restoreGroup) and nil returned, so that the loop
// reads on; another failure marks the worker unhealthy and is returned,
// for the loop to log and wait out.
func (w *Worker) streamFailed(ctx context.Context, p *groupPos, err error) error {
	if isNoGroup(err) {
		// The group or the stream was deleted: create it again and read
		// on at once.
		rerr := w.restoreGroup(ctx, p, err)
		if rerr == nil {
			return nil
		}
		err = rerr
	}
	w.healthy.Store(false)
	return err
}
