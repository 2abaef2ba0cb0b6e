// Package resolve opens the run journal a configuration names, in one
// place: the live backend picked by its URL's scheme, with the PostgreSQL
// archive of finished runs composed in when a DSN is given. The CLI's
// runtime commands (pyrula run, events, case save) and the worker both
// open their journal here, so that the same variables give the same
// journal everywhere:
//
//   - PYRULA_VALKEY_URL: "redis://…", "rediss://…" or "unix://…" is
//     journal/valkeyjournal (DefaultValkeyURL when empty); "memory:" is
//     journal/memjournal, a journal that lives as long as the process;
//   - PYRULA_NAMESPACE and PYRULA_COMPLETED_TTL: the journal's namespace
//     and how long a finished run stays live;
//   - PYRULA_POSTGRES_DSN: when set, journal/pgarchive, checked to be
//     migrated (pyrula db migrate), receives finished runs and answers
//     reads of runs no longer live.
//
// Reading those variables (flags first, then the environment) stays with
// each binary; this package only maps a Config to a backend. It imports
// journal and its backends, and nothing above them.
package resolve

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/valkeyconn"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/memjournal"
	"github.com/pyrula/caseworker/journal/pgarchive"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
)

// Environment variables whose values make up a Config.
const (
	EnvValkeyURL    = "PYRULA_VALKEY_URL"
	EnvNamespace    = "PYRULA_NAMESPACE"
	EnvCompletedTTL = "PYRULA_COMPLETED_TTL"
	EnvPostgresDSN  = "PYRULA_POSTGRES_DSN"
)

// DefaultValkeyURL is the journal's URL when none is configured: a Valkey
// (or Redis) on the local host.
const DefaultValkeyURL = "redis://127.0.0.1:6379/0"

// MemoryURL names the in-memory journal.
const MemoryURL = "memory:"

// ErrInvalidURL means a journal URL that names no backend; the error
// names the variable, never the URL (it may hold a password).
var ErrInvalidURL = errors.New("journal URL is not memory:, redis://, rediss:// or unix://")

// Config names a journal.
type Config struct {
	// URL picks the live backend by its scheme (see the package doc);
	// DefaultValkeyURL when empty.
	URL string
	// Client, when set, is the Valkey client of a Valkey URL, used instead
	// of connecting to URL (the worker shares its own); Open does not
	// close it.
	Client valkey.Client
	// Namespace prefixes every key (journal.DefaultNamespace when empty);
	// it must pass journal.CheckNamespace.
	Namespace string
	// CompletedTTL is how long a finished run stays live
	// (journal.DefaultCompletedTTL when zero).
	CompletedTTL time.Duration
	// ArchiveDSN, when set, is the PostgreSQL database of the archive
	// (PYRULA_POSTGRES_DSN).
	ArchiveDSN string
	// Valkey are the connection's settings besides the URL: credentials
	// (PYRULA_VALKEY_USERNAME, PYRULA_VALKEY_PASSWORD) and the TLS files of
	// a rediss:// URL (PYRULA_VALKEY_CA_FILE, PYRULA_VALKEY_CERT_FILE,
	// PYRULA_VALKEY_KEY_FILE); unused with a Client.
	Valkey valkeyconn.Settings
}

// Journal is an opened journal with what it holds open.
type Journal struct {
	journal.Journal
	closers []func()
}

// Close closes what Open opened for the journal (the archive's pool, a
// Valkey client it connected); not a Client given in the Config. It is
// safe to call twice.
func (j *Journal) Close() error {
	for i := len(j.closers) - 1; i >= 0; i-- {
		j.closers[i]()
	}
	j.closers = nil
	return nil
}

