package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/memstore"
)

// stuckStore blocks Stat (what every delete_case_bundle does first) until
// released, ignoring its context.
type stuckStore struct {
	store.Store
	entered chan struct{}
	release chan struct{}
}

func (s *stuckStore) Stat(ctx context.Context, h bundle.Hash) (store.Info, error) {
	close(s.entered)
	<-s.release
	return s.Store.Stat(ctx, h)
}

// Stop returns once its context ends, with the context's error, even when
// in-flight work ignores the cancellation; a later Stop waits for that work
// and the clean-up.
func TestStopReturnsWhenContextEnds(t *testing.T) {
	t.Parallel()
	st := &stuckStore{Store: memstore.New(memstore.Options{}), entered: make(chan struct{}), release: make(chan struct{})}
	e := setup(t, st, nil)
	released := false
	t.Cleanup(func() {
		if !released {
			close(st.release)
		}
	})
	e.send("s1", "delete_case_bundle", map[string]any{"fixture_hash": zeroHash})
	<-st.entered
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	stopped := make(chan error, 1)
	start := time.Now()
	go func() { stopped <- e.w.Stop(ctx) }()
	select {
	case err := <-stopped:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Stop: %v, want the context's deadline exceeded", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("Stop returned after %v", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return within 10 s of a 200 ms context")
	}
	if e.w.Ready() {
		t.Error("ready after Stop")
	}
	close(st.release)
	released = true
	done := make(chan error, 1)
	go func() { done <- e.w.Stop(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("second Stop: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second Stop did not return once the work ended")
	}
}
