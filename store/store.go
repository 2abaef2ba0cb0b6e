// Package store owns the fixture store interface that every backend
// implements, its errors, and what is built once on top of any backend:
// verified reads (Get), saves of a canonical bundle (Save), garbage collection
// (GC) and the binding check. Backends live in sub-packages (store/memstore,
// store/filestore, …); store/resolve picks one from a URL.
//
// store imports bundle and messages, nothing else of the project.
package store

import (
	"context"
	"errors"
	"io"
	"iter"
	"time"

	"github.com/pyrula/caseworker/bundle"
)

// ErrNotFound is returned (wrapped) by a backend when a bundle is not stored.
var ErrNotFound = errors.New("bundle not found")

// Info describes one stored bundle.
type Info struct {
	Hash bundle.Hash
	// Size is the size of the stored blob in bytes.
	Size int64
	// UpdatedAt is when the bundle was written or last re-saved; gc never
	// sweeps a bundle updated after the gc started.
	UpdatedAt time.Time
}

// Store is a fixture store: content-addressed zstd blobs named by bundle hash.
// Backends store bytes; verification, saving and gc are built on top (Get,
// Save, GC in this package).
type Store interface {
	// Put stores blob under hash if no bundle of that hash is stored
	// (put-if-absent). It returns created=true when it wrote the bundle;
	// when the bundle was already present it refreshes its UpdatedAt and
	// returns created=false. The write is atomic: no reader ever sees a
	// partial blob, even after a crash. Concurrent Puts of one hash all
	// succeed and leave one copy. The caller guarantees that blob is the
	// zstd blob of the bundle named hash.
	Put(ctx context.Context, hash bundle.Hash, blob io.Reader) (created bool, err error)
	// Open returns the stored blob, unverified (use Get to verify).
	// It returns an error wrapping ErrNotFound when hash is not stored.
	Open(ctx context.Context, hash bundle.Hash) (io.ReadCloser, error)
	// Stat describes one stored bundle, or returns an error wrapping ErrNotFound.
	Stat(ctx context.Context, hash bundle.Hash) (Info, error)
	// List yields every stored bundle, in no particular order. Leftovers of
	// interrupted writes are never listed.
	List(ctx context.Context) iter.Seq2[Info, error]
	// Delete removes a bundle; deleted is false when it was not stored.
	Delete(ctx context.Context, hash bundle.Hash) (deleted bool, err error)
	// DeleteBefore removes a bundle only if its UpdatedAt is before cutoff;
	// deleted is false when it was not stored or is newer.
	DeleteBefore(ctx context.Context, hash bundle.Hash, cutoff time.Time) (deleted bool, err error)
	// Identity is the store's normalised URL without credentials, such as
	// "file:///srv/cases" or "memory:".
	Identity() string
	// Close releases the store's resources.
	Close() error
}
