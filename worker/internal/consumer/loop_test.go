package consumer_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/internal/testwait"
	"github.com/pyrula/caseworker/worker/internal/batch"
	"github.com/pyrula/caseworker/worker/internal/consumer"
)

// stream is a fresh stream with a group "g" at its start, for Run tests.
type stream struct {
	t      *testing.T
	client valkey.Client
	key    string
}

func newStream(t *testing.T) *stream {
	t.Helper()
	ns := testenv.UniqueName(t, "loop")
	c := testenv.ValkeyClientAt(t, testenv.ValkeyURL(t), ns)
	s := &stream{t: t, client: c, key: ns + ":stream"}
	if err := c.Do(context.Background(), c.B().XgroupCreate().Key(s.key).Group("g").Id("0").Mkstream().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	return s
}

// add adds n entries and returns their ids.
func (s *stream) add(n int) []string {
	s.t.Helper()
	ids := make([]string, n)
	for i := range ids {
		id, err := s.client.Do(context.Background(), s.client.B().Xadd().Key(s.key).Id("*").FieldValue().FieldValue("k", "v").Build()).ToString()
		if err != nil {
			s.t.Fatal(err)
		}
		ids[i] = id
	}
	return ids
}

// ack XACKs entry id (what a handler does once its work is done).
func (s *stream) ack(ctx context.Context, id string) bool {
	return s.client.Do(ctx, s.client.B().Xack().Key(s.key).Group("g").Id(id).Build()).Error() == nil
}

// pending returns the group's pending entries by consumer (an error as
// consumer "error").
func (s *stream) pending() map[string]int {
	rows, err := s.client.Do(context.Background(), s.client.B().Xpending().Key(s.key).Group("g").Start("-").End("+").Count(1000).Build()).ToArray()
	if err != nil {
		return map[string]int{"error": 1}
	}
	out := map[string]int{}
	for _, p := range consumer.ParsePending(rows) {
		out[p.Consumer]++
	}
	return out
}

// consumer returns member name of the group with slots slots, policy p
// and events ev.
func (s *stream) consumer(name string, slots int, p consumer.Policy, ev consumer.Events) *consumer.Consumer {
	s.t.Helper()
	c, err := consumer.New(consumer.Config{Stream: s.key, Group: "g", Consumer: name, Slots: slots, Policy: p},
		consumer.Deps{Client: s.client, Events: ev})
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

// run starts c.Run with h and returns a stop that ends it (reading, then
// the work) and waits for it.
func run(t *testing.T, c *consumer.Consumer, h consumer.Handler) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	work, hard := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, work, h) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			hard()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// recorder records the deliveries a handler got, in order.
type recorder struct {
	mu sync.Mutex
	ds []consumer.Delivery
	at []time.Time
}

func (r *recorder) note(d consumer.Delivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ds = append(r.ds, d)
	r.at = append(r.at, time.Now())
}

func (r *recorder) get() ([]consumer.Delivery, []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]consumer.Delivery(nil), r.ds...), append([]time.Time(nil), r.at...)
}

func (r *recorder) count() int {
	ds, _ := r.get()
	return len(ds)
}

func TestRunChecksPolicy(t *testing.T) {
	s := newStream(t)
	if _, err := consumer.New(consumer.Config{Stream: s.key, Group: "g", Consumer: "a", Policy: consumer.Policy{ClaimIdle: time.Second, MaxDeliveries: 3}},
		consumer.Deps{Client: s.client}); err == nil {
		t.Fatal("New with MaxDeliveries and no DeadLetter: no error")
	}
	c := s.consumer("a", 1, consumer.Policy{}, consumer.Events{})
	if err := c.Run(context.Background(), context.Background(), nil); err == nil {
		t.Fatal("Run without Policy.ClaimIdle: no error")
	}
}

