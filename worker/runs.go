package worker

import (
	"context"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/replay"
	"github.com/pyrula/caseworker/worker/internal/runexec"
)

// newExecutor wires the run executor (worker/internal/runexec) to w: its
// configuration, collaborators, and the callbacks through which it reports
// to w's metrics and to the runs stream's group position.
func newExecutor(w *Worker) (*runexec.Executor, error) {
	cfg := runexec.Config{
		Namespace: w.cfg.Namespace, ConsumerName: w.cfg.ConsumerName,
		RunConcurrency: w.cfg.RunConcurrency, MaxDeliveries: w.cfg.MaxDeliveries,
		ClaimIdle: w.cfg.ClaimIdle, RunLease: w.cfg.RunLease, IdempotencyTTL: w.cfg.IdempotencyTTL,
		ReadBlock: readBlock, WaitReplicas: w.cfg.WaitReplicas, WaitTimeout: w.cfg.WaitTimeout,
	}
	return runexec.New(cfg, runexec.Deps{
		Client: w.client, Logger: w.log, Journal: w.journal, Registry: w.reg,
		LLMRef: w.llmRef, Models: w.modelClient, CaseModels: w.caseModelClient, FixtureStore: w.fixtureStore,
		Tracer: w.tracer,
		Report: runexec.Report{
			StreamFailed: func(ctx context.Context, err error) error { return w.streamFailed(ctx, w.runsPos, err) },
			Read: func(entries []valkey.XRangeEntry) {
				if len(entries) > 0 {
					w.runsPos.saw(entries[len(entries)-1].ID)
				}
			},
			Redelivered:  w.metrics.redeliveries.Inc,
			RunStarted:   w.metrics.runsInFlight.Inc,
			RunEnded:     w.metrics.runsInFlight.Dec,
			Transient:    w.metrics.transient.WithLabelValues("run").Inc,
			DeadLettered: w.metrics.deadLetters.Inc,
			RunFinished: func(typ messages.MessageType, out host.Outcome) {
				kind := runKindLive
				switch typ {
				case messages.RunCase:
					kind = runKindCase
				case messages.RunSuite:
					kind = runKindSuite
				}
				w.metrics.runs.WithLabelValues(kind, string(out.Status), string(out.Code)).Inc()
			},
			CaseOutcome: func(o replay.Outcome) { w.metrics.caseOutcome(o) },
			SuiteChild:  func(verdict string) { w.metrics.suiteChildren.WithLabelValues(verdict).Inc() },
		},
	})
}
