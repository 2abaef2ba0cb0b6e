// Package store owns the fixture store interface that every backend
// implements, its errors, and what is built once on top of any backend:
// verified reads (Get), saves of a canonical bundle (Save), garbage collection
// (GC), the parsing and normalisation of store URLs (ParseURL; errors show URLs through redact.Secrets) and the
// binding check (CheckBinding). Backends live in sub-packages (store/memstore,
// store/filestore, …); store/resolve picks one from a URL; store/storetest is
// the conformance suite every backend runs.
//
// store imports bundle, messages and internal/redact, nothing else of the project.
package store

import (
	"context"
	"errors"
	"io"
	"iter"
	"time"

	"github.com/pyrula/caseworker/bundle"
)

// Errors of fixture stores. Backends return them wrapped with the operation
// and the hash ("filestore: open 9f2c…: bundle not found"); test with errors.Is.
var (
	// ErrNotFound means no bundle of that hash is stored. Each backend
	// translates its own not-found (os.ErrNotExist, pgx.ErrNoRows, S3
	// NoSuchKey) into it in one function; Get turns it into bundle_missing.
	ErrNotFound = errors.New("bundle not found")
	// ErrClosed is returned by every method of a store after its Close.
	ErrClosed = errors.New("fixture store closed")
	// ErrInvalidURL means a fixture store URL cannot name a store: it does
	// not parse, has an unknown scheme, or carries something it must not
	// (credentials in an s3 URL, a host in a file URL). The error's text
	// never contains a password.
	ErrInvalidURL = errors.New("invalid fixture store URL")
)

// NotFoundError is the error memstore and filestore return for a bundle
// they do not hold: it wraps ErrNotFound and reads as the other wrapped
// errors do ("memstore: stat 9f2c…: bundle not found"). It is one small
// value, formatted only when printed, because a worker looks up many
// bundles that are not stored (every delete_case_bundle of one already
// gone) and prints none of those errors.
type NotFoundError struct {
	// Backend names the store's package ("memstore", "filestore").
	Backend string
	// Op is the operation that looked ("open", "stat").
	Op string
	// Hash is the bundle looked for.
	Hash bundle.Hash
}

// Error returns "<backend>: <op> <short hash>: bundle not found".
func (e *NotFoundError) Error() string {
	return e.Backend + ": " + e.Op + " " + e.Hash.Short() + ": " + ErrNotFound.Error()
}

// Unwrap returns ErrNotFound.
func (e *NotFoundError) Unwrap() error { return ErrNotFound }

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
//
// Every method that takes a hash first checks it: a malformed hash (not 64
// lowercase hex characters) is refused with an error carrying the reason code
// invalid_fixture_hash (see bundle.ParseHash), so that no backend ever builds
// a path or key from outside input. Every method that takes a context returns
// an error wrapping the context's error when it is done, and checks it in its
// loops. After Close every method except Identity and Close returns an error
// wrapping ErrClosed. A Store is safe for concurrent use.
type Store interface {
	// Put stores blob under hash if no bundle of that hash is stored
	// (put-if-absent). It returns created=true when it wrote the bundle;
	// when the bundle was already present it refreshes its UpdatedAt and
	// returns created=false, without necessarily reading blob. The write is
	// atomic: no reader ever sees a partial blob, even after a crash or when
	// reading blob fails (then Put returns that error and stores nothing).
	// Concurrent Puts of one hash all succeed and leave one copy. The caller
	// guarantees that blob is the zstd blob of the bundle named hash; a
	// stored copy is never replaced (delete a corrupt copy, then save again).
	Put(ctx context.Context, hash bundle.Hash, blob io.Reader) (created bool, err error)
	// Open returns the stored blob, unverified (use Get to verify).
	// It returns an error wrapping ErrNotFound when hash is not stored.
	Open(ctx context.Context, hash bundle.Hash) (io.ReadCloser, error)
	// Stat describes one stored bundle, or returns an error wrapping ErrNotFound.
	Stat(ctx context.Context, hash bundle.Hash) (Info, error)
	// List yields every stored bundle, in no particular order. Leftovers of
	// interrupted writes are never listed. Bundles put or deleted while the
	// listing runs may or may not be yielded; the caller may call any method
	// of the store between two yields. An error ends the listing: it is
	// yielded once with a zero Info.
	List(ctx context.Context) iter.Seq2[Info, error]
	// Delete removes a bundle; deleted is false when it was not stored.
	Delete(ctx context.Context, hash bundle.Hash) (deleted bool, err error)
	// DeleteBefore removes a bundle only if its UpdatedAt is before cutoff;
	// deleted is false when it was not stored or is newer. The check and the
	// removal are atomic with respect to Put: a Put that runs concurrently
	// with DeleteBefore(hash, cutoff) and stamps the bundle with an UpdatedAt
	// not before cutoff leaves it stored when it returns. A backend may be
	// more conservative (keep a bundle a little older than cutoff, such as
	// one updated in the same second when its timestamps are coarse) but
	// never less.
	DeleteBefore(ctx context.Context, hash bundle.Hash, cutoff time.Time) (deleted bool, err error)
	// Identity is the store's normalised URL without credentials, such as
	// "file:///srv/cases" or "memory:": what ParseURL returns as the
	// Identity of the URL the store was opened with.
	Identity() string
	// Close releases the store's resources. It is safe to call twice.
	Close() error
}

// Local is implemented by a Store whose calls stay on this machine (a
// directory, memory) and never wait on a network: the worker makes such a
// store's Stat on the goroutine that reads its messages.
type Local interface {
	// Local reports whether the store's calls stay on this machine.
	Local() bool
}

// IsLocal reports whether s says its calls stay on this machine (Local).
func IsLocal(s Store) bool {
	l, ok := s.(Local)
	return ok && l.Local()
}

// ContextReader returns a reader that fails once ctx is done, so that a
// backend copying a long blob stops promptly on cancellation.
func ContextReader(ctx context.Context, r io.Reader) io.Reader { return ctxReader{ctx, r} }

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