// Run hands the consumer's own pending entries (read before a restart)
// to the handler first, re-read deliveries counted, then the new ones;
// the acked entries leave the group's pending list.
func TestRunReadsOwnPendingFirst(t *testing.T) {
	t.Parallel()
	s := newStream(t)
	old := s.add(3)
	before := s.consumer("a", 4, consumer.Policy{ClaimIdle: time.Hour}, consumer.Events{})
	if got, err := before.Read(context.Background(), ">", 3, 10*time.Millisecond); err != nil || len(got) != 3 {
		t.Fatalf("the first incarnation read %d entries, %v", len(got), err)
	}
	fresh := s.add(2)
	var reads atomic.Int64
	// One slot: each entry is handed over once the one before was acked.
	c := s.consumer("a", 1, consumer.Policy{ClaimIdle: time.Hour}, consumer.Events{
		Read: func(entries []valkey.XRangeEntry) { reads.Add(int64(len(entries))) }})
	var r recorder
	run(t, c, func(ctx context.Context, d consumer.Delivery) consumer.Verdict {
		r.note(d)
		if !s.ack(ctx, d.Entry.ID) {
			return consumer.Retry(errors.New("ack failed"))
		}
		return consumer.Acked()
	})
	testwait.Eventually(t, 5*time.Second, "5 deliveries", func() bool { return r.count() == 5 })
	ds, _ := r.get()
	for i, id := range old {
		if ds[i].Entry.ID != id || ds[i].Deliveries < 2 {
			t.Errorf("delivery %d: %s (deliveries %d), want own pending %s re-read (deliveries ≥ 2)", i, ds[i].Entry.ID, ds[i].Deliveries, id)
		}
	}
	for i, id := range fresh {
		if d := ds[len(old)+i]; d.Entry.ID != id || d.Deliveries != 1 {
			t.Errorf("delivery %d: %s (deliveries %d), want new entry %s (deliveries 1)", len(old)+i, d.Entry.ID, d.Deliveries, id)
		}
	}
	if reads.Load() != 2 {
		t.Errorf("Events.Read told of %d entries, want the 2 new ones", reads.Load())
	}
	testwait.Eventually(t, 5*time.Second, "nothing pending", func() bool { return len(s.pending()) == 0 })
}

// Run never holds more entries than slots, in flight or parked: with 2
// slots and a handler that blocks, then leaves every entry pending, the
// consumer never has more than 2 entries pending, and the parked ones are
// retried (with their own slots) until they are acked.
func TestRunNeverHoldsMoreThanSlots(t *testing.T) {
	t.Parallel()
	s := newStream(t)
	s.add(8)
	const slots = 2
	release := make(chan struct{})
	var inFlight, most atomic.Int64
	var failures sync.Map // entry id → failures so far
	c := s.consumer("a", slots, consumer.Policy{ClaimIdle: 40 * time.Millisecond}, consumer.Events{})
	var r recorder
	run(t, c, func(ctx context.Context, d consumer.Delivery) consumer.Verdict {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		r.note(d)
		select {
		case <-release:
		case <-ctx.Done():
			return consumer.Retry(nil)
		}
		f, _ := failures.LoadOrStore(d.Entry.ID, new(atomic.Int64))
		if f.(*atomic.Int64).Add(1) <= 2 {
			return consumer.Retry(errors.New("transient"))
		}
		if !s.ack(ctx, d.Entry.ID) {
			return consumer.Retry(errors.New("ack failed"))
		}
		return consumer.Acked()
	})
	var sampled atomic.Int64
	stopSampling := make(chan struct{})
	sampling := make(chan struct{})
	go func() {
		defer close(sampling)
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if n := int64(s.pending()["a"]); n > sampled.Load() {
				sampled.Store(n)
			}
		}
	}()
	testwait.Eventually(t, 5*time.Second, "2 entries in flight", func() bool { return inFlight.Load() == slots })
	time.Sleep(100 * time.Millisecond) // the loop would read more now if it could
	if n := s.pending()["a"]; n != slots {
		t.Fatalf("%d entries pending to the consumer with 2 slots busy, want 2", n)
	}
	close(release)
	testwait.Eventually(t, 20*time.Second, "every entry acked", func() bool { return len(s.pending()) == 0 && r.count() == 8*3 })
	close(stopSampling)
	<-sampling
	if most.Load() > slots || sampled.Load() > slots {
		t.Fatalf("at most %d handlers at once and %d entries pending to the consumer, want at most %d", most.Load(), sampled.Load(), slots)
	}
}

