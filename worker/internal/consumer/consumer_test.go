package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"
	"go.uber.org/goleak"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/worker/internal/consumer"
)

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*call).DelayDo.func1"))
}

// setup returns a client and a fresh stream with a group at its start,
// and a Consumer named name with slots slots on it.
func setup(t *testing.T, slots int) (valkey.Client, *consumer.Consumer) {
	t.Helper()
	ns := testenv.UniqueName(t, "consumer")
	c := testenv.ValkeyClientAt(t, testenv.ValkeyURL(t), ns)
	stream := ns + ":stream"
	if err := c.Do(context.Background(), c.B().XgroupCreate().Key(stream).Group("g").Id("0").Mkstream().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	cons, err := consumer.New(consumer.Config{Stream: stream, Group: "g", Consumer: "a", Slots: slots}, consumer.Deps{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	return c, cons
}

func add(t *testing.T, c valkey.Client, stream string, n int) {
	t.Helper()
	for range n {
		if err := c.Do(context.Background(), c.B().Xadd().Key(stream).Id("*").FieldValue().FieldValue("k", "v").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNewChecksConfig(t *testing.T) {
	if _, err := consumer.New(consumer.Config{Stream: "s", Group: "g"}, consumer.Deps{}); err == nil {
		t.Fatal("New without a consumer name and client: no error")
	}
}

// The slots bound what is held: TakeFree never exceeds them, Acquire waits
// for a Release.
func TestSlots(t *testing.T) {
	t.Parallel()
	_, c := setup(t, 3)
	ctx := context.Background()
	if !c.Acquire(ctx) {
		t.Fatal("Acquire on a free consumer failed")
	}
	if n := c.TakeFree(10); n != 3 {
		t.Fatalf("TakeFree(10) with 3 slots holds %d, want 3", n)
	}
	if c.TryAcquire() {
		t.Fatal("TryAcquire succeeded with every slot held")
	}
	calls := 0
	done := make(chan bool)
	go func() { done <- c.AcquireEvery(ctx, 10*time.Millisecond, func() { calls++; c.Release() }) }()
	if !<-done || calls != 1 {
		t.Fatalf("AcquireEvery: idle called %d times, want 1 (it freed the slot taken)", calls)
	}
	c.ReleaseN(3)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	for c.TryAcquire() {
	}
	if c.Acquire(cctx) {
		t.Fatal("Acquire with a cancelled context and no free slot succeeded")
	}
}

// Read reads own pending entries by id and new ones with ">"; Pending,
// DeliveryCounts and StillMine see them; Claim moves one to another member;
// Reconcile then frees the parked entry's slot.
func TestReadClaimReconcile(t *testing.T) {
	t.Parallel()
	client, a := setup(t, 2)
	ctx := context.Background()
	stream := a.Config().Stream
	add(t, client, stream, 2)
	got, err := a.Read(ctx, ">", 5, 10*time.Millisecond)
	if err != nil || len(got) != 2 {
		t.Fatalf("Read >: %d entries, %v; want 2", len(got), err)
	}
	again, err := a.Read(ctx, ">", 5, 10*time.Millisecond)
	if err != nil || len(again) != 0 {
		t.Fatalf("Read > on an empty stream: %d entries, %v; want none", len(again), err)
	}
	own, err := a.Read(ctx, "0", 5, 0)
	if err != nil || len(own) != 2 || own[0].ID != got[0].ID {
		t.Fatalf("Read 0: %v, %v; want the 2 pending entries", own, err)
	}
	counts, err := a.DeliveryCounts(ctx, got[0].ID, got[1].ID, 2)
	if err != nil || counts[got[0].ID] < 1 || len(counts) != 2 {
		t.Fatalf("DeliveryCounts: %v, %v", counts, err)
	}
	if !a.StillMine(ctx, got[0].ID) {
		t.Fatal("StillMine of an entry pending to a: false")
	}
	pending, err := a.Pending(ctx, 0, 100)
	if err != nil || len(pending) != 2 || pending[0].Consumer != "a" {
		t.Fatalf("Pending: %+v, %v", pending, err)
	}

	// a holds both slots: one entry in flight, one parked.
	if !a.Acquire(ctx) || a.TakeFree(2) != 2 {
		t.Fatal("a could not take its 2 slots")
	}
	a.Active.Add(got[0].ID)
	a.Active.Add(got[1].ID)
	a.Park(got[1].ID)
	if a.Active.Has(got[1].ID) || !a.Parked.Has(got[1].ID) {
		t.Fatal("Park did not move the entry from Active to Parked")
	}
	if err := a.Reconcile(ctx); err != nil || !a.Parked.Has(got[1].ID) {
		t.Fatalf("Reconcile of an entry still pending to a dropped it (%v)", err)
	}
	if a.TryAcquire() {
		t.Fatal("a slot is free while both entries are held")
	}

	b, err := consumer.New(consumer.Config{Stream: stream, Group: "g", Consumer: "b", Slots: 1}, consumer.Deps{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := b.Claim(ctx, got[1].ID, 0)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("Claim by b: %v, %v", claimed, err)
	}
	if a.StillMine(ctx, got[1].ID) {
		t.Fatal("StillMine of an entry b claimed: true")
	}
	if none, err := b.Claim(ctx, got[1].ID, time.Hour); err != nil || len(none) != 0 {
		t.Fatalf("Claim of an entry idle less than min-idle: %v, %v; want none", none, err)
	}
	if err := a.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Parked.Has(got[1].ID) {
		t.Fatal("Reconcile kept an entry gone to b")
	}
	if !a.TryAcquire() {
		t.Fatal("Reconcile did not free the slot of the entry gone to b")
	}
	a.Done(got[0].ID)
	if a.Active.Has(got[0].ID) || !a.TryAcquire() {
		t.Fatal("Done did not remove the entry and free its slot")
	}
}

func TestSet(t *testing.T) {
	var s consumer.Set
	if !s.Add("1") || s.Add("1") {
		t.Fatal("Add: want true then false")
	}
	if !s.Has("1") || s.Has("2") {
		t.Fatal("Has")
	}
	if l := s.List(); len(l) != 1 || l[0] != "1" {
		t.Fatalf("List: %v", l)
	}
	if !s.Remove("1") || s.Remove("1") || s.Has("1") {
		t.Fatal("Remove: want true then false")
	}
}

func TestBackoff(t *testing.T) {
	var b consumer.Backoff
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if b.Wait(ctx) {
		t.Fatal("Wait with a cancelled context reported live")
	}
	start := time.Now()
	b.Reset()
	if !b.Wait(context.Background()) || time.Since(start) < consumer.FirstRetryWait {
		t.Fatal("Wait after Reset did not wait FirstRetryWait")
	}
}
