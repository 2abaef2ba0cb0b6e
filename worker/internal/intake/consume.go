package intake

import (
	"context"

	"go.uber.org/zap"

	"github.com/pyrula/caseworker/internal/tracing"
	"github.com/pyrula/caseworker/worker/internal/consumer"
)

// newConsumer returns the consumer of the message stream, with Concurrency
// slots and the message stream's policy: a failed entry waits ClaimIdle
// doubled per delivery; failures are counted by the entries' delivery
// counts, and an entry delivered MaxDeliveries times is answered with an
// error and dead-lettered (deadLetter); the entries in flight are kept
// alive by keepAliveLoop. The handlers of new entries run as tasks of the
// consumer's loop (their commands in its rounds, with its next read) until
// they detach before long work (batch.Detach); the others, and a detached
// one, on the goroutines Deps.Go gives.
func (in *Intake) newConsumer() (*consumer.Consumer, error) {
	return consumer.New(consumer.Config{
		Stream: in.cfg.CaseStream, Group: in.cfg.ConsumerGroup, Consumer: in.cfg.ConsumerName,
		Slots: in.cfg.Concurrency, Name: "the message stream", ReadBlock: in.cfg.ReadBlock,
		Policy: consumer.Policy{
			ClaimIdle:          in.cfg.ClaimIdle,
			BackoffPerDelivery: true,
			MaxDeliveries:      in.cfg.MaxDeliveries,
			DeadLetter: func(ctx context.Context, d consumer.Delivery, _ error, deliveries int64) bool {
				ctx, span := in.startDeadLetterSpan(ctx, d, deliveries)
				acked := in.deadLetter(ctx, d.Entry, deliveries)
				endStep(span, nil)
				return acked
			},
			KeepAlive: in.keepAliveLoop,
		},
	}, consumer.Deps{
		Client: in.client, Logger: in.log, Go: in.deps.Go, Batcher: in.batch, Tasks: true,
		Events: consumer.Events{
			Failed: in.report.StreamFailed,
			Read:   in.report.Read,
			Reclaimed: func(d consumer.Delivery, from string) {
				in.report.Redelivered()
				in.log.Info("reclaimed a pending entry", zap.String("entry_id", d.Entry.ID),
					zap.String("from", from), zap.Int64("deliveries", d.Deliveries))
			},
		},
	})
}

// Handle is the message stream's consumer.Handler: it handles one
// delivery (handle).
func (in *Intake) Handle(ctx context.Context, d consumer.Delivery) consumer.Verdict {
	if in.deps.Tracer != nil {
		return in.handleTraced(ctx, d)
	}
	if _, ok := d.Entry.FieldValues[tracing.TraceparentField]; ok {
		// Untraced, the run a message submits still carries the trace
		// context the message came with (submit).
		ctx, _ = tracing.EntryContext(ctx, d.Entry.FieldValues)
	}
	return in.handle(ctx, d.Entry, d.Deliveries)
}
