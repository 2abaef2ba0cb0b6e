package worker_test

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/memstore"
	"github.com/pyrula/caseworker/worker"
)

// overlapStore records the most Puts in progress at once; each Put takes a
// while, so saves that are allowed to overlap do.
type overlapStore struct {
	store.Store
	now, most atomic.Int64
	mu        sync.Mutex
}

func (s *overlapStore) Put(ctx context.Context, h bundle.Hash, blob io.Reader) (bool, error) {
	n := s.now.Add(1)
	defer s.now.Add(-1)
	s.mu.Lock()
	s.most.Store(max(s.most.Load(), n))
	s.mu.Unlock()
	time.Sleep(150 * time.Millisecond)
	return s.Store.Put(ctx, h, blob)
}

// TestSaveConcurrencyBoundsSaves: with PYRULA_SAVE_CONCURRENCY=1 and room
// for many messages, save_case messages build and store their bundles one
// at a time (each holds its bundle in memory), and every one is answered.
func TestSaveConcurrencyBoundsSaves(t *testing.T) {
	t.Parallel()
	st := &overlapStore{Store: memstore.New(memstore.Options{})}
	e := setup(t, st, func(c *worker.Config) { c.Concurrency = 8; c.SaveConcurrency = 1 })
	const n = 4
	var runs []string
	for range n {
		runs = append(runs, e.record("checkout"))
	}
	for i, runID := range runs { // all at once, so that they could overlap
		e.send(fmt.Sprintf("save-%d", i), "save_case", map[string]any{"target_name": "checkout", "run_id": runID})
	}
	for _, r := range e.waitReplies(n) {
		wantReply(t, r, messages.StatusOK, "")
	}
	if most := st.most.Load(); most != 1 {
		t.Fatalf("%d saves stored at once, want 1 (PYRULA_SAVE_CONCURRENCY=1)", most)
	}
}