// An entry left pending is claimed again once idle its backoff (doubling
// per delivery), delivered MaxDeliveries times, then dead-lettered with
// its failed deliveries instead of handled again.
func TestRunBackoffAndDeadLetterByDeliveries(t *testing.T) {
	t.Parallel()
	s := newStream(t)
	id := s.add(1)[0]
	const idle = 100 * time.Millisecond
	type dead struct {
		id    string
		cause error
		n     int64
	}
	deads := make(chan dead, 4)
	var reclaimed atomic.Int64
	c := s.consumer("a", 2, consumer.Policy{ClaimIdle: idle, BackoffPerDelivery: true, MaxDeliveries: 3,
		DeadLetter: func(ctx context.Context, d consumer.Delivery, cause error, failures int64) bool {
			deads <- dead{d.Entry.ID, cause, failures}
			return s.ack(ctx, d.Entry.ID)
		}}, consumer.Events{Reclaimed: func(d consumer.Delivery, from string) {
		if from == "a" {
			reclaimed.Add(1)
		}
	}})
	var r recorder
	run(t, c, func(_ context.Context, d consumer.Delivery) consumer.Verdict {
		r.note(d)
		return consumer.Retry(errors.New("transient"))
	})
	var got dead
	select {
	case got = <-deads:
	case <-time.After(10 * time.Second):
		t.Fatal("no dead letter within 10 s")
	}
	if got.id != id || !errors.Is(got.cause, consumer.ErrTooManyDeliveries) || got.n != 3 {
		t.Fatalf("dead letter %+v, want %s with ErrTooManyDeliveries after 3 deliveries", got, id)
	}
	ds, at := r.get()
	if len(ds) != 3 {
		t.Fatalf("handled %d times, want 3 (MaxDeliveries)", len(ds))
	}
	for i, d := range ds {
		if d.Deliveries != int64(i+1) {
			t.Errorf("delivery %d: Deliveries %d", i+1, d.Deliveries)
		}
	}
	if reclaimed.Load() != 2 {
		t.Errorf("Events.Reclaimed told of %d claims, want 2 (the dead letter's claim is not one)", reclaimed.Load())
	}
	// The claim waits 2× ClaimIdle; the handler may note the second
	// delivery a little after its claim.
	if gap := at[2].Sub(at[1]); gap < 2*idle-30*time.Millisecond {
		t.Errorf("third delivery %v after the second, want about 2× ClaimIdle (%v)", gap, 2*idle)
	}
	testwait.Eventually(t, 5*time.Second, "nothing pending", func() bool { return len(s.pending()) == 0 })
	time.Sleep(4 * idle)
	if n := r.count(); n != 3 || len(deads) != 0 {
		t.Fatalf("after the dead letter: %d deliveries, %d more dead letters", n, len(deads))
	}
}

