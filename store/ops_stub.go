package store

import (
	"context"
	"io"
	"time"

	"github.com/pyrula/caseworker/bundle"
)

// TODO(store helper): implement. Signatures are the contract the CLI codes against.

// Get opens a stored bundle and verifies it as it is read (see
// bundle.NewVerifyingReader): bundle_missing when hash is not stored,
// bundle_corrupt when the bytes do not decompress or hash to hash.
func Get(ctx context.Context, s Store, hash bundle.Hash) (io.ReadCloser, error) { panic("TODO") }

// Save writes a canonical bundle's blob to s (put-if-absent).
func Save(ctx context.Context, s Store, c *bundle.Canonical) (created bool, err error) { panic("TODO") }

// GCParams selects what GC sweeps.
type GCParams struct {
	// Keep lists hashes never swept.
	Keep map[bundle.Hash]bool
	// Sweep deletes candidates; without it GC only lists them (--yes).
	Sweep bool
	// Now is the clock (time.Now when nil); GC's start time is Now() when it begins.
	Now func() time.Time
}

// GCItem reports one bundle that gc considered.
type GCItem struct {
	Info Info
	// Action is "candidate" (listed only), "deleted", or "skipped_new"
	// (updated after gc started, never swept).
	Action string
}

// GC lists (and with Sweep, deletes) every stored bundle not in Keep and not
// updated after GC started, calling report for each.
func GC(ctx context.Context, s Store, p GCParams, report func(GCItem) error) error { panic("TODO") }

// CheckBinding returns a binding_mismatch error when expected (an identity
// or any URL naming a store) is not empty and does not name s.
func CheckBinding(s Store, expected string) error { panic("TODO") }
