package valkeyjournal

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/internal/backend"
)

// RunPages implements journal.PagedReader: the run's meta, its result ids
// and its first 1,024 events in one transaction, then its other events an
// XRANGE of 1,024 at a time and its results by HMGET, as asked. A run no
// longer live is read through the archive: in pages where the archive has
// them (journal.PagedArchive), else whole (Run) and paged in memory.
// Events or results gone between two pages (the run's keys expired) are
// journal.ErrRunChanged. A user whose ACL refuses HKEYS reads the run
// whole (Run).
func (j *Journal) RunPages(ctx context.Context, runID string) (journal.RunPages, error) {
	if err := journal.CheckRunID(runID); err != nil {
		return nil, fmt.Errorf("valkeyjournal: pages %s: %w", runID, err)
	}
	mk, ek, rk := Keys(j.opts.Namespace, runID)
	resps := j.c.DoMulti(ctx,
		j.c.B().Multi().Build(),
		j.c.B().Hgetall().Key(mk).Build(),
		j.c.B().Hkeys().Key(rk).Build(),
		j.c.B().Xrange().Key(ek).Start("-").End("+").Count(journal.PageSize).Build(),
		j.c.B().Exec().Build())
	reply, err := resps[len(resps)-1].ToArray()
	noPerm := false
	for _, r := range resps {
		if e := r.Error(); e != nil {
			err = e
			if ve, ok := valkey.IsValkeyErr(e); ok && strings.HasPrefix(ve.Error(), "NOPERM") {
				noPerm = true
			}
		}
	}
	if noPerm {
		// A user whose ACL lacks HKEYS (granted before saves read in
		// pages) reads the run whole, as it did then.
		return j.wholePages(ctx, runID)
	}
	if err == nil && len(reply) != 3 {
		err = fmt.Errorf("unexpected transaction reply of %d parts", len(reply))
	}
	if err != nil {
		return nil, fmt.Errorf("valkeyjournal: pages %s: %w", runID, err)
	}
	fields, err := reply[0].AsStrMap()
	if err != nil {
		return nil, fmt.Errorf("valkeyjournal: pages %s: meta: %w", runID, err)
	}
	if len(fields) == 0 {
		// Not live: the archive's copy, in pages where it has them.
		if pa, ok := j.opts.Archive.(journal.PagedArchive); ok {
			pg, err := pa.RunPages(ctx, j.opts.Namespace, runID)
			if err != nil {
				return nil, fmt.Errorf("valkeyjournal: pages %s: %w", runID, err)
			}
			return archivedPages{pg}, nil
		}
		return j.wholePages(ctx, runID)
	}
	p := &pages{j: j, events: ek, results: rk}
	if p.meta, err = decodeMeta(fields); err != nil {
		return nil, fmt.Errorf("valkeyjournal: pages %s: %w", runID, err)
	}
	if p.ids, err = reply[1].AsStrSlice(); err != nil {
		return nil, fmt.Errorf("valkeyjournal: pages %s: results: %w", runID, err)
	}
	journal.SortResultIDs(p.ids)
	if p.first, err = reply[2].ToArray(); err != nil {
		return nil, fmt.Errorf("valkeyjournal: pages %s: events: %w", runID, err)
	}
	return p, nil
}

// wholePages reads run runID whole (Run: live, else from the archive) and
// pages it in memory.
func (j *Journal) wholePages(ctx context.Context, runID string) (journal.RunPages, error) {
	r, err := j.Run(ctx, runID)
	if err != nil {
		return nil, err
	}
	return journal.PagesOf(r), nil
}

// archivedPages are an archived run's pages, its meta read through this
// journal (OriginArchive).
type archivedPages struct{ journal.RunPages }

func (p archivedPages) Meta() journal.Meta {
	m := p.RunPages.Meta()
	m.Origin = journal.OriginArchive
	return m
}