// With Policy.Failed, a Retry with a cause is a counted failure, and the
// entry is dead-lettered at MaxFailures with the last cause; a Retry
// without one is not counted; a DeadLetter verdict is dead-lettered at
// once with 0 failures.
func TestRunCountsFailures(t *testing.T) {
	t.Parallel()
	s := newStream(t)
	ids := s.add(2)
	failing, hopeless := ids[0], ids[1]
	var mu sync.Mutex
	counted := map[string]int64{}
	type dead struct {
		cause error
		n     int64
	}
	deads := map[string]dead{}
	c := s.consumer("a", 2, consumer.Policy{ClaimIdle: 30 * time.Millisecond, MaxFailures: 2,
		Failed: func(_ context.Context, d consumer.Delivery, _ error) int64 {
			mu.Lock()
			defer mu.Unlock()
			counted[d.Entry.ID]++
			return counted[d.Entry.ID]
		},
		DeadLetter: func(ctx context.Context, d consumer.Delivery, cause error, failures int64) bool {
			mu.Lock()
			deads[d.Entry.ID] = dead{cause, failures}
			mu.Unlock()
			return s.ack(ctx, d.Entry.ID)
		}}, consumer.Events{})
	errHopeless := errors.New("hopeless")
	var handled atomic.Int64
	run(t, c, func(ctx context.Context, d consumer.Delivery) consumer.Verdict {
		handled.Add(1)
		switch {
		case d.Entry.ID == hopeless:
			return consumer.DeadLetter(errHopeless)
		case d.Deliveries%2 == 1:
			return consumer.Retry(nil) // held elsewhere: not a failure
		default:
			return d.Settle(ctx, consumer.Retry(errors.New("transient"))) // settled by the handler: not counted twice
		}
	})
	testwait.Eventually(t, 10*time.Second, "2 dead letters, nothing pending", func() bool {
		mu.Lock()
		n := len(deads)
		mu.Unlock()
		return n == 2 && len(s.pending()) == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if d := deads[hopeless]; !errors.Is(d.cause, errHopeless) || d.n != 0 || counted[hopeless] != 0 {
		t.Errorf("the DeadLetter verdict: dead letter %+v after %d counted failures, want its cause and 0", d, counted[hopeless])
	}
	if d := deads[failing]; d.cause == nil || d.cause.Error() != "transient" || d.n != 2 || counted[failing] != 2 {
		t.Errorf("the failing entry: dead letter %+v after %d counted failures, want the last cause after 2", d, counted[failing])
	}
	if n := handled.Load(); n != 5 {
		t.Errorf("handled %d times, want 5: the hopeless entry once, the failing one 4 times (2 uncounted)", n)
	}
}

// A consumer claims the entries another member left pending once they are
// idle ClaimIdle, and Events.Reclaimed names where they came from.
func TestRunClaimsIdleEntriesOfOthers(t *testing.T) {
	t.Parallel()
	s := newStream(t)
	ids := s.add(3)
	dead := s.consumer("dead", 3, consumer.Policy{ClaimIdle: time.Hour}, consumer.Events{})
	// The entries are idle from the dead consumer's read on. Valkey counts
	// idle time in whole milliseconds, so a claim may come up to 1 ms before
	// 50 ms have passed by this clock: allow 2.
	start := time.Now()
	if got, err := dead.Read(context.Background(), ">", 3, 10*time.Millisecond); err != nil || len(got) != 3 {
		t.Fatalf("the dead consumer read %d entries, %v", len(got), err)
	}
	var from sync.Map
	c := s.consumer("a", 1, consumer.Policy{ClaimIdle: 50 * time.Millisecond}, consumer.Events{
		Reclaimed: func(d consumer.Delivery, f string) { from.Store(d.Entry.ID, f) }})
	var r recorder
	run(t, c, func(ctx context.Context, d consumer.Delivery) consumer.Verdict {
		r.note(d)
		if !s.ack(ctx, d.Entry.ID) {
			return consumer.Retry(errors.New("ack failed"))
		}
		return consumer.Acked()
	})
	testwait.Eventually(t, 10*time.Second, "the dead consumer's entries handled", func() bool { return len(s.pending()) == 0 })
	ds, at := r.get()
	if len(ds) != 3 {
		t.Fatalf("handled %d entries, want 3", len(ds))
	}
	for i, d := range ds {
		f, _ := from.Load(d.Entry.ID)
		if f != "dead" || d.Deliveries != 2 || at[i].Sub(start) < 48*time.Millisecond {
			t.Errorf("entry %s: from %v, deliveries %d, after %v; want from dead, 2, after ClaimIdle", d.Entry.ID, f, d.Deliveries, at[i].Sub(start))
		}
	}
	_ = ids
}

// Policy.KeepAlive runs while handlers may run, through the stop of
// reading, and ends once the last handler returned; Run returns after it.
func TestRunKeepAliveOutlivesReading(t *testing.T) {
	t.Parallel()
	s := newStream(t)
	s.add(1)
	var alive atomic.Bool
	keepEnded := make(chan struct{})
	c := s.consumer("a", 1, consumer.Policy{ClaimIdle: time.Hour, KeepAlive: func(ctx context.Context) {
		alive.Store(true)
		<-ctx.Done()
		alive.Store(false)
		close(keepEnded)
	}}, consumer.Events{})
	started, finish := make(chan struct{}), make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, context.Background(), func(ctx context.Context, d consumer.Delivery) consumer.Verdict {
			close(started)
			<-finish
			s.ack(ctx, d.Entry.ID)
			return consumer.Acked()
		})
	}()
	<-started
	cancel() // stop reading: the handler goes on
	time.Sleep(50 * time.Millisecond)
	select {
	case <-done:
		t.Fatal("Run returned while its handler was running")
	case <-keepEnded:
		t.Fatal("KeepAlive ended while a handler was running")
	default:
	}
	if !alive.Load() {
		t.Fatal("KeepAlive not running while a handler runs")
	}
	close(finish)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	select {
	case <-keepEnded:
	default:
		t.Fatal("Run returned before KeepAlive ended")
	}
}

// A failed read is told to Events.Failed; when it repairs the cause (here
// the group, destroyed under the consumer, created again) the loop reads
// on at once, and the entries added after are handled.
func TestRunReadFailureRepaired(t *testing.T) {
	t.Parallel()
	s := newStream(t)
	var failed atomic.Int64
	c := s.consumer("a", 1, consumer.Policy{ClaimIdle: time.Hour}, consumer.Events{
		Failed: func(ctx context.Context, err error) error {
			failed.Add(1)
			return s.client.Do(ctx, s.client.B().XgroupCreate().Key(s.key).Group("g").Id("0").Mkstream().Build()).Error()
		}})
	var r recorder
	run(t, c, func(ctx context.Context, d consumer.Delivery) consumer.Verdict {
		r.note(d)
		s.ack(ctx, d.Entry.ID)
		return consumer.Acked()
	})
	time.Sleep(50 * time.Millisecond)
	if err := s.client.Do(context.Background(), s.client.B().XgroupDestroy().Key(s.key).Group("g").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 5*time.Second, "the failed read told", func() bool { return failed.Load() > 0 })
	s.add(2)
	testwait.Eventually(t, 5*time.Second, "the 2 entries added after handled", func() bool { return r.count() == 2 })
}

