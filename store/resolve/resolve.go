// Package resolve picks a fixture store backend from a URL, in one place, and
// owns the resolution order of DESIGN.md §5: --fixture-store, then
// PYRULA_FIXTURE_STORE, then PYRULA_POSTGRES_DSN, else no_fixture_store.
package resolve

import (
	"context"

	"github.com/pyrula/caseworker/store"
)

// TODO(store helper): implement.

// URL returns the store URL to use: flag when not empty, else
// getenv("PYRULA_FIXTURE_STORE"), else getenv("PYRULA_POSTGRES_DSN"); a
// no_fixture_store error when none is set.
func URL(flag string, getenv func(string) string) (string, error) { panic("TODO") }

// Open opens the store a URL names: "memory:", "file:///abs", a bare path,
// "postgres://…", "postgresql://…", "s3://bucket/prefix?…".
func Open(ctx context.Context, rawURL string) (store.Store, error) { panic("TODO") }

// Identity returns the normalised URL of a store URL, without credentials.
func Identity(rawURL string) (string, error) { panic("TODO") }
