// Package filestore is the fixture store in a local directory ("file:///abs"
// or a bare path). Each bundle is one file holding its zstd blob:
//
//	<dir>/<h[0:2]>/<hash>.case
//
// Writes are atomic and durable: a blob is written to a temp file in its
// shard directory (named ".tmp-…"), fsynced, hard-linked to its final name
// (which fails if the name exists, making put-if-absent atomic across
// processes), and the directory is fsynced. (A rename would replace an
// existing bundle; a link never does.) A crash leaves at most a hidden file
// (".tmp-…" from Put, ".del-…" from DeleteBefore), which is never listed or
// read, and is not cleaned up automatically. UpdatedAt is the file's
// modification time, which Put sets explicitly (from the injected clock)
// when it creates or refreshes a bundle.
//
// filestore imports store and bundle, nothing else of the project.
package filestore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/store"
)

var _ store.Store = (*Store)(nil)

// Permissions of what the store creates (before the umask). Bundles hold
// unredacted run data, so nothing is readable by others.
const (
	dirPerm  fs.FileMode = 0o750
	filePerm fs.FileMode = 0o640
)

// Name parts of the files in a shard directory.
const (
	suffix    = ".case" // a bundle: <hash>.case
	tmpPrefix = ".tmp-" // a blob being written by Put
	delPrefix = ".del-" // a bundle being removed by DeleteBefore
)

// Options tune Open; zero fields take the defaults.
type Options struct {
	// Now is the clock that stamps UpdatedAt (time.Now when nil). Tests
	// inject a fake clock.
	Now func() time.Time
}

// Store is a fixture store in a directory. It is safe for concurrent use,
// also by several processes on the same directory.
type Store struct {
	dir      string
	identity string
	now      func() time.Time
	closed   atomic.Bool

	// syncDir fsyncs a directory; tests replace it to see that it is called.
	syncDir func(dir string) error
	// Test hooks, nil outside tests.
	afterLink    func(final string)          // Put: after linking, before stamping
	tempWriter   func(f io.Writer) io.Writer // Put: what the blob is copied through into the temp file
	afterChtimes func(final string)          // Put: after setting a time, before checking it
	beforeRename func(final string)          // DeleteBefore: after the first check
}

