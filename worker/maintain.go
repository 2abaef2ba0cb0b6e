package worker

import (
	"context"
	"errors"

	"go.uber.org/zap"

	"github.com/pyrula/caseworker/worker/internal/consumer"
	"github.com/pyrula/caseworker/worker/internal/maintain"
	"github.com/pyrula/caseworker/worker/internal/runwire"
)

// maintainLoop trims the message and runs streams and deletes dead
// consumers every MaintenanceInterval until ctx is done.
func (w *Worker) maintainLoop(ctx context.Context) {
	for consumer.Sleep(ctx, w.cfg.MaintenanceInterval) {
		if err := w.maintain(ctx); err != nil && !errors.Is(err, context.Canceled) {
			w.log.Warn("stream maintenance", zap.Error(err))
		}
	}
}

// maintain is one pass of maintainLoop: every worker runs it; two passes
// at once do no harm, each step being one script (or, for a missing
// group, one XGROUP CREATE that only the first pass wins).
func (w *Worker) maintain(ctx context.Context) error {
	var errs []error
	// Note how far each group delivered, and create a group that was
	// deleted (its stream too) on a worker that has not read since.
	for _, p := range []*groupPos{w.casePos, w.runsPos} {
		found, err := w.observeGroup(ctx, p)
		if err == nil && !found {
			err = w.restoreGroup(ctx, p, nil)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, w.upkeep.Pass(ctx, []maintain.Stream{
		{Stream: w.cfg.CaseStream, Group: w.cfg.ConsumerGroup}, {Stream: w.runsStream(), Group: runwire.RunsGroup},
	}))
	return errors.Join(errs...)
}
