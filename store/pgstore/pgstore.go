// Package pgstore is the fixture store in PostgreSQL ("postgres://…" or
// "postgresql://…"): one row per bundle in the table archive.case_bundles,
// which the store's own embedded migrations (migrations/, MigrationSet,
// applied by `pyrula db migrate` and `worker db migrate`) create:
//
//	hash text PRIMARY KEY, blob bytea, size bigint, created_at, updated_at timestamptz
//
// Writes are single statements, so atomic: a reader never sees a partial
// blob, and a write cut off by a crash or a lost connection leaves nothing.
// Put first refreshes updated_at of a stored bundle (without reading the
// blob), and otherwise reads the blob and inserts it with
// INSERT … ON CONFLICT (hash) DO NOTHING; created is true only when that
// insert wrote the row. DeleteBefore is one DELETE … WHERE hash = $1 AND
// updated_at < $2, which PostgreSQL's row locks make atomic with respect to
// a concurrent refresh.
//
// updated_at is stamped by the database clock (now()), one clock for every
// process that shares the database, unless Options.Now injects one (tests).
// gc compares those stamps with its own clock's start, so the hosts running
// gc should keep their clocks in sync with the database server (NTP).
//
// The URL is the pgx DSN; Identity is store.ParseURL's identity
// ("postgres://host:port/db"), never credentials, and errors show the URL
// only redacted. A database that was never migrated is refused at Open with
// ErrNotMigrated, whose message says to run `pyrula db migrate`.
//
// pgstore imports store, bundle, internal/pgmigrate and internal/redact, nothing else of the
// project: its table has migrations of its own, recorded apart from the run
// archive's (archive.store_migrations), so that store never depends on
// journal; Open checks for the table and its columns with a query.
package pgstore

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/internal/pgmigrate"
	"github.com/pyrula/caseworker/internal/redact"
	"github.com/pyrula/caseworker/store"
)

var _ store.Store = (*Store)(nil)

// DefaultMaxBlobSize is the largest blob Put accepts unless
// Options.MaxBlobSize says otherwise: bundles are stored compressed and are
// typically far smaller; a bytea value cannot exceed 1 GiB anyway.
const DefaultMaxBlobSize int64 = 512 << 20

//go:embed migrations/*.sql
var migrationFiles embed.FS

// MigrationSet is the store's migrations (migrations/NNNN_name.sql),
// recorded in archive.store_migrations.
var MigrationSet = pgmigrate.Set{Name: "store", Schema: "archive", Table: "store_migrations", Files: mustSub(migrationFiles, "migrations")}

// mustSub is fs.Sub of an embedded directory that exists.
func mustSub(fsys fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(err)
	}
	return sub
}

// Migrate creates or updates the store's table (pgmigrate.Migrate of
// MigrationSet) and returns what it applied as "store/<migration>".
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	applied, err := pgmigrate.Migrate(ctx, pool, MigrationSet)
	if err != nil {
		return applied, fmt.Errorf("pgstore: %w", err)
	}
	return applied, nil
}

// listPage is how many rows one query of List reads.
const listPage = 1000

// defaultConnectTimeout bounds a connection attempt when the URL sets no
// connect_timeout, so an unreachable server is a timely error.
const defaultConnectTimeout = 10 * time.Second

// Errors of pgstore, returned wrapped; test with errors.Is.
var (
	// ErrNotMigrated means the database lacks the table archive.case_bundles
	// (or one of its columns): `pyrula db migrate` was never run against it.
	ErrNotMigrated = errors.New("the fixture store table archive.case_bundles is missing: run `pyrula db migrate` against this database first")
	// ErrTooLarge means Put was given a blob larger than Options.MaxBlobSize
	// (512 MiB by default); nothing is stored.
	ErrTooLarge = errors.New("blob too large for the postgres fixture store")
)

// Options tune Open; zero fields take the defaults.
type Options struct {
	// Now is the clock that stamps UpdatedAt. When nil (production) the
	// database's clock, now(), stamps it. Tests inject a fake clock.
	Now func() time.Time
	// MaxBlobSize bounds the blobs Put accepts, in bytes
	// (DefaultMaxBlobSize, 512 MiB, when zero).
	MaxBlobSize int64
	// MaxConns bounds the pool's connections (pgx's default, or the URL's
	// pool_max_conns, when zero).
	MaxConns int32
}

