package memjournal

import (
	"context"
	"fmt"

	"github.com/pyrula/caseworker/journal"
)

var _ journal.Lister = (*Journal)(nil)

// Finished implements journal.Lister: the finished runs of q's target held
// here (not expired), with the runs of the archive when there is one.
func (j *Journal) Finished(ctx context.Context, q journal.FinishedQuery) ([]journal.RunRef, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := j.opts.Now()
	var live []journal.RunRef
	j.mu.Lock()
	for id := range j.runs {
		if r := j.lookup(id, now); r != nil && q.Matches(r.meta) {
			live = append(live, journal.RunRef{RunID: id, FinishedAt: r.meta.FinishedAt})
		}
	}
	j.mu.Unlock()
	var archived []journal.RunRef
	if al, ok := j.opts.Archive.(journal.ArchiveLister); ok {
		var err error
		if archived, err = al.Finished(ctx, j.opts.Namespace, q); err != nil {
			return nil, fmt.Errorf("memjournal: list the archive's finished runs: %w", err)
		}
	}
	return journal.MergeRuns(live, archived), nil
}
