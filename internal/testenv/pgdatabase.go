package testenv

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// FreshPostgresDatabase creates an empty database on the server of
// PYRULA_TEST_POSTGRES_DSN (skipping the test without it, or when the role
// cannot create databases), dropped when t ends, and returns its DSN.
func FreshPostgresDatabase(t testing.TB) string {
	t.Helper()
	dsn := PostgresDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("testenv: connect to PostgreSQL: %v", err)
	}
	defer admin.Close(ctx)
	name := strings.ReplaceAll(UniqueName(t, "pyrula_fresh"), "-", "_")
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Skipf("testenv: the test role cannot create a database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("testenv: drop %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("testenv: drop %s: %v", name, err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("testenv: parse %s: %v", EnvPostgresDSN, err)
	}
	u.Path = "/" + name
	return u.String()
}
