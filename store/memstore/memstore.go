// Package memstore is the "memory:" fixture store: bundles in a map, per
// Store value (two stores opened from "memory:" share nothing), gone when the
// process ends or the store is closed. It is meant for tests.
//
// memstore imports store and bundle, nothing else of the project.
package memstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"iter"
	"sync"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/store"
)

var _ store.Store = (*Store)(nil)

// Options tune New; zero fields take the defaults.
type Options struct {
	// Now is the clock that stamps UpdatedAt (time.Now when nil). Tests
	// inject a fake clock.
	Now func() time.Time
}

// Store is a fixture store in memory. It is safe for concurrent use.
type Store struct {
	now func() time.Time

	mu      sync.Mutex
	entries map[bundle.Hash]entry // nil once closed
}

// entry is one stored bundle; data is never modified once stored.
type entry struct {
	data      []byte
	updatedAt time.Time
}

// New returns an empty memory store.
func New(opts Options) *Store {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return &Store{now: now, entries: map[bundle.Hash]entry{}}
}

// check refuses a done context, a malformed hash and a closed store.
func (s *Store) check(ctx context.Context, op string, hash bundle.Hash) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: %s: %w", where(op, hash), err)
	}
	if _, err := bundle.ParseHash(string(hash)); err != nil {
		return fmt.Errorf("memstore: %s: %w", op, err)
	}
	return nil
}

// where names an operation and its object in errors: "put 9f2c…".
func where(op string, hash bundle.Hash) string {
	if hash == "" {
		return op
	}
	return op + " " + hash.Short()
}

// lock locks s and reports ErrClosed when it was closed; the caller unlocks
// only when err is nil.
func (s *Store) lock(op string, hash bundle.Hash) error {
	s.mu.Lock()
	if s.entries == nil {
		s.mu.Unlock()
		return fmt.Errorf("memstore: %s: %w", where(op, hash), store.ErrClosed)
	}
	return nil
}

// refresh stamps a stored bundle with the current time; s.mu is held.
func (s *Store) refresh(hash bundle.Hash) bool {
	e, ok := s.entries[hash]
	if ok {
		e.updatedAt = s.now()
		s.entries[hash] = e
	}
	return ok
}

// Put implements store.Store. The blob is read in full before the map is
// changed, so a failing read stores nothing.
func (s *Store) Put(ctx context.Context, hash bundle.Hash, blob io.Reader) (bool, error) {
	if err := s.check(ctx, "put", hash); err != nil {
		return false, err
	}
	if err := s.lock("put", hash); err != nil {
		return false, err
	}
	present := s.refresh(hash)
	s.mu.Unlock()
	if present {
		return false, nil
	}

	var buf bytes.Buffer
	if _, err := io.Copy(&buf, store.ContextReader(ctx, blob)); err != nil {
		return false, fmt.Errorf("memstore: put %s: read blob: %w", hash.Short(), err)
	}

	if err := s.lock("put", hash); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	if s.refresh(hash) {
		return false, nil // another Put won the race
	}
	s.entries[hash] = entry{data: buf.Bytes(), updatedAt: s.now()}
	return true, nil
}

// Open implements store.Store.
func (s *Store) Open(ctx context.Context, hash bundle.Hash) (io.ReadCloser, error) {
	e, err := s.get(ctx, "open", hash)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(e.data)), nil
}

// Stat implements store.Store.
func (s *Store) Stat(ctx context.Context, hash bundle.Hash) (store.Info, error) {
	e, err := s.get(ctx, "stat", hash)
	if err != nil {
		return store.Info{}, err
	}
	return e.info(hash), nil
}

func (s *Store) get(ctx context.Context, op string, hash bundle.Hash) (entry, error) {
	if err := s.check(ctx, op, hash); err != nil {
		return entry{}, err
	}
	if err := s.lock(op, hash); err != nil {
		return entry{}, err
	}
	defer s.mu.Unlock()
	e, ok := s.entries[hash]
	if !ok {
		return entry{}, &store.NotFoundError{Backend: "memstore", Op: op, Hash: hash}
	}
	return e, nil
}

func (e entry) info(hash bundle.Hash) store.Info {
	return store.Info{Hash: hash, Size: int64(len(e.data)), UpdatedAt: e.updatedAt}
}

// List implements store.Store. It lists a snapshot taken when iteration
// starts, and holds no lock while it yields.
func (s *Store) List(ctx context.Context) iter.Seq2[store.Info, error] {
	return func(yield func(store.Info, error) bool) {
		if err := ctx.Err(); err != nil {
			yield(store.Info{}, fmt.Errorf("memstore: list: %w", err))
			return
		}
		if err := s.lock("list", ""); err != nil {
			yield(store.Info{}, err)
			return
		}
		infos := make([]store.Info, 0, len(s.entries))
		for h, e := range s.entries {
			infos = append(infos, e.info(h))
		}
		s.mu.Unlock()
		for _, info := range infos {
			if err := ctx.Err(); err != nil {
				yield(store.Info{}, fmt.Errorf("memstore: list: %w", err))
				return
			}
			if !yield(info, nil) {
				return
			}
		}
	}
}

// Delete implements store.Store.
func (s *Store) Delete(ctx context.Context, hash bundle.Hash) (bool, error) {
	return s.deleteIf(ctx, "delete", hash, func(entry) bool { return true })
}

// DeleteBefore implements store.Store; the check and the removal happen
// under one lock.
func (s *Store) DeleteBefore(ctx context.Context, hash bundle.Hash, cutoff time.Time) (bool, error) {
	return s.deleteIf(ctx, "delete", hash, func(e entry) bool { return e.updatedAt.Before(cutoff) })
}

func (s *Store) deleteIf(ctx context.Context, op string, hash bundle.Hash, ok func(entry) bool) (bool, error) {
	if err := s.check(ctx, op, hash); err != nil {
		return false, err
	}
	if err := s.lock(op, hash); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	e, present := s.entries[hash]
	if !present || !ok(e) {
		return false, nil
	}
	delete(s.entries, hash)
	return true, nil
}

// Local implements store.Local: the memory of this process.
func (s *Store) Local() bool { return true }

// Identity implements store.Store: always "memory:".
func (s *Store) Identity() string { return "memory:" }

// Close implements store.Store: it drops every bundle. Later calls return
// errors wrapping store.ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries = nil
	return nil
}