// Open opens the fixture store in dir, creating the directory (and its
// parents) if missing. A relative dir is made absolute against the working
// directory. It is an error when dir exists and is not a directory.
func Open(ctx context.Context, dir string, opts Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("filestore: open %s: %w", dir, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("filestore: open %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, dirPerm); err != nil {
		return nil, fmt.Errorf("filestore: open %s: %w", abs, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("filestore: open %s: %w", abs, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("filestore: open %s: not a directory", abs)
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return &Store{
		dir:      abs,
		identity: store.FileIdentity(abs),
		now:      now,
		syncDir:  syncDir,
	}, nil
}

// Dir returns the store's absolute directory.
func (s *Store) Dir() string { return s.dir }

// pathOf returns the file that holds (or would hold) the bundle hash; hash
// must be valid.
func (s *Store) pathOf(hash bundle.Hash) string {
	return filepath.Join(s.dir, string(hash[:2]), string(hash)+suffix)
}

// translate turns the file system's not-found into store.ErrNotFound. It is
// the one place filestore does so.
func translate(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return store.ErrNotFound
	}
	return err
}

// fail returns the error of op on hash for the file system's err: a
// *store.NotFoundError for a missing file, else err wrapped.
func fail(op string, hash bundle.Hash, err error) error {
	if err = translate(err); err == store.ErrNotFound {
		return &store.NotFoundError{Backend: "filestore", Op: op, Hash: hash}
	}
	return wrap(op, hash, err)
}

func wrap(op string, hash bundle.Hash, err error) error {
	return fmt.Errorf("filestore: %s %s: %w", op, hash.Short(), err)
}

// check refuses a done context, a closed store and a malformed hash.
func (s *Store) check(ctx context.Context, op string, hash bundle.Hash) error {
	if err := ctx.Err(); err != nil {
		return wrap(op, hash, err)
	}
	if s.closed.Load() {
		return wrap(op, hash, store.ErrClosed)
	}
	if _, err := bundle.ParseHash(string(hash)); err != nil {
		return fmt.Errorf("filestore: %s: %w", op, err)
	}
	return nil
}

// stamp sets the modification time (UpdatedAt) of the bundle file final to
// now, and returns store.ErrNotFound when there is no such file.
//
// Setting a time looks the name up and then changes the file it found, so a
// DeleteBefore may rename and remove that file in between: the new time then
// lands on a removed file. stamp therefore checks afterwards that the file
// now at final carries a time at least as new (to the second, for file
// systems with coarse times), and stamps again when it does not. Once stamp
// returns nil, any DeleteBefore that renames final later sees the new time.
func (s *Store) stamp(ctx context.Context, final string) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		t := s.now()
		if err := os.Chtimes(final, t, t); err != nil {
			return translate(err)
		}
		if s.afterChtimes != nil {
			s.afterChtimes(final)
		}
		fi, err := os.Stat(final)
		if err != nil {
			return translate(err)
		}
		if !fi.ModTime().Before(t.Truncate(time.Second)) {
			return nil
		}
	}
}

// Put implements store.Store. When the bundle exists it only refreshes its
// modification time and does not read blob. Otherwise it writes blob to a
// temp file in the shard directory, fsyncs it, links it to the final name
// (an existing name means another Put won: the bundle is refreshed and
// created is false), removes the temp file and fsyncs the directory.
func (s *Store) Put(ctx context.Context, hash bundle.Hash, blob io.Reader) (bool, error) {
	if err := s.check(ctx, "put", hash); err != nil {
		return false, err
	}
	final := s.pathOf(hash)
	switch err := s.stamp(ctx, final); {
	case err == nil:
		return false, nil
	case !errors.Is(err, store.ErrNotFound):
		return false, wrap("put", hash, err)
	}

	shard := filepath.Dir(final)
	if err := s.ensureShard(shard); err != nil {
		return false, wrap("put", hash, s.noSpace(err))
	}
	tmp, err := writeTemp(ctx, shard, hash, blob, s.tempWriter)
	if err != nil {
		return false, wrap("put", hash, s.noSpace(err))
	}
	created, err := s.publish(ctx, tmp, final)
	// The temp file is hidden whatever happens; failing to remove it only
	// costs disk space, so it does not fail a Put that succeeded.
	_ = os.Remove(tmp)
	if err != nil {
		return false, wrap("put", hash, s.noSpace(err))
	}
	if err := s.syncDir(shard); err != nil {
		return false, wrap("put", hash, fmt.Errorf("sync directory: %w", err))
	}
	return created, nil
}

// noSpace names a full file system (ENOSPC) or an exhausted quota
// (EDQUOT) in err, which it still wraps: the write failed and left nothing
// behind, and the next Put after space is freed succeeds.
func (s *Store) noSpace(err error) error {
	switch {
	case errors.Is(err, syscall.ENOSPC):
		return fmt.Errorf("no space left on the file system of %s (ENOSPC): %w", s.dir, err)
	case errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("disk quota exceeded on the file system of %s (EDQUOT): %w", s.dir, err)
	}
	return err
}

// publish links the written temp file to the final name and stamps the
// final file. Stamping after the link, rather than when the temp file is
// written, gives the visible bundle a time after any gc that could see it
// started; if that gc swept it between the link and the stamp, the stamp
// finds no file and publish links it again.
func (s *Store) publish(ctx context.Context, tmp, final string) (created bool, err error) {
	for {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		err := os.Link(tmp, final)
		switch {
		case err == nil:
			created = true
		case errors.Is(err, fs.ErrExist):
			created = false
		default:
			return false, err
		}
		if s.afterLink != nil {
			s.afterLink(final)
		}
		err = s.stamp(ctx, final)
		if err == nil {
			return created, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return false, err
		}
	}
}

// ensureShard creates a shard directory if missing, and then fsyncs the
// store's directory so that the new entry is durable.
func (s *Store) ensureShard(shard string) error {
	err := os.Mkdir(shard, dirPerm)
	switch {
	case err == nil:
		if err := s.syncDir(s.dir); err != nil {
			return fmt.Errorf("sync directory: %w", err)
		}
		return nil
	case errors.Is(err, fs.ErrExist):
		return nil
	default:
		return err
	}
}

// writeTemp writes blob to a new temp file in shard (through through, when
// set: a test hook) and fsyncs it. On error it removes the file.
func writeTemp(ctx context.Context, shard string, hash bundle.Hash, blob io.Reader, through func(io.Writer) io.Writer) (string, error) {
	name := filepath.Join(shard, tmpPrefix+hash.Short()+"-"+rand.Text())
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, filePerm)
	if err != nil {
		return "", err
	}
	var w io.Writer = f
	if through != nil {
		w = through(f)
	}
	_, err = io.Copy(w, store.ContextReader(ctx, blob))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(name)
		return "", fmt.Errorf("write blob: %w", err)
	}
	return name, nil
}

