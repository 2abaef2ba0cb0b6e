// Package resolve picks a fixture store backend from a URL, in one place, and
// owns the resolution order of docs/stores.md: --fixture-store, then
// PYRULA_FIXTURE_STORE, then PYRULA_POSTGRES_DSN, else no_fixture_store.
//
// URLs are parsed and normalised by store.ParseURL; this package only maps
// a parsed scheme to a backend. It imports store and its backend packages.
package resolve

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/filestore"
	"github.com/pyrula/caseworker/store/memstore"
	"github.com/pyrula/caseworker/store/pgstore"
	"github.com/pyrula/caseworker/store/s3store"
)

// Environment variables read by URL, in order after the flag.
const (
	EnvFixtureStore = "PYRULA_FIXTURE_STORE"
	EnvPostgresDSN  = "PYRULA_POSTGRES_DSN"
)

// Errors of resolve.
var (
	// ErrNotBuilt means the URL names a backend that this binary does not
	// have. The URL itself was valid.
	ErrNotBuilt = errors.New("fixture store backend not built into this version")
)

// URL returns the store URL to use: flag when not empty, else
// getenv("PYRULA_FIXTURE_STORE"), else getenv("PYRULA_POSTGRES_DSN"); a
// no_fixture_store *messages.Error, saying how to set one, when none is set.
// Values are trimmed of surrounding white space; a blank value counts as
// unset. A PYRULA_POSTGRES_DSN that is not a postgres:// or postgresql://
// URL (such as a keyword/value DSN) is refused with an error wrapping
// store.ErrInvalidURL that does not show its value.
func URL(flag string, getenv func(string) string) (string, error) {
	if v := strings.TrimSpace(flag); v != "" {
		return v, nil
	}
	if v := strings.TrimSpace(getenv(EnvFixtureStore)); v != "" {
		return v, nil
	}
	if v := strings.TrimSpace(getenv(EnvPostgresDSN)); v != "" {
		if loc, err := store.ParseURL(v); err != nil || loc.Scheme != store.SchemePostgres {
			return "", fmt.Errorf("%w: %s is used as the fixture store but is not a postgres:// URL; set %s or --fixture-store to choose a store",
				store.ErrInvalidURL, EnvPostgresDSN, EnvFixtureStore)
		}
		return v, nil
	}
	return "", messages.Errorf(messages.NoFixtureStore,
		"no fixture store configured: pass --fixture-store URL, or set %s (memory:, file:///abs/path or a directory, postgres://…, s3://bucket/prefix) or %s",
		EnvFixtureStore, EnvPostgresDSN)
}

// Open opens the store a URL names: "memory:" (a new, empty memory store),
// "file:///abs" or a bare path (relative paths are made absolute; the
// directory is created if missing), "postgres://…" and "postgresql://…"
// (store/pgstore: the archive.case_bundles table; run `pyrula db migrate`
// first), "s3://bucket/prefix?region=…&endpoint_url=…" (store/s3store;
// credentials from the AWS SDK chain only). An invalid URL gives an error wrapping
// store.ErrInvalidURL. Errors never contain a password.
func Open(ctx context.Context, rawURL string) (store.Store, error) {
	loc, err := store.ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	switch loc.Scheme {
	case store.SchemeMemory:
		return memstore.New(memstore.Options{}), nil
	case store.SchemeFile:
		s, err := filestore.Open(ctx, loc.Dir, filestore.Options{})
		if err != nil {
			return nil, fmt.Errorf("resolve: open fixture store %s: %w", loc.Identity, err)
		}
		return s, nil
	case store.SchemePostgres:
		s, err := pgstore.Open(ctx, rawURL, pgstore.Options{})
		if err != nil {
			return nil, fmt.Errorf("resolve: open fixture store %s: %w", loc.Identity, err)
		}
		return s, nil
	case store.SchemeS3:
		s, err := s3store.Open(ctx, rawURL, s3store.Options{})
		if err != nil {
			return nil, fmt.Errorf("resolve: open fixture store %s: %w", loc.Identity, err)
		}
		return s, nil
	default:
		// ParseURL returns no other scheme.
		return nil, fmt.Errorf("fixture store %s: %w", loc.Identity, ErrNotBuilt)
	}
}

// Identity returns the normalised URL of a store URL, without credentials
// (see store.Location.Identity): "memory:", "file:///abs/dir",
// "postgres://host:port/db", "s3://bucket/prefix". It is what the store
// opened from rawURL returns from Identity.
func Identity(rawURL string) (string, error) {
	loc, err := store.ParseURL(rawURL)
	if err != nil {
		return "", err
	}
	return loc.Identity, nil
}
