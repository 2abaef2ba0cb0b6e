// Package pgmigrate applies a component's embedded SQL migrations to
// PostgreSQL: files NNNN_name.sql, each run once, in version order, in its
// own transaction, recorded in a table of applied versions that belongs to
// that component. Every component that owns tables (the run archive, the
// PostgreSQL fixture store) has its own Set, so that each one's schema
// changes with its own code.
//
// Migrate holds one session advisory lock for all components, so any
// number of processes may migrate at once: one applies, the others wait
// and then find nothing to do.
//
// pgmigrate imports only pgx and the standard library.
package pgmigrate

import (
	"context"
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

// lockKey is the pg_advisory_lock key that serialises migrations: the bytes
// of "pyrulamg".
const lockKey int64 = 0x707972756c616d67

// ErrBehind means a component's migrations are not all applied.
var ErrBehind = errors.New("pgmigrate: migrations not applied")

// Set is one component's migrations.
type Set struct {
	// Name names the component in errors and in Migrate's results
	// ("archive", "store").
	Name string
	// Schema is the PostgreSQL schema the component's tables live in,
	// created when missing.
	Schema string
	// Table is the table of applied versions, in Schema.
	Table string
	// Files holds the migrations, NNNN_name.sql at its root; versions run
	// 1, 2, … without gaps.
	Files fs.FS
}

// Migration is one migration of a Set.
type Migration struct {
	// Version is the file's number.
	Version int
	// Name is the file name without ".sql", e.g. "0001_archive".
	Name string
	// SQL is the file's text, run in one transaction.
	SQL string
}

// table is the schema-qualified table of applied versions.
func (s Set) table() string { return s.Schema + "." + s.Table }

// Migrations returns the set's migrations in version order.
func (s Set) Migrations() ([]Migration, error) {
	names, err := fs.Glob(s.Files, "*.sql")
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, name := range names {
		base := strings.TrimSuffix(path.Base(name), ".sql")
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("pgmigrate: %s: migration file %s is not named NNNN_name.sql", s.Name, name)
		}
		sql, err := fs.ReadFile(s.Files, name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: base, SQL: string(sql)})
	}
	slices.SortFunc(ms, func(a, b Migration) int { return a.Version - b.Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("pgmigrate: %s: migration %s: expected version %d", s.Name, m.Name, i+1)
		}
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("pgmigrate: %s: no migrations", s.Name)
	}
	return ms, nil
}

// Migrate brings every set up to date, in order: for each, it creates the
// schema and the table of applied versions if needed and applies every
// migration not applied yet. It returns what it applied as
// "<set>/<migration>" (none when everything was up to date).
func Migrate(ctx context.Context, pool *pgxpool.Pool, sets ...Set) (applied []string, err error) {
	all := make([][]Migration, len(sets))
	for i, s := range sets {
		if all[i], err = s.Migrations(); err != nil {
			return nil, err
		}
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgmigrate: connect: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		return nil, fmt.Errorf("pgmigrate: take the migration lock: %w", err)
	}
	defer func() {
		// Unlock even when ctx is done; a connection that cannot unlock is
		// closed, which releases the lock with the session.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, uerr := conn.Exec(uctx, "SELECT pg_advisory_unlock($1)", lockKey); uerr != nil {
			_ = conn.Conn().Close(uctx)
			if err == nil {
				err = fmt.Errorf("pgmigrate: release the migration lock: %w", uerr)
			}
		}
	}()
	for i, s := range sets {
		names, err := migrateSet(ctx, conn, s, all[i])
		applied = append(applied, names...)
		if err != nil {
			return applied, err
		}
	}
	return applied, nil
}

// migrateSet applies the migrations of s not applied yet, holding the lock.
func migrateSet(ctx context.Context, conn *pgxpool.Conn, s Set, ms []Migration) (applied []string, err error) {
	if _, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+s.Schema+`;
CREATE TABLE IF NOT EXISTS `+s.table()+` (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
		return nil, fmt.Errorf("pgmigrate: %s: create %s: %w", s.Name, s.table(), err)
	}
	done := map[int]bool{}
	rows, err := conn.Query(ctx, "SELECT version FROM "+s.table())
	if err != nil {
		return nil, fmt.Errorf("pgmigrate: %s: read applied versions: %w", s.Name, err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return nil, fmt.Errorf("pgmigrate: %s: read applied versions: %w", s.Name, err)
		}
		done[v] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgmigrate: %s: read applied versions: %w", s.Name, err)
	}
	for _, m := range ms {
		if done[m.Version] {
			continue
		}
		if err := apply(ctx, conn, s, m); err != nil {
			return applied, err
		}
		applied = append(applied, s.Name+"/"+m.Name)
	}
	return applied, nil
}

// apply runs one migration and records it, in one transaction.
func apply(ctx context.Context, conn *pgxpool.Conn, s Set, m Migration) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgmigrate: %s: migrate %s: %w", s.Name, m.Name, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, m.SQL); err != nil {
		return fmt.Errorf("pgmigrate: %s: migrate %s: %w", s.Name, m.Name, err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+s.table()+" (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
		return fmt.Errorf("pgmigrate: %s: migrate %s: record it: %w", s.Name, m.Name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgmigrate: %s: migrate %s: commit: %w", s.Name, m.Name, err)
	}
	return nil
}

// Applied returns the highest version of s applied to the database, and
// the highest s has. A database without the table of applied versions
// returns the query's error.
func Applied(ctx context.Context, pool *pgxpool.Pool, s Set) (have, want int, err error) {
	ms, err := s.Migrations()
	if err != nil {
		return 0, 0, err
	}
	want = ms[len(ms)-1].Version
	err = pool.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+s.table()).Scan(&have)
	return have, want, err
}
