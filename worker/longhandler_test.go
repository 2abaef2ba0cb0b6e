package worker_test

import (
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/memstore"
	"github.com/pyrula/caseworker/worker"
)

// heldStore makes every Put and Stat take hold (or until its context
// ends), counting the calls: a delete_case_bundle's first store call is its
// Stat.
type heldStore struct {
	store.Store
	hold        time.Duration
	puts, stats atomic.Int64
}

func (s *heldStore) wait(ctx context.Context) error {
	t := time.NewTimer(s.hold)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *heldStore) Put(ctx context.Context, h bundle.Hash, blob io.Reader) (bool, error) {
	s.puts.Add(1)
	if err := s.wait(ctx); err != nil {
		return false, err
	}
	return s.Store.Put(ctx, h, blob)
}

func (s *heldStore) Stat(ctx context.Context, h bundle.Hash) (store.Info, error) {
	s.stats.Add(1)
	if err := s.wait(ctx); err != nil {
		return store.Info{}, err
	}
	return s.Store.Stat(ctx, h)
}

// TestLongHandlerNotRunTwice: a message whose handler outlives the claim
// idle time is not reclaimed by another worker of the group while its
// worker is alive: the store operation runs once and one reply is
// published, for delete_case_bundle and save_case, on Valkey, on the Valkey
// Cluster and on the embedded server. Without the touch of in-flight entries (worker/internal/intake/keepalive.go)
// the second worker reclaims the entry after ClaimIdle and both handle it.
func TestLongHandlerNotRunTwice(t *testing.T) {
	t.Parallel()
	const claimIdle = 300 * time.Millisecond
	for _, b := range backends {
		for _, typ := range []messages.MessageType{messages.DeleteCaseBundle, messages.SaveCase} {
			t.Run(b.name+"/"+string(typ), func(t *testing.T) {
				t.Parallel()
				st := &heldStore{Store: memstore.New(memstore.Options{}), hold: 4 * claimIdle}
				e := setupWith(t, b.connect(t), st, func(c *worker.Config) { c.ClaimIdle = claimIdle })
				cfg2 := e.cfg
				cfg2.ConsumerName = "c2"
				w2, err := worker.New(cfg2, worker.Params{Client: e.client, Store: st, Registry: e.reg, Registerer: prometheus.NewRegistry(), Logger: zaptest.NewLogger(t)})
				if err != nil {
					t.Fatal(err)
				}
				if err := w2.Start(context.Background()); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { w2.Stop(context.Background()) })
				calls := &st.stats
				if typ == messages.SaveCase {
					calls = &st.puts
					runID := e.record("checkout")
					e.send("long-1", string(typ), map[string]any{"target_name": "checkout", "run_id": runID})
				} else {
					e.send("long-1", string(typ), map[string]any{"fixture_hash": zeroHash})
				}
				wantReply(t, e.waitReplies(1)[0], messages.StatusOK, "")
				// Room for a second handling to start and end, were there one.
				time.Sleep(2*claimIdle + st.hold)
				if n := calls.Load(); n != 1 {
					t.Errorf("the store operation ran %d times, want 1", n)
				}
				if rs := e.replies(); len(rs) != 1 {
					t.Errorf("%d replies, want 1: %+v", len(rs), rs)
				}
			})
		}
	}
}