// Store is a fixture store in a PostgreSQL database. It is safe for
// concurrent use, also by several processes on the same database.
type Store struct {
	pool     *pgxpool.Pool
	identity string
	now      func() time.Time // nil: the database clock
	maxBlob  int64
	password string // of the URL, scrubbed from errors; "" when none

	closed    atomic.Bool
	closeOnce sync.Once
}

// Open connects to the database that rawURL names ("postgres://…" or
// "postgresql://…", a pgx DSN) and checks that it holds the store's table.
// It returns an error wrapping store.ErrInvalidURL for a URL that does not
// name a postgres store, ErrNotMigrated for a database that was never
// migrated, and the connection's error when the server cannot be reached.
// No error shows the URL's password.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: open %s: %w", redact.Secrets(rawURL), err)
	}
	loc, err := store.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("pgstore: open: %w", err)
	}
	if loc.Scheme != store.SchemePostgres {
		return nil, fmt.Errorf("pgstore: open: %w %q: not a postgres:// or postgresql:// URL", store.ErrInvalidURL, redact.Secrets(rawURL))
	}
	s := &Store{identity: loc.Identity, now: opts.Now, maxBlob: opts.MaxBlobSize, password: password(rawURL)}
	if s.maxBlob <= 0 {
		s.maxBlob = DefaultMaxBlobSize
	}
	cfg, err := pgxpool.ParseConfig(strings.TrimSpace(rawURL))
	if err != nil {
		return nil, fmt.Errorf("pgstore: open %s: %w", s.identity, s.scrub(err))
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	if s.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, fmt.Errorf("pgstore: open %s: %w", s.identity, s.scrub(err))
	}
	if err := s.checkSchema(ctx); err != nil {
		s.pool.Close()
		return nil, fmt.Errorf("pgstore: open %s: %w", s.identity, s.scrub(translate(err)))
	}
	return s, nil
}

// checkSchema fails with ErrNotMigrated unless the table and every column
// the store uses exist. It is also the first round trip to the server.
func (s *Store) checkSchema(ctx context.Context) error {
	return s.retry(ctx, func() error {
		_, err := s.pool.Exec(ctx, `SELECT hash, blob, size, created_at, updated_at FROM archive.case_bundles LIMIT 0`)
		return err
	})
}

// password returns the password of a URL, or "" when it has none or does
// not parse.
func password(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.User == nil {
		return ""
	}
	p, _ := u.User.Password()
	return p
}

// scrubbed is an error whose text had the URL's password removed; it still
// unwraps to the original.
type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

// scrub makes sure err's text does not contain the URL's password. pgx
// already leaves passwords out of its messages; this is the belt to its
// braces.
func (s *Store) scrub(err error) error {
	if err == nil || s.password == "" || !strings.Contains(err.Error(), s.password) {
		return err
	}
	return &scrubbed{msg: strings.ReplaceAll(err.Error(), s.password, "xxxxx"), err: err}
}

// translate turns the driver's not-found into store.ErrNotFound and a
// missing table, schema or column into ErrNotMigrated. It is the one place
// pgstore does so.
func translate(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "3F000", "42P01", "42703": // invalid_schema_name, undefined_table, undefined_column
			return fmt.Errorf("%w (%s)", ErrNotMigrated, pgErr.Message)
		}
	}
	return err
}

// wrap adds the operation and the bundle to a translated, scrubbed error,
// and store.ErrClosed when Close ran while the operation did.
func (s *Store) wrap(op string, hash bundle.Hash, err error) error {
	err = s.scrub(translate(err))
	if s.closed.Load() {
		return fmt.Errorf("pgstore: %s: %w: %w", where(op, hash), store.ErrClosed, err)
	}
	return fmt.Errorf("pgstore: %s: %w", where(op, hash), err)
}

// where names an operation and its object in errors: "put 9f2c…".
func where(op string, hash bundle.Hash) string {
	if hash == "" {
		return op
	}
	return op + " " + hash.Short()
}

// check refuses a done context, a closed store and a malformed hash.
func (s *Store) check(ctx context.Context, op string, hash bundle.Hash) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pgstore: %s: %w", where(op, hash), err)
	}
	if s.closed.Load() {
		return fmt.Errorf("pgstore: %s: %w", where(op, hash), store.ErrClosed)
	}
	if _, err := bundle.ParseHash(string(hash)); err != nil {
		return fmt.Errorf("pgstore: %s: %w", op, err)
	}
	return nil
}

