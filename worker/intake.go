package worker

import (
	"context"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/worker/internal/intake"
)

// readBlock is how long one XREADGROUP of either stream waits for new
// entries, so that a stop is noticed within it even if the server ignores
// the cancellation.
const readBlock = 500 * time.Millisecond

// finishTimeout bounds one batch of the per-message Valkey commands.
const finishTimeout = 10 * time.Second

// newIntake wires the message intake (worker/internal/intake) to w: its
// configuration, collaborators, and the callbacks through which it
// reports to w's metrics, health and the message stream's group position.
func newIntake(w *Worker) (*intake.Intake, error) {
	cfg := intake.Config{
		Namespace: w.cfg.Namespace, CaseStream: w.cfg.CaseStream, ConsumerGroup: w.cfg.ConsumerGroup,
		ConsumerName: w.cfg.ConsumerName, ReplyStream: w.cfg.ReplyStream,
		Concurrency: w.cfg.Concurrency, SaveConcurrency: w.cfg.SaveConcurrency,
		ClaimIdle: w.cfg.ClaimIdle, MaxDeliveries: w.cfg.MaxDeliveries, MaxMessageBytes: w.cfg.MaxMessageBytes,
		IdempotencyTTL: w.cfg.IdempotencyTTL, WaitReplicas: w.cfg.WaitReplicas, WaitTimeout: w.cfg.WaitTimeout,
		ReadBlock: readBlock,
	}
	m := w.metrics
	return intake.New(cfg, intake.Deps{
		Client: w.client, Batch: w.batch, Logger: w.log, Journal: w.journal, Registry: w.reg,
		LLMRef: w.llmRef, Models: w.modelClient, CaseModels: w.caseModelClient, FixtureStore: w.fixtureStore,
		Go: w.spawn.run, Tracer: w.tracer,
		Report: intake.Report{
			StreamFailed: func(ctx context.Context, err error) error { return w.streamFailed(ctx, w.casePos, err) },
			Read: func(entries []valkey.XRangeEntry) {
				w.healthy.Store(true)
				if len(entries) > 0 {
					w.casePos.saw(entries[len(entries)-1].ID)
				}
			},
			Healthy:         func() { w.healthy.Store(true) },
			Received:        func(typ string) { m.receivedBy[typeIndex(typ)].Inc() },
			HandlingStarted: m.inFlight.Inc,
			HandlingEnded:   m.inFlight.Dec,
			Answered: func(typ string, status messages.ReplyStatus, took time.Duration) {
				m.answered(typ, status).Inc()
				m.durationOf(typ).Observe(took.Seconds())
			},
			Duplicate:   m.duplicates.Inc,
			Transient:   func(typ string) { m.transient.WithLabelValues(typeLabel(typ)).Inc() },
			Redelivered: m.redeliveries.Inc,
			DeadLettered: func(typ string, status messages.ReplyStatus) {
				m.deadLetters.Inc()
				m.messages.WithLabelValues(typeLabel(typ), string(status)).Inc()
			},
		},
	})
}
