package pgarchive

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pyrula/caseworker/internal/pgmigrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Schema is the PostgreSQL schema that holds the archive (and, with
// migrations of its own, the Postgres fixture store's bundles).
const Schema = "archive"

// MigrationSet is the archive's migrations (migrations/NNNN_name.sql),
// recorded in archive.schema_migrations.
var MigrationSet = pgmigrate.Set{Name: "archive", Schema: Schema, Table: "schema_migrations", Files: mustSub(migrationFiles, "migrations")}

// mustSub is fs.Sub of an embedded directory that exists.
func mustSub(fsys fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(err)
	}
	return sub
}

// Migrations returns the archive's migrations in version order.
func Migrations() ([]pgmigrate.Migration, error) { return MigrationSet.Migrations() }

// Migrate brings the archive's tables up to date (pgmigrate.Migrate of
// MigrationSet) and returns what it applied as "archive/<migration>".
// `pyrula db migrate` and `worker db migrate` run it with the fixture
// store's migrations (package dbschema).
func Migrate(ctx context.Context, pool *pgxpool.Pool) (applied []string, err error) {
	applied, err = pgmigrate.Migrate(ctx, pool, MigrationSet)
	if err != nil {
		return applied, fmt.Errorf("pgarchive: %w", err)
	}
	return applied, nil
}

// Check returns an error wrapping ErrNotMigrated unless every embedded
// migration has been applied to the database: a readiness check for
// processes that use the archive or the Postgres fixture store.
func Check(ctx context.Context, pool *pgxpool.Pool) error {
	have, want, err := pgmigrate.Applied(ctx, pool, MigrationSet)
	if err != nil {
		return fmt.Errorf("pgarchive: check schema: %w", translate(err))
	}
	if have < want {
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