// Open opens the journal cfg names. An unknown URL scheme is an error
// wrapping ErrInvalidURL; an archive that cannot be reached or is not
// migrated is an error naming PYRULA_POSTGRES_DSN (wrapping
// pgarchive.ErrNotMigrated for the latter); an invalid namespace is
// journal.CheckNamespace's error. Errors never show a password.
func Open(ctx context.Context, cfg Config) (*Journal, error) {
	url := strings.TrimSpace(cfg.URL)
	if url == "" {
		url = DefaultValkeyURL
	}
	ns := cfg.Namespace
	if ns == "" {
		ns = journal.DefaultNamespace
	}
	if err := journal.CheckNamespace(ns); err != nil {
		return nil, err
	}
	memory := url == MemoryURL
	if !memory {
		if _, err := valkey.ParseURL(url); err != nil {
			return nil, fmt.Errorf("%s: %w", EnvValkeyURL, ErrInvalidURL)
		}
	}
	j := &Journal{}
	var archive journal.Archive
	if cfg.ArchiveDSN != "" {
		pool, err := pgxpool.New(ctx, cfg.ArchiveDSN)
		if err != nil {
			return nil, fmt.Errorf("open the archive (%s): %w", EnvPostgresDSN, err)
		}
		j.closers = append(j.closers, pool.Close)
		if err := pgarchive.Check(ctx, pool); err != nil {
			j.Close()
			return nil, fmt.Errorf("archive (%s): %w", EnvPostgresDSN, err)
		}
		archive = pgarchive.New(pool)
	}
	if memory {
		mj, err := memjournal.New(memjournal.Options{Namespace: ns, CompletedTTL: cfg.CompletedTTL, Archive: archive})
		if err != nil {
			j.Close()
			return nil, fmt.Errorf("open the memory journal: %w", err)
		}
		j.Journal = mj
		return j, nil
	}
	client := cfg.Client
	if client == nil {
		c, err := connect(url, cfg.Valkey)
		if err != nil {
			j.Close()
			return nil, err
		}
		client = c
		j.closers = append(j.closers, c.Close)
	}
	vj, err := valkeyjournal.New(client, valkeyjournal.Options{Namespace: ns, CompletedTTL: cfg.CompletedTTL, Archive: archive})
	if err != nil {
		j.Close()
		return nil, fmt.Errorf("open the Valkey journal: %w", err)
	}
	j.Journal = vj
	return j, nil
}

// connect dials the Valkey at url with the settings (valkeyconn: no
// client-side caching, the journal's keys change under other processes).
func connect(url string, settings valkeyconn.Settings) (valkey.Client, error) {
	opt, err := valkeyconn.Options(url, settings)
	if errors.Is(err, valkeyconn.ErrInvalidURL) {
		return nil, fmt.Errorf("%s: %w", EnvValkeyURL, ErrInvalidURL)
	}
	if err != nil {
		return nil, err
	}
	c, err := valkey.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("connect to the journal's Valkey (%s): %w", EnvValkeyURL, err)
	}
	return c, nil
}

// Finished implements journal.Lister when the live journal does (every
// journal Open opens).
func (j *Journal) Finished(ctx context.Context, q journal.FinishedQuery) ([]journal.RunRef, error) {
	l, ok := j.Journal.(journal.Lister)
	if !ok {
		return nil, fmt.Errorf("journal: %T cannot list its finished runs", j.Journal)
	}
	return l.Finished(ctx, q)
}

// RunPages implements journal.PagedReader: the live journal's pages where
// it reads in pages, else its run read whole (journal.ReadPages).
func (j *Journal) RunPages(ctx context.Context, runID string) (journal.RunPages, error) {
	return journal.ReadPages(ctx, j.Journal, runID)
}

// Head implements journal.HeadReader: the live journal's Head where it has
// one (every journal Open opens), else from the run read whole
// (journal.ReadHead).
func (j *Journal) Head(ctx context.Context, runID string, n int) (journal.Meta, []journal.Event, error) {
	return journal.ReadHead(ctx, j.Journal, runID, n)
}

// Tail implements journal.TailReader: the live journal's Tail where it has
// one (every journal Open opens), else the last n of the run's events.
func (j *Journal) Tail(ctx context.Context, runID string, n int) ([]journal.Event, error) {
	if t, ok := j.Journal.(journal.TailReader); ok {
		return t.Tail(ctx, runID, n)
	}
	events, _, err := j.Journal.Events(ctx, runID)
	if err != nil {
		return nil, err
	}
	return events[max(0, len(events)-max(n, 0)):], nil
}
