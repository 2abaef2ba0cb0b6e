package dbschema_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pyrula/caseworker/internal/dbschema"
	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/journal/pgarchive"
	"github.com/pyrula/caseworker/store/pgstore"
)

func connect(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// applied reads a component's table of applied versions.
func applied(t *testing.T, p *pgxpool.Pool, table string) []string {
	t.Helper()
	rows, err := p.Query(context.Background(), "SELECT name FROM "+table+" ORDER BY version")
	if err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// On an empty database, db migrate applies the archive's migrations and
// the fixture store's, each recorded in its own table; the archive and the
// store both open on it; a second run applies nothing.
func TestMigrateEveryComponent(t *testing.T) {
	t.Parallel()
	dsn := testenv.FreshPostgresDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := dbschema.Migrate(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"archive/0001_archive", "archive/0002_case_bundles_external", "archive/0003_runs_by_target", "store/0001_case_bundles"}
	if !slices.Equal(got, want) {
		t.Fatalf("applied %v, want %v", got, want)
	}
	p := connect(t, dsn)
	if names := applied(t, p, "archive.schema_migrations"); !slices.Equal(names, []string{"0001_archive", "0002_case_bundles_external", "0003_runs_by_target"}) {
		t.Errorf("archive.schema_migrations holds %v", names)
	}
	if names := applied(t, p, "archive.store_migrations"); !slices.Equal(names, []string{"0001_case_bundles"}) {
		t.Errorf("archive.store_migrations holds %v", names)
	}
	if err := pgarchive.Check(ctx, p); err != nil {
		t.Errorf("the archive after db migrate: %v", err)
	}
	st, err := pgstore.Open(ctx, dsn, pgstore.Options{})
	if err != nil {
		t.Fatalf("the store after db migrate: %v", err)
	}
	st.Close()
	var storage string
	if err := p.QueryRow(ctx, `SELECT attstorage::text FROM pg_attribute WHERE attrelid = 'archive.case_bundles'::regclass AND attname = 'blob'`).Scan(&storage); err != nil || storage != "e" {
		t.Errorf("case_bundles.blob storage %q (%v), want external (e)", storage, err)
	}
	again, err := dbschema.Migrate(ctx, dsn)
	if err != nil || again == nil || len(again) != 0 {
		t.Errorf("a second db migrate applied %v, %v; want an empty list", again, err)
	}
}

// A database whose archive was migrated when the archive's first migration
// still created the store's table: the store's own migration finds the
// table there and records itself, and the bundles in it stay.
func TestMigrateDatabaseOfEarlierVersions(t *testing.T) {
	t.Parallel()
	dsn := testenv.FreshPostgresDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := connect(t, dsn)
	if _, err := pgarchive.Migrate(ctx, p); err != nil {
		t.Fatal(err)
	}
	// What the earlier first migration created besides the archive.
	hash := strings.Repeat("ab", 32)
	for _, q := range []string{
		`CREATE TABLE archive.case_bundles (hash text PRIMARY KEY CHECK (hash ~ '^[0-9a-f]{64}$'), blob bytea NOT NULL,
			size bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now())`,
		`CREATE INDEX case_bundles_updated_at ON archive.case_bundles (updated_at)`,
		`INSERT INTO archive.case_bundles (hash, blob, size) VALUES ('` + hash + `', '\x00', 1)`,
	} {
		if _, err := p.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	got, err := dbschema.Migrate(ctx, dsn)
	if err != nil || !slices.Equal(got, []string{"store/0001_case_bundles"}) {
		t.Fatalf("applied %v, %v; want only the store's migration", got, err)
	}
	var n int
	if err := p.QueryRow(ctx, "SELECT count(*) FROM archive.case_bundles WHERE hash = $1", hash).Scan(&n); err != nil || n != 1 {
		t.Errorf("the bundle stored before: %d rows, %v", n, err)
	}
}

// Without a DSN, db migrate says which variable to set.
func TestMigrateWithoutDSN(t *testing.T) {
	t.Parallel()
	if _, err := dbschema.Migrate(context.Background(), ""); err == nil || err.Error() != "db migrate: PYRULA_POSTGRES_DSN is not set" {
		t.Errorf("err = %v", err)
	}
}
