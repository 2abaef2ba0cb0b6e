package valkeyjournal

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/internal/backend"
)

// RunPages implements journal.PagedReader: the run's meta, its result ids
// and its first 1,024 events in one script (firstPageScript), with the
// values of its results too when it has at most preloadResults of them in
// at most preloadBytes (a run whose page of results would be read next
// anyway); then its other events an XRANGE of 1,024 at a time and its
// results by HMGET, as asked. A run no longer live is read through the
// archive: in pages where the archive has them (journal.PagedArchive), else
// whole (Run) and paged in memory. Events or results gone between two pages
// (the run's keys expired) are journal.ErrRunChanged. A user whose ACL
// refuses scripts reads the first page in a transaction instead (firstPage),
// and one that also refuses HKEYS reads the run whole (Run).
func (j *Journal) RunPages(ctx context.Context, runID string) (journal.RunPages, error) {
	if err := journal.CheckRunID(runID); err != nil {
		return nil, fmt.Errorf("valkeyjournal: pages %s: %w", runID, err)
	}
	mk, ek, rk := Keys(j.opts.Namespace, runID)
	reply, err := j.exec(ctx, firstPageScript, []string{mk, rk, ek},
		[]string{strconv.Itoa(journal.PageSize), strconv.Itoa(preloadResults), strconv.Itoa(preloadBytes)}).ToArray()
	if isNoPerm(err) {
		return j.firstPage(ctx, runID)
	}
	if err == nil && len(reply) != 4 {
		err = fmt.Errorf("unexpected script reply of %d parts", len(reply))
	}
	if err != nil {
		return nil, fmt.Errorf("valkeyjournal: pages %s: %w", runID, err)
	}
	p, err := j.newPages(ctx, runID, reply[0], reply[1], reply[2])
	switch {
	case err != nil:
		return nil, err
	case p.archived != nil:
		return p.archived, nil
	}
	if vals, err := reply[3].ToArray(); err == nil && len(vals) == len(p.unsorted) {
		p.preloaded = make(map[string][]byte, len(vals))
		for i, v := range vals {
			if raw, err := v.AsBytes(); err == nil {
				p.preloaded[p.unsorted[i]] = raw
			}
		}
	}
	p.unsorted = nil
	return p, nil
}

// The most results, and bytes of them, RunPages reads with a run's first
// page.
const (
	preloadResults = 256
	preloadBytes   = 1 << 20
)

// isNoPerm reports whether err is Valkey's refusal of a command to the
// user (its ACL): NOPERM, or the error of a script that called one.
func isNoPerm(err error) bool {
	ve, ok := valkey.IsValkeyErr(err)
	if !ok {
		return false
	}
	msg := ve.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, "can't run this command")
}

// firstPage is RunPages' first read as a transaction (MULTI: the meta, the
// result ids, the first page of events), for a user whose ACL refuses
// scripts; one whose ACL also refuses HKEYS (granted before saves read in
// pages) reads the run whole, as it did then.
func (j *Journal) firstPage(ctx context.Context, runID string) (journal.RunPages, error) {
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
			noPerm = noPerm || isNoPerm(e)
		}
	}
	if noPerm {
		return j.wholePages(ctx, runID)
	}
	if err == nil && len(reply) != 3 {
		err = fmt.Errorf("unexpected transaction reply of %d parts", len(reply))
	}
	if err != nil {
		return nil, fmt.Errorf("valkeyjournal: pages %s: %w", runID, err)
	}
	p, err := j.newPages(ctx, runID, reply[0], reply[1], reply[2])
	switch {
	case err != nil:
		return nil, err
	case p.archived != nil:
		return p.archived, nil
	}
	p.unsorted = nil
	return p, nil
}

// newPages is the pages of run runID from the replies of its first read:
// its meta, its result ids and its first page of events. A run that is not
// live gives pages whose archived is set: the archive's copy, in pages
// where it has them, else the run read whole.
func (j *Journal) newPages(ctx context.Context, runID string, metaReply, idsReply, eventsReply valkey.ValkeyMessage) (*pages, error) {
	fields, err := metaReply.AsStrMap()
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
			return &pages{archived: archivedPages{pg}}, nil
		}
		pg, err := j.wholePages(ctx, runID)
		if err != nil {
			return nil, err
		}
		return &pages{archived: pg}, nil
	}
	_, ek, rk := Keys(j.opts.Namespace, runID)
	p := &pages{j: j, events: ek, results: rk}
	if p.meta, err = decodeMeta(fields); err != nil {
		return nil, fmt.Errorf("valkeyjournal: pages %s: %w", runID, err)
	}
	if p.ids, err = idsReply.AsStrSlice(); err != nil {
		return nil, fmt.Errorf("valkeyjournal: pages %s: results: %w", runID, err)
	}
	if p.ids == nil {
		p.ids = []string{}
	}
	p.unsorted = slices.Clone(p.ids)
	journal.SortResultIDs(p.ids)
	if p.first, err = eventsReply.ToArray(); err != nil {
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
	// unsorted is ids as the first read returned them, until RunPages
	// pairs them with the values it read.
	unsorted []string
	// first is the XRANGE of the first page of events, read with the meta.
	first []valkey.ValkeyMessage
	// preloaded holds the values of the results read with the first page
	// (a small run's), by id, until Results takes them.
	preloaded map[string][]byte
	// archived, for a run no longer live, is the archive's pages that
	// RunPages returns instead.
	archived journal.RunPages
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
	runID := p.meta.RunID
	out := make([]bundle.Result, len(ids))
	if p.fromPreloaded(ids, out) {
		return out, nil
	}
	c := p.j.c
	vals, err := c.Do(ctx, c.B().Hmget().Key(p.results).Field(ids...).Build()).ToArray()
	if err != nil {
		return nil, fmt.Errorf("valkeyjournal: results of %s: %w", runID, err)
	}
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

// fromPreloaded decodes the results ids into out from the values read with
// the first page, and forgets them; false (out unspecified) when one of
// them was not read then, or does not decode (HMGET reads them again).
func (p *pages) fromPreloaded(ids []string, out []bundle.Result) bool {
	if p.preloaded == nil {
		return false
	}
	for _, id := range ids {
		if _, ok := p.preloaded[id]; !ok {
			return false
		}
	}
	for i, id := range ids {
		r, err := backend.DecodeResult(p.preloaded[id])
		if err != nil {
			return false
		}
		out[i] = r
	}
	for _, id := range ids {
		delete(p.preloaded, id)
	}
	return true
}

// entryID is the id of an XRANGE entry [id, [field, value…]].
func entryID(entry valkey.ValkeyMessage) (string, error) {
	parts, err := entry.ToArray()
	if err != nil || len(parts) != 2 {
		return "", fmt.Errorf("malformed events entry: %v", err)
	}
	return parts[0].ToString()
}
