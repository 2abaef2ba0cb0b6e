package journal

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/pyrula/caseworker/bundle"
)

// ErrRunChanged means a run read in pages (RunPages) changed under the
// reader in a way the pages cannot hide: its live keys expired or moved to
// the archive between two pages. Reading the run whole (Journal.Run)
// answers instead.
var ErrRunChanged = errors.New("run changed while it was read")

// RunPages is a run read a page at a time, so that a reader of a large run
// (a save) never holds all of it: its meta and the ids of its results come
// first, its events and results on demand.
type RunPages interface {
	// Meta is the run's meta when the pages were opened; Meta.LastSeq is
	// the last event Events gives.
	Meta() Meta
	// ResultIDs are the ids ("kind:key", ResultID) of the run's results
	// when the pages were opened, sorted by (kind, key).
	ResultIDs() []string
	// Events calls fn with the run's events in run_seq order, run_seq 1 to
	// Meta().LastSeq, some at a time; fn must not keep the slice. It
	// returns fn's error as it is.
	Events(ctx context.Context, fn func([]Event) error) error
	// Results returns the results of ids (ids from ResultIDs), in that
	// order.
	Results(ctx context.Context, ids []string) ([]bundle.Result, error)
}

// PagedReader is a Journal that reads runs in pages. A journal without it
// is read whole (Run) and paged in memory (PagesOf).
type PagedReader interface {
	// RunPages opens run runID, live or archived, for a read in pages.
	// Errors: one wrapping ErrRunNotFound when the run is in neither the
	// journal nor the archive.
	RunPages(ctx context.Context, runID string) (RunPages, error)
}

// PagedArchive is an Archive that reads runs in pages; a journal reading
// through it (its live copy gone) pages the archived run too.
type PagedArchive interface {
	// RunPages opens archived run runID of namespace for a read in pages.
	// Errors: one wrapping ErrRunNotFound when the archive has no such run.
	RunPages(ctx context.Context, namespace, runID string) (RunPages, error)
}

// ReadPages opens run runID of j for a read in pages: through j's
// PagedReader when it has one, else read whole (Run) and paged in memory.
func ReadPages(ctx context.Context, j Journal, runID string) (RunPages, error) {
	if pr, ok := j.(PagedReader); ok {
		return pr.RunPages(ctx, runID)
	}
	r, err := j.Run(ctx, runID)
	if err != nil {
		return nil, err
	}
	return PagesOf(r), nil
}

// PagesOf pages run r, which is held whole.
func PagesOf(r *Run) RunPages {
	p := &memPages{run: r, ids: make([]string, len(r.Results)), byID: make(map[string]int, len(r.Results))}
	for i, res := range r.Results {
		p.ids[i] = ResultID(res.Kind, res.Key)
		p.byID[p.ids[i]] = i
	}
	return p
}

// memPages is a run held whole, paged.
type memPages struct {
	run  *Run
	ids  []string
	byID map[string]int
}

// PageSize is how many events one page of RunPages.Events holds at most
// (each backend's read of a page), and how many results a reader of the
// pages asks RunPages.Results for at once.
const PageSize = 1024

func (p *memPages) Meta() Meta          { return p.run.Meta }
func (p *memPages) ResultIDs() []string { return slices.Clone(p.ids) }

func (p *memPages) Events(ctx context.Context, fn func([]Event) error) error {
	for evs := range slices.Chunk(p.run.Events, PageSize) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(evs); err != nil {
			return err
		}
	}
	return nil
}

func (p *memPages) Results(ctx context.Context, ids []string) ([]bundle.Result, error) {
	out := make([]bundle.Result, len(ids))
	for i, id := range ids {
		j, ok := p.byID[id]
		if !ok {
			return nil, ErrRunChanged
		}
		out[i] = p.run.Results[j]
	}
	return out, ctx.Err()
}

// SortResultIDs sorts result ids ("kind:key") by (kind, key), as a run's
// results are sorted (a kind holds no colon).
func SortResultIDs(ids []string) { slices.SortFunc(ids, CompareResultIDs) }

// CompareResultIDs orders result ids a and b by (kind, key).
func CompareResultIDs(a, b string) int {
	ka, ra, _ := strings.Cut(a, ":")
	kb, rb, _ := strings.Cut(b, ":")
	return cmp.Or(strings.Compare(ka, kb), strings.Compare(ra, rb))
}