// retry runs fn, and once more when it failed because the server ended its
// connection before the statement could run or commit (a restart, an
// administrator's pg_terminate_backend, a connection that died while idle in
// the pool). Before retrying it resets the pool, whose other idle
// connections are most likely gone too, so the retry dials a fresh one.
// Every statement of the store is idempotent and was not applied when such
// an error is returned, so running it again is safe.
func (s *Store) retry(ctx context.Context, fn func() error) error {
	err := fn()
	if err == nil || ctx.Err() != nil || !connectionLost(err) || s.closed.Load() {
		return err
	}
	s.pool.Reset()
	return fn()
}

// connectionLost reports whether err says the statement never ran because
// its connection was gone.
func connectionLost(err error) bool {
	if pgconn.SafeToRetry(err) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03": // admin_shutdown, crash_shutdown, cannot_connect_now
			return true
		}
	}
	return false
}

// stamp returns the UpdatedAt to write: the injected clock's time, or nil
// for the database's now().
func (s *Store) stamp() any {
	if s.now == nil {
		return nil
	}
	return s.now()
}

// Put implements store.Store. A stored bundle only has its updated_at
// refreshed (never moved back), and blob is not read. Otherwise blob is read
// in full (refusing more than Options.MaxBlobSize bytes with ErrTooLarge)
// and inserted with ON CONFLICT DO NOTHING; when a concurrent Put inserted
// it first, this one refreshes it and returns created=false. A failing read
// stores nothing.
func (s *Store) Put(ctx context.Context, hash bundle.Hash, blob io.Reader) (bool, error) {
	if err := s.check(ctx, "put", hash); err != nil {
		return false, err
	}
	var data []byte
	for {
		refreshed, err := s.refresh(ctx, hash)
		if err != nil {
			return false, s.wrap("put", hash, err)
		}
		if refreshed {
			return false, nil
		}
		if data == nil {
			if data, err = s.readBlob(ctx, blob); err != nil {
				return false, fmt.Errorf("pgstore: put %s: %w", hash.Short(), err)
			}
		}
		var tag pgconn.CommandTag
		err = s.retry(ctx, func() (err error) {
			tag, err = s.pool.Exec(ctx, `INSERT INTO archive.case_bundles (hash, blob, size, created_at, updated_at)
VALUES ($1, $2, $3, coalesce($4::timestamptz, now()), coalesce($4::timestamptz, now()))
ON CONFLICT (hash) DO NOTHING`, string(hash), data, int64(len(data)), s.stamp())
			return err
		})
		if err != nil {
			return false, s.wrap("put", hash, err)
		}
		if tag.RowsAffected() == 1 {
			return true, nil
		}
		// Another Put inserted it since the refresh: refresh it now. If it was
		// deleted again in between, the loop inserts it.
	}
}

// refresh stamps a stored bundle's updated_at and reports whether it is stored.
func (s *Store) refresh(ctx context.Context, hash bundle.Hash) (bool, error) {
	var tag pgconn.CommandTag
	err := s.retry(ctx, func() (err error) {
		tag, err = s.pool.Exec(ctx, `UPDATE archive.case_bundles
SET updated_at = greatest(updated_at, coalesce($2::timestamptz, now())) WHERE hash = $1`, string(hash), s.stamp())
		return err
	})
	return tag.RowsAffected() == 1, err
}

// readBlob reads blob in full, watching ctx, up to s.maxBlob bytes.
func (s *Store) readBlob(ctx context.Context, blob io.Reader) ([]byte, error) {
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(store.ContextReader(ctx, blob), s.maxBlob+1))
	if err != nil {
		return nil, fmt.Errorf("read blob: %w", err)
	}
	if n > s.maxBlob {
		return nil, fmt.Errorf("%w: more than %d bytes (%d MiB)", ErrTooLarge, s.maxBlob, s.maxBlob>>20)
	}
	if buf.Len() == 0 {
		return []byte{}, nil // not nil: the loop in Put reads once
	}
	return buf.Bytes(), nil
}

