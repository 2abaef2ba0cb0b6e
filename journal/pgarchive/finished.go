package pgarchive

import (
	"context"
	"time"

	"github.com/pyrula/caseworker/journal"
)

var _ journal.ArchiveLister = (*Archive)(nil)

// finishedQuery selects the archived runs of a target and status finished
// in [$4, $5) ($4 and $5 may be null), in run id order.
const finishedQuery = `SELECT run_id, finished_at FROM archive.runs
WHERE namespace = $1 AND target_name = $2 AND status = $3
  AND ($4::timestamptz IS NULL OR finished_at >= $4) AND ($5::timestamptz IS NULL OR finished_at < $5)
ORDER BY run_id`

// Finished implements journal.ArchiveLister.
func (a *Archive) Finished(ctx context.Context, namespace string, q journal.FinishedQuery) ([]journal.RunRef, error) {
	status := q.Status
	if status == "" {
		status = journal.StatusComplete
	}
	bound := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	rows, err := a.pool.Query(ctx, finishedQuery, namespace, q.Target, string(status), bound(q.After), bound(q.Before))
	if err != nil {
		return nil, wrap("list finished runs", namespace, "", err)
	}
	defer rows.Close()
	var out []journal.RunRef
	for rows.Next() {
		var r journal.RunRef
		if err := rows.Scan(&r.RunID, &r.FinishedAt); err != nil {
			return nil, wrap("list finished runs", namespace, "", err)
		}
		r.FinishedAt = r.FinishedAt.UTC()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("list finished runs", namespace, "", err)
	}
	return out, nil
}