// pages is a live run read in pages.
type pages struct {
	j               *Journal
	events, results string
	meta            journal.Meta
	ids             []string
	// first is the XRANGE of the first page of events, read with the meta.
	first []valkey.ValkeyMessage
}

func (p *pages) Meta() journal.Meta  { return p.meta }
func (p *pages) ResultIDs() []string { return p.ids }

// eventPages recycles the slices Events decodes a page of events into
// (*[]journal.Event): a worker reads a run's events for every case run it
// captures from a journal.
var eventPages = sync.Pool{New: func() any { return new([]journal.Event) }}

func (p *pages) Events(ctx context.Context, fn func([]journal.Event) error) error {
	c, runID := p.j.c, p.meta.RunID
	start, next := "-", int64(1)
	// A page's events (fn keeps none of them), recycled by the next read.
	pooled := eventPages.Get().(*[]journal.Event)
	evs := (*pooled)[:0]
	defer func() {
		clear(evs[:cap(evs)])
		*pooled = evs[:0]
		eventPages.Put(pooled)
	}()
	for next <= p.meta.LastSeq {
		entries := p.first
		if start != "-" {
			var err error
			entries, err = c.Do(ctx, c.B().Xrange().Key(p.events).Start(start).End("+").Count(journal.PageSize).Build()).ToArray()
			if err != nil {
				return fmt.Errorf("valkeyjournal: events of %s: %w", runID, err)
			}
		}
		if len(entries) == 0 {
			return fmt.Errorf("valkeyjournal: events of %s end at run_seq %d, before %d: %w", runID, next-1, p.meta.LastSeq, journal.ErrRunChanged)
		}
		evs = evs[:0]
		for _, entry := range entries {
			raw, err := eventOf(entry)
			if err != nil {
				return fmt.Errorf("valkeyjournal: events of %s: %w", runID, err)
			}
			e, err := backend.DecodeEvent(raw)
			if err != nil {
				return fmt.Errorf("valkeyjournal: events of %s: %w", runID, err)
			}
			if next > p.meta.LastSeq {
				break // appended after the meta was read
			}
			if e.RunSeq != next {
				return fmt.Errorf("valkeyjournal: events of %s: run_seq %d where %d was next: %w", runID, e.RunSeq, next, journal.ErrRunChanged)
			}
			evs = append(evs, e)
			next++
		}
		if err := fn(evs); err != nil {
			return err
		}
		id, err := entryID(entries[len(entries)-1])
		if err != nil {
			return fmt.Errorf("valkeyjournal: events of %s: %w", runID, err)
		}
		start = "(" + id
	}
	return nil
}

func (p *pages) Results(ctx context.Context, ids []string) ([]bundle.Result, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	c, runID := p.j.c, p.meta.RunID
	vals, err := c.Do(ctx, c.B().Hmget().Key(p.results).Field(ids...).Build()).ToArray()
	if err != nil {
		return nil, fmt.Errorf("valkeyjournal: results of %s: %w", runID, err)
	}
	out := make([]bundle.Result, len(ids))
	for i, v := range vals {
		raw, err := v.AsBytes()
		if valkey.IsValkeyNil(err) {
			return nil, fmt.Errorf("valkeyjournal: results of %s: %s is gone: %w", runID, ids[i], journal.ErrRunChanged)
		}
		if err != nil {
			return nil, fmt.Errorf("valkeyjournal: results of %s: %w", runID, err)
		}
		if out[i], err = backend.DecodeResult(raw); err != nil {
			return nil, fmt.Errorf("valkeyjournal: results of %s: %w", runID, err)
		}
	}
	return out, nil
}

// entryID is the id of an XRANGE entry [id, [field, value…]].
func entryID(entry valkey.ValkeyMessage) (string, error) {
	parts, err := entry.ToArray()
	if err != nil || len(parts) != 2 {
		return "", fmt.Errorf("malformed events entry: %v", err)
	}
	return parts[0].ToString()
}