// countingClient counts the DoMulti calls (round trips of batches and
// rounds) and their commands.
type countingClient struct {
	valkey.Client
	trips, cmds atomic.Int64
}

func (c *countingClient) DoMulti(ctx context.Context, cmds ...valkey.Completed) []valkey.ValkeyResult {
	c.trips.Add(1)
	c.cmds.Add(int64(len(cmds)))
	return c.Client.DoMulti(ctx, cmds...)
}

// TestRunTasks: with Deps.Tasks, the handlers of new entries run as tasks
// of the loop's goroutine. Every entry is handled and acked, a handler
// that fails (every 23rd) is retried, one that detaches (every 29th, which then
// sleeps as long work would) ends on a goroutine of its own; the slots
// still bound the handlers at once, the commands of many handlers share
// round trips, and entries added while others are handled are read in the
// same rounds.
func TestRunTasks(t *testing.T) {
	t.Parallel()
	s := newStream(t)
	cc := &countingClient{Client: s.client}
	b := batch.New(batch.Config{}, batch.Deps{Client: cc})
	const slots, entries = 32, 300
	c, err := consumer.New(consumer.Config{Stream: s.key, Group: "g", Consumer: "a", Slots: slots,
		Policy: consumer.Policy{ClaimIdle: 50 * time.Millisecond}},
		consumer.Deps{Client: cc, Batcher: b, Tasks: true})
	if err != nil {
		t.Fatal(err)
	}
	ids := s.add(entries / 2)
	var inFlight, most, detached atomic.Int64
	var mu sync.Mutex
	handled := map[string]int{} // entry id → deliveries handled
	stop := run(t, c, func(ctx context.Context, d consumer.Delivery) consumer.Verdict {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		mu.Lock()
		handled[d.Entry.ID]++
		first := handled[d.Entry.ID] == 1
		i := len(handled)
		mu.Unlock()
		key := s.key + ":n:" + d.Entry.ID
		if err := b.Do(ctx, s.client.B().Incr().Key(key).Build()).Error(); err != nil {
			return consumer.Retry(err)
		}
		if i%29 == 0 && first {
			batch.Detach(ctx)
			detached.Add(1)
			time.Sleep(5 * time.Millisecond)
		}
		if i%23 == 0 && first {
			return consumer.Retry(errors.New("transient"))
		}
		if err := b.Ack(ctx, s.key, "g", d.Entry.ID); err != nil {
			return consumer.Retry(err)
		}
		return consumer.Acked()
	})
	// The second half in one pipeline, as a busy producer adds them.
	adds := make(valkey.Commands, entries/2)
	for i := range adds {
		adds[i] = s.client.B().Xadd().Key(s.key).Id("*").FieldValue().FieldValue("k", "v").Build()
	}
	for _, res := range s.client.DoMulti(context.Background(), adds...) {
		id, err := res.ToString()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	testwait.Eventually(t, 20*time.Second, "every entry acked", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(s.pending()) == 0 && len(handled) == entries
	})
	stop()
	mu.Lock()
	defer mu.Unlock()
	retried := 0
	for _, id := range ids {
		switch handled[id] {
		case 1:
		case 2:
			retried++
		default:
			t.Errorf("entry %s handled %d times", id, handled[id])
		}
		if n, err := s.client.Do(context.Background(), s.client.B().Get().Key(s.key+":n:"+id).Build()).AsInt64(); err != nil || n != int64(handled[id]) {
			t.Errorf("entry %s: its handler's INCR = %d, %v; want %d", id, n, err, handled[id])
		}
	}
	if retried != entries/23 {
		t.Errorf("%d entries handled twice, want the %d that failed once", retried, entries/23)
	}
	if detached.Load() == 0 || most.Load() > slots {
		t.Errorf("%d handlers detached, at most %d at once (slots %d)", detached.Load(), most.Load(), slots)
	}
	trips, cmds := cc.trips.Load(), cc.cmds.Load()
	t.Logf("%d round trips for %d commands", trips, cmds)
	if trips*4 > cmds {
		t.Errorf("%d round trips for %d commands: the handlers' commands did not share them", trips, cmds)
	}
}
