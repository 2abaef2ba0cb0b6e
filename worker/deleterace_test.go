package worker_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/memstore"
)

// statGateStore holds every Stat until the test lets it through, telling
// the test when one is waiting.
type statGateStore struct {
	store.Store
	entered chan struct{}
	gate    chan struct{}
}

func (s *statGateStore) Stat(ctx context.Context, h bundle.Hash) (store.Info, error) {
	s.entered <- struct{}{}
	select {
	case <-s.gate:
	case <-ctx.Done():
		return store.Info{}, ctx.Err()
	}
	return s.Store.Stat(ctx, h)
}

// TestConcurrentDeleteDeliveriesAgree: two deliveries of one
// delete_case_bundle at once (a message sent twice, or one redelivered
// while its first delivery still runs or after it died). The other
// delivery claims the id first, finds the bundle, notes it and deletes it
// while this one waits on its look at the store; this one then finds
// nothing. The bundle was there and the message deleted it,
// so this delivery answers deleted: true too, whichever records first (the
// kill trial's race, played step by step; it answered false).
func TestConcurrentDeleteDeliveriesAgree(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, setup newEnv) {
		mem := memstore.New(memstore.Options{})
		h := hashOf(7)
		putBundle(t, mem, h)
		st := &statGateStore{Store: mem, entered: make(chan struct{}, 1), gate: make(chan struct{})}
		e := setup(t, st, nil)
		ctx := context.Background()
		body, _ := json.Marshal(map[string]any{"fixture_hash": h})
		key := e.cfg.Namespace + ":msg:{race}"
		started := `{"state":"started","body_hash":"` + bodyHash("delete_case_bundle", string(body)) + `"`

		// The other delivery has claimed the id (its started record).
		if err := e.client.Do(ctx, e.client.B().Set().Key(key).Value(started+`}`).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		e.send("race", "delete_case_bundle", map[string]any{"fixture_hash": h})
		select {
		case <-st.entered: // this delivery looks at the store
		case <-time.After(30 * time.Second):
			t.Fatal("the worker did not look at the store")
		}
		// Meanwhile the other delivery finds the bundle, notes it, deletes
		// it, and dies before recording its reply.
		if err := e.client.Do(ctx, e.client.B().Set().Key(key).Value(started+`,"bundle_present":true}`).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if _, err := mem.Delete(ctx, bundle.Hash(h)); err != nil {
			t.Fatal(err)
		}
		close(st.gate)

		r := e.waitReplies(1)[0]
		wantReply(t, r, messages.StatusOK, "")
		if string(r.Result) != `{"deleted":true}` {
			t.Errorf("result %s, want {\"deleted\":true}: the message deleted the bundle", r.Result)
		}
		if stored(t, mem, h) {
			t.Errorf("the bundle is still stored")
		}
	})
}

// deleteThenFailStore deletes a bundle on the first Delete and then fails,
// as a store whose answer is lost on the way back.
type deleteThenFailStore struct {
	store.Store
	failed atomic.Bool
}

func (s *deleteThenFailStore) Delete(ctx context.Context, h bundle.Hash) (bool, error) {
	deleted, err := s.Store.Delete(ctx, h)
	if err == nil && s.failed.CompareAndSwap(false, true) {
		return false, errTransient
	}
	return deleted, err
}

// TestDeleteLostAnswerTellsTheTruth: the first delivery of a
// delete_case_bundle finds the bundle, claims the message id noting it,
// and deletes it, but the store's answer is lost (a transient failure).
// The next delivery finds nothing to delete and answers by the note:
// deleted: true, in one write.
func TestDeleteLostAnswerTellsTheTruth(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, setup newEnv) {
		mem := memstore.New(memstore.Options{})
		h := hashOf(9)
		putBundle(t, mem, h)
		st := &deleteThenFailStore{Store: mem}
		e := setup(t, st, nil)
		e.send("lost", "delete_case_bundle", map[string]any{"fixture_hash": h})
		r := e.waitReplies(1)[0]
		wantReply(t, r, messages.StatusOK, "")
		if !st.failed.Load() || string(r.Result) != `{"deleted":true}` {
			t.Errorf("failed once %v, result %s, want {\"deleted\":true}: the message deleted the bundle", st.failed.Load(), r.Result)
		}
		if stored(t, mem, h) {
			t.Errorf("the bundle is still stored")
		}
	})
}
