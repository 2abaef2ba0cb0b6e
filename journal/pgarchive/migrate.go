package pgarchive

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Schema is the PostgreSQL schema that holds the archive (and the Postgres
// fixture store's bundles).
const Schema = "archive"

// lockKey is the pg_advisory_lock key that serialises migrations: the bytes
// of "pyrulamg".
const lockKey int64 = 0x707972756c616d67

// Migration is one embedded migration, a file migrations/NNNN_name.sql.
type Migration struct {
	// Version is the file's number; versions run 1, 2, … without gaps.
	Version int
	// Name is the file name without ".sql", e.g. "0001_archive".
	Name string
	// SQL is the file's text, run in one transaction.
	SQL string
}

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, name := range names {
		base := strings.TrimSuffix(path.Base(name), ".sql")
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("pgarchive: migration file %s is not named NNNN_name.sql", name)
		}
		sql, err := migrationFiles.ReadFile(name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: base, SQL: string(sql)})
	}
	slices.SortFunc(ms, func(a, b Migration) int { return a.Version - b.Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("pgarchive: migration %s: expected version %d", m.Name, i+1)
		}
	}
	return ms, nil
}

// Migrate brings schema "archive" up to date: it creates the schema and its
// table of applied versions (archive.schema_migrations) if needed, and
// applies every embedded migration not applied yet, each in its own
// transaction, in version order. It returns the names of the migrations it
// applied (none when the schema was up to date).
//
// It holds a session advisory lock (pg_advisory_lock) on one connection the
// whole time, so any number of processes may run it at once: one applies,
// the others wait and then find nothing to do. It is what `pyrula db migrate`
// and `worker db migrate` run.
func Migrate(ctx context.Context, pool *pgxpool.Pool) (applied []string, err error) {
	ms, err := Migrations()
	if err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgarchive: migrate: connect: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		return nil, fmt.Errorf("pgarchive: migrate: take the migration lock: %w", err)
	}
	defer func() {
		// Unlock even when ctx is done; a connection that cannot unlock is
		// closed, which releases the lock with the session.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, uerr := conn.Exec(uctx, "SELECT pg_advisory_unlock($1)", lockKey); uerr != nil {
			_ = conn.Conn().Close(uctx)
			if err == nil {
				err = fmt.Errorf("pgarchive: migrate: release the migration lock: %w", uerr)
			}
		}
	}()
	if _, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+Schema+`;
CREATE TABLE IF NOT EXISTS `+Schema+`.schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
		return nil, fmt.Errorf("pgarchive: migrate: create schema %s: %w", Schema, err)
	}
	done := map[int]bool{}
	rows, err := conn.Query(ctx, "SELECT version FROM "+Schema+".schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("pgarchive: migrate: read applied versions: %w", err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return nil, fmt.Errorf("pgarchive: migrate: read applied versions: %w", err)
		}
		done[v] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgarchive: migrate: read applied versions: %w", err)
	}
	for _, m := range ms {
		if done[m.Version] {
			continue
		}
		if err := apply(ctx, conn, m); err != nil {
			return applied, err
		}
		applied = append(applied, m.Name)
	}
	return applied, nil
}

// apply runs one migration and records it, in one transaction.
func apply(ctx context.Context, conn *pgxpool.Conn, m Migration) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgarchive: migrate %s: %w", m.Name, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, m.SQL); err != nil {
		return fmt.Errorf("pgarchive: migrate %s: %w", m.Name, err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+Schema+".schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
		return fmt.Errorf("pgarchive: migrate %s: record it: %w", m.Name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgarchive: migrate %s: commit: %w", m.Name, err)
	}
	return nil
}

// Check returns an error wrapping ErrNotMigrated unless every embedded
// migration has been applied to the database: a readiness check for
// processes that use the archive or the Postgres fixture store.
func Check(ctx context.Context, pool *pgxpool.Pool) error {
	ms, err := Migrations()
	if err != nil {
		return err
	}
	var have int
	err = pool.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+Schema+".schema_migrations").Scan(&have)
	if err != nil {
		return fmt.Errorf("pgarchive: check schema: %w", translate(err))
	}
	if want := ms[len(ms)-1].Version; have < want {
		return fmt.Errorf("pgarchive: schema %s is at version %d, this version needs %d: %w", Schema, have, want, ErrNotMigrated)
	}
	return nil
}

// errNotMigratedText is the message of ErrNotMigrated: it tells the user what
// to run.
const errNotMigratedText = "the archive schema is missing or out of date: run `pyrula db migrate` (or `worker db migrate`) against this database first"

// ErrNotMigrated means the database lacks the archive schema or a migration
// of it: run `pyrula db migrate`.
var ErrNotMigrated = errors.New(errNotMigratedText)
