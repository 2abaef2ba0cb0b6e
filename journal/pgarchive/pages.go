package pgarchive

import (
	"context"
	"fmt"
	"strings"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/internal/backend"
)

const (
	resultIDsQuery  = `SELECT kind, key FROM archive.run_results WHERE namespace = $1 AND run_id = $2`
	eventsPageQuery = `SELECT event FROM archive.run_events WHERE namespace = $1 AND run_id = $2 AND run_seq > $3 ORDER BY run_seq LIMIT $4`
	resultsByIDs    = `SELECT r.record FROM unnest($3::text[], $4::text[]) WITH ORDINALITY AS want(kind, key, n)
		LEFT JOIN archive.run_results r ON r.namespace = $1 AND r.run_id = $2 AND r.kind = want.kind AND r.key = want.key
		ORDER BY want.n`
)

// RunPages implements journal.PagedArchive: the run's meta and the ids of
// its results, then its events 1,024 at a time (by run_seq) and its
// results as asked, each a query. An archived run never changes, so the
// pages need no transaction.
func (a *Archive) RunPages(ctx context.Context, namespace, runID string) (journal.RunPages, error) {
	m, err := a.Meta(ctx, namespace, runID)
	if err != nil {
		return nil, err
	}
	rows, err := a.pool.Query(ctx, resultIDsQuery, namespace, runID)
	if err != nil {
		return nil, wrap("result ids", namespace, runID, err)
	}
	var ids []string
	for rows.Next() {
		var kind, key string
		if err := rows.Scan(&kind, &key); err != nil {
			rows.Close()
			return nil, wrap("result ids", namespace, runID, err)
		}
		ids = append(ids, journal.ResultID(kind, key))
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("result ids", namespace, runID, err)
	}
	journal.SortResultIDs(ids)
	return &pages{a: a, namespace: namespace, meta: m, ids: ids}, nil
}

// pages is an archived run read in pages.
type pages struct {
	a         *Archive
	namespace string
	meta      journal.Meta
	ids       []string
}

func (p *pages) Meta() journal.Meta  { return p.meta }
func (p *pages) ResultIDs() []string { return p.ids }

func (p *pages) Events(ctx context.Context, fn func([]journal.Event) error) error {
	var last int64
	for last < p.meta.LastSeq {
		evs, err := scanEvents(p.a.pool.Query(ctx, eventsPageQuery, p.namespace, p.meta.RunID, last, journal.PageSize))
		if err != nil {
			return wrap("events", p.namespace, p.meta.RunID, err)
		}
		if len(evs) == 0 || evs[0].RunSeq != last+1 || evs[len(evs)-1].RunSeq != last+int64(len(evs)) {
			return wrap("events", p.namespace, p.meta.RunID, fmt.Errorf("events after run_seq %d missing: %w", last, journal.ErrRunChanged))
		}
		if err := fn(evs); err != nil {
			return err
		}
		last = evs[len(evs)-1].RunSeq
	}
	return nil
}

func (p *pages) Results(ctx context.Context, ids []string) ([]bundle.Result, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	kinds, keys := make([]string, len(ids)), make([]string, len(ids))
	for i, id := range ids {
		kinds[i], keys[i], _ = strings.Cut(id, ":")
	}
	rows, err := p.a.pool.Query(ctx, resultsByIDs, p.namespace, p.meta.RunID, kinds, keys)
	if err != nil {
		return nil, wrap("results", p.namespace, p.meta.RunID, err)
	}
	defer rows.Close()
	out := make([]bundle.Result, 0, len(ids))
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return nil, wrap("results", p.namespace, p.meta.RunID, err)
		}
		if raw == nil {
			return nil, wrap("results", p.namespace, p.meta.RunID, fmt.Errorf("%s is not archived: %w", ids[len(out)], journal.ErrRunChanged))
		}
		r, err := backend.DecodeResult(raw)
		if err != nil {
			return nil, wrap("results", p.namespace, p.meta.RunID, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("results", p.namespace, p.meta.RunID, err)
	}
	return out, nil
}