// Open implements store.Store. The context is checked when opening only.
func (s *Store) Open(ctx context.Context, hash bundle.Hash) (io.ReadCloser, error) {
	if err := s.check(ctx, "open", hash); err != nil {
		return nil, err
	}
	f, err := os.Open(s.pathOf(hash))
	if err != nil {
		return nil, fail("open", hash, err)
	}
	return f, nil
}

// Stat implements store.Store.
func (s *Store) Stat(ctx context.Context, hash bundle.Hash) (store.Info, error) {
	if err := s.check(ctx, "stat", hash); err != nil {
		return store.Info{}, err
	}
	fi, err := os.Stat(s.pathOf(hash))
	if err != nil {
		return store.Info{}, fail("stat", hash, err)
	}
	return info(hash, fi), nil
}

func info(hash bundle.Hash, fi fs.FileInfo) store.Info {
	return store.Info{Hash: hash, Size: fi.Size(), UpdatedAt: fi.ModTime().UTC()}
}

// List implements store.Store. It walks the shard directories (two lowercase
// hex characters) and yields only regular files named exactly
// "<64 lowercase hex>.case" in the shard of their hash; temp files and
// anything else in the directory are ignored. Files that disappear while it
// walks are skipped.
func (s *Store) List(ctx context.Context) iter.Seq2[store.Info, error] {
	return func(yield func(store.Info, error) bool) {
		fail := func(err error) { yield(store.Info{}, fmt.Errorf("filestore: list: %w", err)) }
		if err := ctx.Err(); err != nil {
			fail(err)
			return
		}
		if s.closed.Load() {
			fail(store.ErrClosed)
			return
		}
		shards, err := os.ReadDir(s.dir)
		if err != nil {
			fail(err)
			return
		}
		for _, sh := range shards {
			if !sh.IsDir() || !isShard(sh.Name()) {
				continue
			}
			if err := ctx.Err(); err != nil {
				fail(err)
				return
			}
			entries, err := os.ReadDir(filepath.Join(s.dir, sh.Name()))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				fail(err)
				return
			}
			for _, e := range entries {
				hash, ok := hashOfName(e.Name())
				if !ok || string(hash[:2]) != sh.Name() {
					continue
				}
				if err := ctx.Err(); err != nil {
					fail(err)
					return
				}
				fi, err := e.Info()
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				if err != nil {
					fail(err)
					return
				}
				if !fi.Mode().IsRegular() {
					continue
				}
				if !yield(info(hash, fi), nil) {
					return
				}
			}
		}
	}
}

