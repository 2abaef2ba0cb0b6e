// Package dbschema is `db migrate`, wired once for both binaries (`pyrula db
// migrate` and `worker db migrate`): it applies, under one advisory lock,
// the migrations of every component that owns tables in PostgreSQL, each
// recorded apart: the run archive's (journal/pgarchive) and the fixture
// store's (store/pgstore).
//
// dbschema imports journal/pgarchive, store/pgstore and internal/pgmigrate.
package dbschema

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pyrula/caseworker/internal/pgmigrate"
	"github.com/pyrula/caseworker/journal/pgarchive"
	"github.com/pyrula/caseworker/store/pgstore"
)

// EnvDSN is the variable that names the database.
const EnvDSN = "PYRULA_POSTGRES_DSN"

// Sets are the components' migrations, in the order they are applied.
var Sets = []pgmigrate.Set{pgarchive.MigrationSet, pgstore.MigrationSet}

// Migrate applies every component's migrations to the database dsn names
// and returns what it applied as "<component>/<migration>", an empty list
// when everything was up to date. Errors start with "db migrate:" and never
// print the DSN.
func Migrate(ctx context.Context, dsn string) ([]string, error) {
	if dsn == "" {
		return nil, errors.New("db migrate: " + EnvDSN + " is not set")
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("db migrate: %s: %w", EnvDSN, err)
	}
	defer pool.Close()
	applied, err := pgmigrate.Migrate(ctx, pool, Sets...)
	if err != nil {
		return applied, fmt.Errorf("db migrate: %w", err)
	}
	if applied == nil {
		applied = []string{}
	}
	return applied, nil
}
