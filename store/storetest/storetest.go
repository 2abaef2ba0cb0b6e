// Package storetest is the conformance suite of store.Store. Every backend
// runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		clock := storetest.NewClock(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
//		storetest.Run(t, func(t *testing.T) store.Store {
//			return memstore.New(memstore.Options{Now: clock.Now})
//		}, storetest.WithClock(clock))
//	}
//
// The suite saves real bundles (built with bundle.Encode) and checks the
// contract of store.Store and of store.Get, store.Save and store.GC on top
// of it: round trips, put-if-absent, concurrent saves, missing and malformed
// hashes, deletion, listing, corruption, interrupted writes, gc with keep
// lists and bundles re-saved while it runs, cancellation and Close.
//
// storetest imports store, bundle and messages, and no backend.
package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/store"
)

// Option configures Run.
type Option func(*config)

type config struct {
	clock     *Clock
	corrupt   func(t *testing.T, s store.Store, hash bundle.Hash)
	leaveTemp func(t *testing.T, s store.Store, hash bundle.Hash, partial []byte)
}

// WithClock tells the suite that every store newStore returns stamps
// UpdatedAt with c. The suite then moves c forward to place gc's start
// exactly, and checks the stamps. Without it the suite uses time.Now and
// only checks what holds for any clock.
func WithClock(c *Clock) Option { return func(cfg *config) { cfg.clock = c } }

// WithCorrupt gives the suite a way to flip a byte of the stored blob of
// hash in s directly (how depends on the backend). Without it the corruption
// test is skipped.
func WithCorrupt(fn func(t *testing.T, s store.Store, hash bundle.Hash)) Option {
	return func(cfg *config) { cfg.corrupt = fn }
}

// WithLeaveTempFile gives the suite a way to leave in s what a write of
// hash interrupted by a crash would leave (such as a temp file holding
// partial, the first bytes of the blob). Without it the interrupted-write
// test is skipped.
func WithLeaveTempFile(fn func(t *testing.T, s store.Store, hash bundle.Hash, partial []byte)) Option {
	return func(cfg *config) { cfg.leaveTemp = fn }
}

// Clock is a fake clock for store tests. Every reading is one microsecond
// after the previous one, so stamps taken one after another differ; Advance
// jumps forward. It is safe for concurrent use and never goes backward.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock whose first reading is start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the current time and moves the clock forward by a microsecond.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.now
	c.now = c.now.Add(time.Microsecond)
	return t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// now reads the stores' clock.
func (cfg *config) now() time.Time {
	if cfg.clock != nil {
		return cfg.clock.Now()
	}
	return time.Now()
}

// Run runs the conformance suite against stores made by newStore, which is
// called once per subtest and must return a new, empty store. The suite
// closes each store when its subtest ends. Subtests run in parallel.
func Run(t *testing.T, newStore func(t *testing.T) store.Store, opts ...Option) {
	t.Helper()
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	s := &suite{cfg: &cfg, newStore: newStore}
	tests := []struct {
		name string
		fn   func(*testing.T)
	}{
		{"PutGetRoundTrip", s.testPutGetRoundTrip},
		{"PutTwice", s.testPutTwice},
		{"ConcurrentPutSameBundle", s.testConcurrentPutSame},
		{"ConcurrentPutDistinctBundles", s.testConcurrentPutDistinct},
		{"FailedPutStoresNothing", s.testFailedPut},
		{"Absent", s.testAbsent},
		{"InvalidHash", s.testInvalidHash},
		{"DeleteThenGet", s.testDeleteThenGet},
		{"DeleteBefore", s.testDeleteBefore},
		{"ListAllAndOnly", s.testList},
		{"Corrupt", s.testCorrupt},
		{"InterruptedWrite", s.testInterruptedWrite},
		{"GCListOnly", s.testGCListOnly},
		{"GCSweep", s.testGCSweep},
		{"GCSkipsNew", s.testGCSkipsNew},
		{"GCResavedDuringGC", s.testGCResaved},
		{"GCReportError", s.testGCReportError},
		{"GCEmpty", s.testGCEmpty},
		{"CancelledContext", s.testCancelled},
		{"CancelDuringPut", s.testCancelDuringPut},
		{"CancelDuringGC", s.testCancelDuringGC},
		{"IdentityAndBinding", s.testIdentity},
		{"Close", s.testClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

type suite struct {
	cfg      *config
	newStore func(t *testing.T) store.Store
}

// fixture is what setup gives a subtest.
type fixture struct {
	s   store.Store
	ctx context.Context
}

func (s *suite) setup(t *testing.T) fixture {
	t.Helper()
	st := s.newStore(t)
	if st == nil {
		t.Fatal("newStore returned nil")
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return fixture{s: st, ctx: t.Context()}
}
