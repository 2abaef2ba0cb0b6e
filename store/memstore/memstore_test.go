package memstore

import (
	"bytes"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	clock := storetest.NewClock(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	storetest.Run(t, func(t *testing.T) store.Store {
		return New(Options{Now: clock.Now})
	}, storetest.WithClock(clock), storetest.WithCorrupt(corrupt))
}

// TestConformanceRealClock runs the suite as a backend without an injectable
// clock would, on time.Now.
func TestConformanceRealClock(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return New(Options{}) }, storetest.WithCorrupt(corrupt))
}

// corrupt flips a byte in the middle of a stored blob.
func corrupt(t *testing.T, s store.Store, hash bundle.Hash) {
	t.Helper()
	m := s.(*Store)
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[hash]
	if !ok {
		t.Fatalf("corrupt: %s is not stored", hash.Short())
	}
	data := bytes.Clone(e.data)
	data[len(data)/2] ^= 0x20
	e.data = data
	m.entries[hash] = e
}

func TestStoresAreSeparate(t *testing.T) {
	t.Parallel()
	a, b := New(Options{}), New(Options{})
	c := storetest.Bundle(t, 0)
	if _, err := store.Save(t.Context(), a, c); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(t.Context(), c.Hash()); err == nil {
		t.Fatal("a bundle saved in one memory store is visible in another")
	}
	if a.Identity() != "memory:" || b.Identity() != "memory:" {
		t.Errorf("identities %q, %q, want memory:", a.Identity(), b.Identity())
	}
}

func TestCloseDropsBundles(t *testing.T) {
	t.Parallel()
	s := New(Options{})
	if _, err := store.Save(t.Context(), s, storetest.Bundle(t, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.entries != nil {
		t.Errorf("Close kept %d bundles in memory", len(s.entries))
	}
}