// Open implements store.Store. It reads the whole blob in one query and
// returns a reader over it: a bytea value arrives in one piece.
func (s *Store) Open(ctx context.Context, hash bundle.Hash) (io.ReadCloser, error) {
	if err := s.check(ctx, "open", hash); err != nil {
		return nil, err
	}
	var data []byte
	err := s.retry(ctx, func() error {
		return s.pool.QueryRow(ctx, `SELECT blob FROM archive.case_bundles WHERE hash = $1`, string(hash)).Scan(&data)
	})
	if err != nil {
		return nil, s.wrap("open", hash, err)
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

// Stat implements store.Store.
func (s *Store) Stat(ctx context.Context, hash bundle.Hash) (store.Info, error) {
	if err := s.check(ctx, "stat", hash); err != nil {
		return store.Info{}, err
	}
	info := store.Info{Hash: hash}
	err := s.retry(ctx, func() error {
		return s.pool.QueryRow(ctx, `SELECT size, updated_at FROM archive.case_bundles WHERE hash = $1`, string(hash)).
			Scan(&info.Size, &info.UpdatedAt)
	})
	if err != nil {
		return store.Info{}, s.wrap("stat", hash, err)
	}
	info.UpdatedAt = info.UpdatedAt.UTC()
	return info, nil
}

// List implements store.Store. It reads hash, size and updated_at (never a
// blob) in pages of 1000 rows in hash order, one short query per page, so
// it holds no connection or snapshot while it yields.
func (s *Store) List(ctx context.Context) iter.Seq2[store.Info, error] {
	return func(yield func(store.Info, error) bool) {
		after := ""
		for {
			if err := ctx.Err(); err != nil {
				yield(store.Info{}, fmt.Errorf("pgstore: list: %w", err))
				return
			}
			if s.closed.Load() {
				yield(store.Info{}, fmt.Errorf("pgstore: list: %w", store.ErrClosed))
				return
			}
			var page []store.Info
			err := s.retry(ctx, func() (err error) {
				page, err = s.listPage(ctx, after)
				return err
			})
			if err != nil {
				yield(store.Info{}, s.wrap("list", "", err))
				return
			}
			for _, info := range page {
				if err := ctx.Err(); err != nil {
					yield(store.Info{}, fmt.Errorf("pgstore: list: %w", err))
					return
				}
				if !yield(info, nil) {
					return
				}
			}
			if len(page) < listPage {
				return
			}
			after = string(page[len(page)-1].Hash)
		}
	}
}

// listPage reads the bundles whose hashes follow after, in hash order.
func (s *Store) listPage(ctx context.Context, after string) ([]store.Info, error) {
	rows, err := s.pool.Query(ctx, `SELECT hash, size, updated_at FROM archive.case_bundles
WHERE hash > $1 ORDER BY hash LIMIT $2`, after, listPage)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	page := make([]store.Info, 0, listPage)
	for rows.Next() {
		var h string
		var info store.Info
		if err := rows.Scan(&h, &info.Size, &info.UpdatedAt); err != nil {
			return nil, err
		}
		info.Hash, info.UpdatedAt = bundle.Hash(h), info.UpdatedAt.UTC()
		page = append(page, info)
	}
	return page, rows.Err()
}

// Delete implements store.Store.
func (s *Store) Delete(ctx context.Context, hash bundle.Hash) (bool, error) {
	return s.delete(ctx, "delete", hash, `DELETE FROM archive.case_bundles WHERE hash = $1`)
}

// DeleteBefore implements store.Store with one statement: a concurrent Put
// that refreshes the row first makes the DELETE re-check the new
// updated_at and keep the row; one that comes second finds no row and
// inserts the bundle again.
func (s *Store) DeleteBefore(ctx context.Context, hash bundle.Hash, cutoff time.Time) (bool, error) {
	return s.delete(ctx, "delete", hash, `DELETE FROM archive.case_bundles WHERE hash = $1 AND updated_at < $2`, cutoff)
}

func (s *Store) delete(ctx context.Context, op string, hash bundle.Hash, sql string, args ...any) (bool, error) {
	if err := s.check(ctx, op, hash); err != nil {
		return false, err
	}
	var tag pgconn.CommandTag
	err := s.retry(ctx, func() (err error) {
		tag, err = s.pool.Exec(ctx, sql, append([]any{string(hash)}, args...)...)
		return err
	})
	if err != nil {
		return false, s.wrap(op, hash, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Identity implements store.Store: "postgres://host:port/db", without
// credentials or parameters.
func (s *Store) Identity() string { return s.identity }

// Close implements store.Store: it closes the pool, waiting for connections
// in use to be returned. Later calls of other methods return errors
// wrapping store.ErrClosed.
func (s *Store) Close() error {
	s.closed.Store(true)
	s.closeOnce.Do(s.pool.Close)
	return nil
}
