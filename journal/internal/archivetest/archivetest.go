// Package archivetest gives the journal's tests a real PostgreSQL archive:
// a pool on the test database (internal/testenv), migrated once per process,
// and an Archive whose rows of one namespace are deleted when the test ends.
//
// archivetest imports journal, journal/pgarchive and internal/testenv; only
// tests import it.
package archivetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/pgarchive"
)

var (
	migrateOnce sync.Once
	migrateErr  error
)

// Pool returns a pool on the test database, closed when t ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	dsn := testenv.PostgresDSN(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// New returns the archive in the migrated test database; the archived runs
// of namespace are deleted when t ends.
func New(t testing.TB, namespace string) journal.Archive {
	t.Helper()
	pool := Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	migrateOnce.Do(func() { _, migrateErr = pgarchive.Migrate(ctx, pool) })
	if migrateErr != nil {
		t.Fatalf("migrate the test database: %v", migrateErr)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DELETE FROM archive.runs WHERE namespace = $1", namespace); err != nil {
			t.Errorf("delete the archived runs of %s: %v", namespace, err)
		}
	})
	return pgarchive.New(pool)
}
