package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/internal/redact"
	"github.com/pyrula/caseworker/messages"
)

// Get opens a stored bundle and verifies it as it is read (see
// bundle.NewVerifyingReader): the reader returns the canonical bytes and, at
// the end, io.EOF only when they hash to hash. Read it to the end before
// trusting anything it returned.
//
// Errors carry reason codes: invalid_fixture_hash for a malformed hash;
// bundle_missing when hash is not stored (the error also wraps ErrNotFound);
// bundle_corrupt, from Read, when the bytes do not decompress or do not hash
// to hash (that *messages.Error is returned as is). Other read errors are
// wrapped with the hash; once ctx is done, Read returns its error.
func Get(ctx context.Context, s Store, hash bundle.Hash) (io.ReadCloser, error) {
	if _, err := bundle.ParseHash(string(hash)); err != nil {
		return nil, err
	}
	blob, err := s.Open(ctx, hash)
	if errors.Is(err, ErrNotFound) {
		return nil, &messages.Error{
			Code:    messages.BundleMissing,
			Message: fmt.Sprintf("bundle %s is not in fixture store %s", hash, s.Identity()),
			Err:     err,
		}
	}
	if err != nil {
		return nil, fmt.Errorf("store: get %s: %w", hash.Short(), err)
	}
	// The verifying reader gets the blob without its Close, so that closing
	// is done once, here.
	v := bundle.NewVerifyingReader(struct{ io.Reader }{blob}, hash)
	return &verifiedReader{ctx: ctx, hash: hash, r: v, blob: blob}, nil
}

// Load reads the bundle named hash from s, verified, and returns it in
// canonical form: Get read to the end by bundle.Read. It is the one way
// the CLI and the worker read a stored bundle.
//
// Errors carry Get's reason codes: invalid_fixture_hash, bundle_missing,
// and bundle_corrupt when the bytes do not decompress, do not hash to
// hash, or are not a bundle that reads back as hash. A verification
// failure wins over any other error that reading the damaged bytes
// caused, so damaged bytes are always reported as bundle_corrupt. Every
// error is wrapped with the hash.
func Load(ctx context.Context, s Store, hash bundle.Hash) (*bundle.Canonical, error) {
	return LoadWith(ctx, s, hash, bundle.Options{})
}

// LoadWith is Load reading with opts: bundle.Options.Decode for a bundle
// about to be decoded (a case run, a diff).
func LoadWith(ctx context.Context, s Store, hash bundle.Hash, opts bundle.Options) (*bundle.Canonical, error) {
	rc, err := Get(ctx, s, hash)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", hash, err)
	}
	c, readErr := bundle.Read(rc, opts)
	// Verification ends at the end of the stream: read it to the end even
	// when Read stopped early, and let its verdict win.
	_, drainErr := io.Copy(io.Discard, rc)
	closeErr := rc.Close()
	if err := cmp.Or(drainErr, closeErr); err != nil {
		return nil, fmt.Errorf("read %s: %w", hash, err)
	}
	if readErr != nil {
		return nil, fmt.Errorf("read %s: %w", hash, readErr)
	}
	if c.Hash() != hash {
		return nil, fmt.Errorf("read %s: %w", hash, messages.Errorf(messages.BundleCorrupt,
			"stored bundle %s reads back as %s", hash, c.Hash()))
	}
	return c, nil
}

// verifiedReader is what Get returns.
type verifiedReader struct {
	ctx  context.Context
	hash bundle.Hash
	r    io.ReadCloser // the verifying reader
	blob io.Closer     // the backend's blob
}

func (v *verifiedReader) Read(p []byte) (int, error) {
	if err := v.ctx.Err(); err != nil {
		return 0, fmt.Errorf("store: read %s: %w", v.hash.Short(), err)
	}
	n, err := v.r.Read(p)
	if err != nil && err != io.EOF && messages.AsError(err) == nil {
		err = fmt.Errorf("store: read %s: %w", v.hash.Short(), err)
	}
	return n, err
}

func (v *verifiedReader) Close() error {
	err := errors.Join(v.r.Close(), v.blob.Close())
	if err != nil {
		return fmt.Errorf("store: close %s: %w", v.hash.Short(), err)
	}
	return nil
}