// isShard reports whether name is two lowercase hex characters.
func isShard(name string) bool {
	return len(name) == 2 && isLowerHex(name[0]) && isLowerHex(name[1])
}

func isLowerHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }

// hashOfName returns the hash of a bundle file name "<hash>.case".
func hashOfName(name string) (bundle.Hash, bool) {
	h, ok := strings.CutSuffix(name, suffix)
	if !ok || !bundle.ValidHash(h) {
		return "", false
	}
	return bundle.Hash(h), true
}

// Delete implements store.Store.
func (s *Store) Delete(ctx context.Context, hash bundle.Hash) (bool, error) {
	if err := s.check(ctx, "delete", hash); err != nil {
		return false, err
	}
	final := s.pathOf(hash)
	if err := os.Remove(final); err != nil {
		if err = translate(err); errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		return false, wrap("delete", hash, err)
	}
	if err := s.syncDir(filepath.Dir(final)); err != nil {
		return true, wrap("delete", hash, fmt.Errorf("sync directory: %w", err))
	}
	return true, nil
}

// older reports whether a modification time is before cutoff for
// DeleteBefore. It compares against cutoff truncated to the second, so that
// a file system that keeps coarse modification times can never make a
// bundle re-saved after cutoff look older than cutoff: a bundle updated in
// the second of cutoff is kept.
func older(mtime, cutoff time.Time) bool {
	return mtime.Before(cutoff.Truncate(time.Second))
}

// DeleteBefore implements store.Store. To be atomic with respect to a
// concurrent Put (which refreshes the file's time in place), it renames the
// bundle to a hidden name in its shard, checks the time of what it renamed,
// and links it back if a Put refreshed it in the meantime; a Put that
// refreshes after the rename finds no file and writes the bundle again.
// While the check runs, readers may briefly see the bundle missing.
func (s *Store) DeleteBefore(ctx context.Context, hash bundle.Hash, cutoff time.Time) (bool, error) {
	if err := s.check(ctx, "delete", hash); err != nil {
		return false, err
	}
	final := s.pathOf(hash)
	fi, err := os.Stat(final)
	if err != nil {
		if err = translate(err); errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		return false, wrap("delete", hash, err)
	}
	if !older(fi.ModTime(), cutoff) {
		return false, nil
	}
	if s.beforeRename != nil {
		s.beforeRename(final)
	}
	shard := filepath.Dir(final)
	trash := filepath.Join(shard, delPrefix+hash.Short()+"-"+rand.Text())
	if err := os.Rename(final, trash); err != nil {
		if err = translate(err); errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		return false, wrap("delete", hash, err)
	}
	fi, err = os.Stat(trash)
	if err != nil {
		return false, wrap("delete", hash, err)
	}
	if !older(fi.ModTime(), cutoff) {
		// Refreshed between the check and the rename: put it back. If a Put
		// wrote it again meanwhile, that copy stays.
		if err := os.Link(trash, final); err != nil && !errors.Is(err, fs.ErrExist) {
			return false, wrap("delete", hash, fmt.Errorf("restore %s: %w", trash, err))
		}
		_ = os.Remove(trash)
		if err := s.syncDir(shard); err != nil {
			return false, wrap("delete", hash, fmt.Errorf("sync directory: %w", err))
		}
		return false, nil
	}
	if err := os.Remove(trash); err != nil {
		return false, wrap("delete", hash, err)
	}
	if err := s.syncDir(shard); err != nil {
		return true, wrap("delete", hash, fmt.Errorf("sync directory: %w", err))
	}
	return true, nil
}

// Local implements store.Local: a directory of this machine.
func (s *Store) Local() bool { return true }

// Identity implements store.Store: "file://" and the absolute directory.
func (s *Store) Identity() string { return s.identity }

// Close implements store.Store. It holds no resources; later calls return
// errors wrapping store.ErrClosed.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

// syncDir fsyncs a directory, making the entries created or removed in it
// durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