// Save writes a canonical bundle's blob to s (put-if-absent, see Store.Put):
// created is false when the bundle was already stored, whose UpdatedAt is
// then refreshed so that a gc running now does not sweep it.
func Save(ctx context.Context, s Store, c *bundle.Canonical) (created bool, err error) {
	blob := c.Blob()
	defer blob.Close()
	created, err = s.Put(ctx, c.Hash(), blob)
	if err != nil {
		return false, fmt.Errorf("store: save %s: %w", c.Hash().Short(), err)
	}
	return created, nil
}

// Actions of a GCItem.
const (
	// ActionCandidate: GC would delete the bundle; it ran without Sweep.
	ActionCandidate = "candidate"
	// ActionDeleted: GC deleted the bundle.
	ActionDeleted = "deleted"
	// ActionKept: the bundle is in the keep list.
	ActionKept = "kept"
	// ActionSkippedNew: the bundle was updated at or after GC's start (saved
	// or re-saved since), so it is never swept.
	ActionSkippedNew = "skipped_new"
)

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
	// Action is ActionCandidate ("candidate", listed only), ActionDeleted
	// ("deleted"), ActionKept ("kept") or ActionSkippedNew ("skipped_new":
	// updated at or after gc's start, never swept).
	Action string
}

// GC lists (and with Sweep, deletes) every stored bundle not in Keep and not
// updated at or after GC's start, calling report once for each stored bundle,
// in List's order, with what it did. Without Keep every bundle is a
// candidate; hashes in Keep that are not stored are ignored.
//
// GC's start is its clock's time truncated to the second, so a bundle saved in
// the same second as GC started is new, with or without Sweep.
// Deletion uses DeleteBefore(hash, start), so a bundle saved again while GC
// runs is never swept: it is reported as ActionSkippedNew. A bundle that
// another process deleted while GC ran is not reported. report may call
// methods of s (it runs between two steps of the listing); an error from
// report stops GC and is returned as is. GC checks ctx before each bundle and
// returns an error wrapping ctx's error once it is done. A nil report is
// allowed.
func GC(ctx context.Context, s Store, p GCParams, report func(GCItem) error) error {
	now := p.Now
	if now == nil {
		now = time.Now
	}
	if report == nil {
		report = func(GCItem) error { return nil }
	}
	// Whole seconds: some file systems keep coarse times, and the dry run
	// must list exactly what a sweep at the same moment would delete.
	start := now().Truncate(time.Second)
	for info, err := range s.List(ctx) {
		if err != nil {
			return fmt.Errorf("store: gc: list: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("store: gc: %w", err)
		}
		item := GCItem{Info: info}
		switch {
		case p.Keep[info.Hash]:
			item.Action = ActionKept
		case !info.UpdatedAt.Before(start):
			item.Action = ActionSkippedNew
		case !p.Sweep:
			item.Action = ActionCandidate
		default:
			deleted, err := s.DeleteBefore(ctx, info.Hash, start)
			if err != nil {
				return fmt.Errorf("store: gc: delete %s: %w", info.Hash.Short(), err)
			}
			if deleted {
				item.Action = ActionDeleted
				break
			}
			// Re-saved since it was listed, or deleted by someone else.
			fresh, err := s.Stat(ctx, info.Hash)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("store: gc: stat %s: %w", info.Hash.Short(), err)
			}
			item.Info, item.Action = fresh, ActionSkippedNew
		}
		if err := report(item); err != nil {
			return err
		}
	}
	return nil
}

// CheckBinding returns a binding_mismatch error when expected (an identity
// or any URL naming a store, such as a message's fixture_store) is not empty
// and does not name s: both are normalised with ParseURL and their
// identities compared. An expected value that is not a valid store URL is a
// binding_mismatch too (it names no store, so not s). Every memory store has
// the identity "memory:", so "memory:" binds to any of them. The message
// shows identities only, never credentials.
func CheckBinding(s Store, expected string) error {
	if strings.TrimSpace(expected) == "" {
		return nil
	}
	got := s.Identity()
	if loc, err := ParseURL(got); err == nil {
		got = loc.Identity
	}
	want, err := ParseURL(expected)
	if err != nil {
		return &messages.Error{
			Code:    messages.BindingMismatch,
			Message: fmt.Sprintf("expected fixture store %q is not a store URL; the opened store is %s", redact.Secrets(expected), got),
			Err:     err,
		}
	}
	if want.Identity != got {
		return messages.Errorf(messages.BindingMismatch,
			"expected fixture store %s, but the opened store is %s", want.Identity, got)
	}
	return nil
}
