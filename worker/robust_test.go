package worker_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap/zaptest"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/internal/testwait"
	"github.com/pyrula/caseworker/memvalkey"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/memstore"
	"github.com/pyrula/caseworker/worker"
)

// outage is how long TestValkeyOutage keeps Valkey down. The read loops'
// retry wait doubles from 100 ms and is capped at 2 s, so it is at its cap
// after about 3 s of outage; any longer outage (the 30 s) only
// repeats capped waits, and nothing else in the worker measures the outage.
// Run with -args -outage=30s for the figure.
var outage = flag.Duration("outage", 8*time.Second, "how long TestValkeyOutage keeps Valkey down")

// redisServer is a private redis-server on a free loopback port, with an AOF
// fsynced at every write in a temp dir, so that it can be stopped and
// started again with its data (the streams and groups survive).
type redisServer struct {
	t    *testing.T
	dir  string
	port int
	mu   sync.Mutex
	cmd  *exec.Cmd
}

func startRedis(t *testing.T) *redisServer {
	t.Helper()
	if _, err := os.Stat("/usr/bin/redis-server"); err != nil {
		if testenv.Required() {
			t.Fatalf("/usr/bin/redis-server: %v", err)
		}
		t.Skipf("no /usr/bin/redis-server: %v", err)
	}
	testenv.ValkeyURL(t) // needs the same services as every other worker test
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &redisServer{t: t, dir: t.TempDir(), port: port}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *redisServer) url() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.port) }

// start starts the server (again) and waits until it answers PING.
func (s *redisServer) start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command("/usr/bin/redis-server", "--port", fmt.Sprint(s.port), "--bind", "127.0.0.1",
		"--dir", s.dir, "--save", "", "--appendonly", "yes", "--appendfsync", "always",
		"--logfile", filepath.Join(s.dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), time.Second)
		if err == nil {
			c.SetDeadline(time.Now().Add(time.Second))
			_, err = c.Write([]byte("PING\r\n"))
			buf := make([]byte, 64)
			var n int
			if err == nil {
				n, err = c.Read(buf)
			}
			c.Close()
			if err == nil && strings.HasPrefix(string(buf[:n]), "+PONG") {
				return
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on port %d did not answer PING: %v", s.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop stops the server with SIGTERM (the AOF is fsynced at every write)
// and waits for it to exit.
func (s *redisServer) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	s.cmd = nil
}

// gateStore blocks Stat (what every delete_case_bundle does first) while
// its gate is closed.
type gateStore struct {
	store.Store
	mu      sync.Mutex
	gate    chan struct{} // nil: open
	entered chan string   // the hash of each Stat, when not nil
}

func (s *gateStore) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate = make(chan struct{})
}

func (s *gateStore) open() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
}

func (s *gateStore) Stat(ctx context.Context, h bundle.Hash) (store.Info, error) {
	s.mu.Lock()
	gate, entered := s.gate, s.entered
	s.mu.Unlock()
	if entered != nil {
		entered <- string(h)
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return store.Info{}, ctx.Err()
		}
	}
	return s.Store.Stat(ctx, h)
}

// hashN is a valid fixture hash that differs per n.
func hashN(n int) string { return fmt.Sprintf("%064x", n) }

// repliesByID counts the replies per message id.
func repliesByID(rs []messages.Reply) map[string]int {
	out := map[string]int{}
	for _, r := range rs {
		out[r.MessageID]++
	}
	return out
}

// A Valkey outage does not kill the worker: Ready goes false during it and
// true again within seconds of Valkey's return; a message sent after the
// return is answered within seconds, and one in flight when Valkey went
// down is answered exactly once.
func TestValkeyOutage(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	opt, err := valkey.ParseURL(srv.url())
	if err != nil {
		t.Fatal(err)
	}
	opt.DisableCache = true
	c, err := valkey.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	st := &gateStore{Store: memstore.New(memstore.Options{}), entered: make(chan string, 16)}
	cfg := worker.Config{Namespace: testenv.UniqueName(t, "wk"), ConsumerName: "c1", Concurrency: 2,
		ClaimIdle: 200 * time.Millisecond, MaxDeliveries: 10, ValkeyURL: srv.url()}
	// The worker connects on its own (its own client, from the URL), as in
	// production.
	w, err := worker.New(cfg, worker.Params{Store: st, Registerer: prometheus.NewRegistry(), Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	e := &env{t: t, client: c, cfg: w.Config(), w: w}

	e.send("before", "delete_case_bundle", map[string]any{"fixture_hash": hashN(1)})
	<-st.entered
	e.waitReplies(1)
	if !w.Ready() {
		t.Fatal("not ready before the outage")
	}

	// A message in flight when Valkey goes down.
	st.close()
	e.send("inflight", "delete_case_bundle", map[string]any{"fixture_hash": hashN(2)})
	<-st.entered
	srv.stop()
	down := time.Now()
	testwait.Eventually(t, 5*time.Second, "the worker not ready", func() bool { return !w.Ready() })
	t.Logf("not ready %v after Valkey went down", time.Since(down).Round(time.Millisecond))
	st.open() // its work ends while Valkey is down: the reply and ack fail
	time.Sleep(*outage - time.Since(down))
	if w.Ready() {
		t.Fatal("ready while Valkey is down")
	}

	srv.start()
	back := time.Now()
	testwait.Eventually(t, 10*time.Second, "the worker ready again", w.Ready)
	t.Logf("ready %v after Valkey came back", time.Since(back).Round(time.Millisecond))
	e.send("after", "delete_case_bundle", map[string]any{"fixture_hash": hashN(3)})
	sent := time.Now()
	testwait.Eventually(t, 10*time.Second, "one reply to the message sent after the outage", func() bool { return repliesByID(e.replies())["after"] == 1 })
	t.Logf("a message sent after the return answered in %v", time.Since(sent).Round(time.Millisecond))
	got := e.waitReplies(3)
	for id, n := range repliesByID(got) {
		if n != 1 {
			t.Errorf("%d replies to %s, want 1", n, id)
		}
	}
	for _, r := range got {
		wantReply(t, r, messages.StatusOK, "")
	}
	// No more replies come later (the in-flight one is not answered twice).
	time.Sleep(time.Second)
	if n := len(e.replies()); n != 3 {
		t.Errorf("%d replies, want 3", n)
	}
}

// consumerPending is XPENDING's per-consumer summary of the message stream.
func (e *env) consumerPending(stream, group string) map[string]int64 {
	e.t.Helper()
	res, err := e.client.Do(context.Background(), e.client.B().Xpending().Key(stream).Group(group).Build()).ToArray()
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]int64{}
	if len(res) < 4 {
		return out
	}
	rows, _ := res[3].ToArray()
	for _, r := range rows {
		f, _ := r.ToArray()
		if len(f) < 2 {
			continue
		}
		name, _ := f[0].ToString()
		s, _ := f[1].ToString()
		var n int64
		fmt.Sscan(s, &n)
		out[name] = n
	}
	return out
}

// A worker never holds more pending entries than its concurrency: not while
// its handlers are slow, and not when they fail transiently either (a failed
// entry keeps its slot until it is reclaimed).
func TestPendingNeverExceedsConcurrency(t *testing.T) {
	t.Parallel()
	st := &countingStore{Store: memstore.New(memstore.Options{})}
	gs := &gateStore{Store: st}
	gs.close()
	e := setup(t, gs, func(c *worker.Config) {
		c.Concurrency = 2
		c.ClaimIdle = 200 * time.Millisecond
		c.MaxDeliveries = 100
	})
	const n = 12
	for i := range n {
		e.send(fmt.Sprint("p", i), "delete_case_bundle", map[string]any{"fixture_hash": hashN(i)})
	}
	check := func(phase string, d time.Duration) {
		deadline := time.Now().Add(d)
		for time.Now().Before(deadline) {
			if p := e.consumerPending(e.cfg.CaseStream, e.cfg.ConsumerGroup)["c1"]; p > 2 {
				t.Fatalf("%s: consumer c1 holds %d pending entries, over its concurrency 2", phase, p)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	check("slow handlers", 1500*time.Millisecond)
	// Now every Delete fails transiently for a while: failed entries stay
	// pending, and must keep their slots.
	st.fails.Store(6)
	gs.open()
	check("failing handlers", 3*time.Second)
	got := e.waitReplies(n)
	for id, k := range repliesByID(got) {
		if k != 1 {
			t.Errorf("%d replies to %s", k, id)
		}
	}
}

// PYRULA_CONCURRENCY=0, PYRULA_RUN_CONCURRENCY=0 and
// PYRULA_SAVE_CONCURRENCY=0 mean their defaults; a negative value stops
// start-up naming the variable.
func TestConcurrencyZeroMeansDefault(t *testing.T) {
	t.Parallel()
	env := map[string]string{"PYRULA_CONSUMER_NAME": "c", "PYRULA_CONCURRENCY": "0", "PYRULA_RUN_CONCURRENCY": "0"}
	getenv := func(k string) string { return env[k] }
	c, err := worker.LoadConfigFrom(getenv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Concurrency != 64 || c.RunConcurrency != 4 || c.SaveConcurrency != 4 {
		t.Errorf("concurrency %d, run concurrency %d, save concurrency %d; want the defaults 64, 4 and 4", c.Concurrency, c.RunConcurrency, c.SaveConcurrency)
	}
	for _, name := range []string{"PYRULA_CONCURRENCY", "PYRULA_RUN_CONCURRENCY", "PYRULA_SAVE_CONCURRENCY"} {
		env["PYRULA_CONCURRENCY"], env["PYRULA_RUN_CONCURRENCY"], env["PYRULA_SAVE_CONCURRENCY"] = "0", "0", "0"
		env[name] = "-1"
		_, err := worker.LoadConfigFrom(getenv)
		if se := (*worker.SettingError)(nil); !errors.As(err, &se) || se.Variable != name {
			t.Errorf("%s=-1: %v, want an invalid setting naming it", name, err)
		}
	}
}

// failOpenStore fails every Open transiently and counts them.
type failOpenStore struct {
	store.Store
	opens atomic.Int64
}

func (s *failOpenStore) Open(ctx context.Context, h bundle.Hash) (io.ReadCloser, error) {
	s.opens.Add(1)
	return nil, errTransient
}

// A run whose execution fails transiently every time is dead-lettered after
// MaxDeliveries failures: its runs entry goes to <ns>:runs:dead, the run
// ends with run:error runtime_error (after a case:outcome line, it being a
// case run) and the entry is acked; it is not tried again.
func TestRunDeadLettered(t *testing.T) {
	t.Parallel()
	st := &failOpenStore{Store: memstore.New(memstore.Options{})}
	e := setup(t, st, func(c *worker.Config) {
		c.MaxDeliveries = 3
		c.RunLease = 300 * time.Millisecond
	})
	e.send("f1", "run_case", map[string]any{"target_name": "checkout",
		"source": map[string]any{"bundle": map[string]any{"fixture_hash": hashN(7)}}})
	res := runResult(t, e.waitReplies(1)[0])
	events := e.waitRun(res.RunID, 20*time.Second)
	kind, code := last(t, events)
	if kind != "run:error" || code != messages.RuntimeError || count(events, "case:outcome") != 1 {
		t.Fatalf("ended %s %s, want run:error runtime_error after a case:outcome: %v", kind, code, events)
	}
	if n := st.opens.Load(); n != 3 {
		t.Errorf("%d attempts, want 3 (PYRULA_MAX_DELIVERIES)", n)
	}
	dead, err := e.client.Do(context.Background(), e.client.B().Xrange().Key(e.cfg.Namespace+":runs:dead").Start("-").End("+").Build()).AsXRange()
	if err != nil || len(dead) != 1 {
		t.Fatalf("runs dead letters %+v, %v; want 1", dead, err)
	}
	if d := dead[0].FieldValues; d["run_id"] != res.RunID || d["failures"] != "3" || !strings.Contains(d["error"], "injected store outage") {
		t.Errorf("dead letter %v", d)
	}
	testwait.Eventually(t, 10*time.Second, "nothing pending on the runs stream", func() bool { return e.runsPending() == 0 })
	time.Sleep(time.Second)
	if n := st.opens.Load(); n != 3 {
		t.Errorf("%d attempts after the dead letter, want 3", n)
	}
}

// A run longer than the reclaim idle time on a healthy worker is never
// stolen by another worker of the group: its lease is renewed and its runs
// entry touched every third of the lease. On Valkey and the Valkey Cluster.
func TestLongRunNotStolen(t *testing.T) {
	t.Parallel()
	onServers(t, longRunNotStolen)
}

func longRunNotStolen(t *testing.T, setup newEnv) {
	e := setup(t, nil, func(c *worker.Config) {
		c.RunLease = 600 * time.Millisecond
		c.ClaimIdle = 200 * time.Millisecond
	})
	cfg2 := e.cfg
	cfg2.ConsumerName = "c2"
	w2, err := worker.New(cfg2, worker.Params{Client: e.client, Registry: e.reg, Registerer: prometheus.NewRegistry(), Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := w2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w2.Stop(context.Background()) })
	// 4 s: more than six times the reclaim idle time max(CLAIM_IDLE, RUN_LEASE).
	e.send("l1", "start_run", map[string]any{"target_name": "checkout", "inputs": map[string]any{"delay_ms": 4000}})
	res := runResult(t, e.waitReplies(1)[0])
	j := e.journalOf()
	consumers, owners := map[string]bool{}, map[string]bool{}
	ctx := context.Background()
	for start := time.Now(); ; {
		if time.Since(start) > 30*time.Second {
			t.Fatal("the run did not end within 30 s")
		}
		m, err := j.Meta(ctx, res.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if m.Status.Terminal() {
			break
		}
		if m.LeaseOwner != "" {
			owners[m.LeaseOwner] = true
		}
		rows, err := e.client.Do(ctx, e.client.B().Xpending().Key(e.cfg.Namespace+":runs").Group("run-workers").
			Start("-").End("+").Count(10).Build()).ToArray()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			f, _ := r.ToArray()
			name, _ := f[1].ToString()
			consumers[name] = true
		}
		time.Sleep(50 * time.Millisecond)
	}
	events := e.waitRun(res.RunID, time.Second)
	if kind, code := last(t, events); kind != "run:complete" {
		t.Fatalf("ended %s %s", kind, code)
	}
	if len(consumers) != 1 || len(owners) != 1 || count(events, "run:start") != 1 {
		t.Errorf("runs entry held by %v, lease owners %v, %d run:start; want one each", consumers, owners, count(events, "run:start"))
	}
}

// streamIDs lists the ids of the entries of stream.
func (e *env) streamIDs(stream string) []string {
	e.t.Helper()
	entries, err := e.client.Do(context.Background(), e.client.B().Xrange().Key(stream).Start("-").End("+").Build()).AsXRange()
	if err != nil {
		e.t.Fatal(err)
	}
	ids := make([]string, len(entries))
	for i, en := range entries {
		ids[i] = en.ID
	}
	return ids
}

// consumers maps the consumers of group on stream to their pending counts.
func (e *env) consumers(stream, group string) map[string]int64 {
	e.t.Helper()
	rows, err := e.client.Do(context.Background(), e.client.B().XinfoConsumers().Key(stream).Group(group).Build()).ToArray()
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]int64{}
	for _, r := range rows {
		m, err := r.AsMap()
		if err != nil {
			e.t.Fatal(err)
		}
		nm, pm := m["name"], m["pending"]
		name, _ := nm.ToString()
		n, _ := pm.AsInt64()
		out[name] = n
	}
	return out
}

func (e *env) xadd(msgID string) string {
	e.t.Helper()
	raw := fmt.Sprintf(`{"message_id":%q,"type":"delete_case_bundle","body":{"fixture_hash":%q}}`, msgID, hashN(len(msgID)))
	id, err := e.client.Do(context.Background(), e.client.B().Xadd().Key(e.cfg.CaseStream).Id("*").FieldValue().FieldValue("message", raw).Build()).ToString()
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

// Maintenance trims the entries every group acked and nothing else (not a
// pending one, not an undelivered one, not one another group has yet to
// read), and deletes idle consumers without pending entries, never one with
// pending entries.
// It runs against real Valkey, the Valkey Cluster and the embedded server.
func TestTrimAndConsumerCleanup(t *testing.T) {
	t.Parallel()
	mod := func(c *worker.Config) {
		c.Concurrency = 1
		c.ClaimIdle = time.Hour // nothing is reclaimed in this test
		c.MaintenanceInterval = 100 * time.Millisecond
		c.ConsumerExpiry = 500 * time.Millisecond
	}
	t.Run("valkey", func(t *testing.T) {
		t.Parallel()
		gs := &gateStore{Store: memstore.New(memstore.Options{}), entered: make(chan string, 16)}
		trimAndCleanup(t, setup(t, gs, mod), gs, true)
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		gs := &gateStore{Store: memstore.New(memstore.Options{}), entered: make(chan string, 16)}
		trimAndCleanup(t, setupWith(t, testenv.ValkeyClusterClient(t), gs, mod), gs, true)
	})
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		s, err := memvalkey.Start()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		c, err := s.NewClient()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		gs := &gateStore{Store: memstore.New(memstore.Options{}), entered: make(chan string, 16)}
		// miniredis v2.40.0 reports no idle time (-1) for consumers that
		// only XREADGROUP, so none is ever old enough to delete there.
		trimAndCleanup(t, setupWith(t, c, gs, mod), gs, false)
	})
}

func trimAndCleanup(t *testing.T, e *env, gs *gateStore, idleKnown bool) {
	t.Cleanup(gs.open) // runs before the worker's Stop: nothing stays blocked
	ctx := context.Background()
	stream, group := e.cfg.CaseStream, e.cfg.ConsumerGroup
	// Two messages handled and acked.
	e.xadd("a1")
	e.xadd("a2")
	<-gs.entered
	<-gs.entered
	testwait.Eventually(t, 10*time.Second, "two replies", func() bool { return len(e.replies()) == 2 })
	// b1 in flight (pending to c1), b2 pending to a consumer that never
	// acks, b3 not delivered (c1 has no free slot), and an idle consumer
	// with nothing pending.
	gs.close()
	b1 := e.xadd("b1")
	<-gs.entered
	b2 := e.xadd("b2")
	if err := e.client.Do(ctx, e.client.B().Xreadgroup().Group(group, "holder").Count(1).Streams().Key(stream).Id(">").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	b3 := e.xadd("b3")
	if idleKnown {
		if err := e.client.Do(ctx, e.client.B().XgroupCreateconsumer().Key(stream).Group(group).Consumer("ghost").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	want := strings.Join([]string{b1, b2, b3}, " ")
	testwait.Eventually(t, 10*time.Second, "the ghost consumer deleted and the stream trimmed", func() bool {
		_, ghost := e.consumers(stream, group)["ghost"]
		return !ghost && strings.Join(e.streamIDs(stream), " ") == want
	})
	time.Sleep(time.Second) // many more passes: nothing more goes
	if got := strings.Join(e.streamIDs(stream), " "); got != want {
		t.Fatalf("entries %s, want %s (the acked ones trimmed, nothing else)", got, want)
	}
	if c := e.consumers(stream, group); c["holder"] != 1 || c["c1"] != 1 {
		t.Fatalf("consumers %v: holder and c1 must stay with their pending entries", c)
	}
	// Everything acked: the stream keeps only its last delivered entry.
	// Then another group that has read nothing holds every later entry.
	if err := e.client.Do(ctx, e.client.B().Xack().Key(stream).Group(group).Id(b2).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	gs.open()
	testwait.Eventually(t, 10*time.Second, "four replies and the stream trimmed to the last entry", func() bool {
		_, holder := e.consumers(stream, group)["holder"]
		return len(e.replies()) == 4 && (!holder || !idleKnown) && strings.Join(e.streamIDs(stream), " ") == b3
	})
	if err := e.client.Do(ctx, e.client.B().XgroupCreate().Key(stream).Group("other").Id(b3).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	c1 := e.xadd("c1")
	testwait.Eventually(t, 10*time.Second, "five replies", func() bool { return len(e.replies()) == 5 })
	time.Sleep(time.Second)
	if got := strings.Join(e.streamIDs(stream), " "); got != b3+" "+c1 {
		t.Fatalf("entries %s, want %s %s (group other has not read %s)", got, b3, c1, c1)
	}
}

// An entry the consumer re-reads from its own pending entries at start
// after it was delivered more than MaxDeliveries times (it kept taking the
// worker down) is dead-lettered, not handled again.
func TestOwnPendingDeadLetteredAtStart(t *testing.T) {
	t.Parallel()
	gs := &gateStore{Store: memstore.New(memstore.Options{}), entered: make(chan string, 16)}
	gs.close()
	t.Cleanup(gs.open)
	e := setup(t, gs, func(c *worker.Config) {
		c.MaxDeliveries = 2
		c.ClaimIdle = time.Hour // only the re-read at start delivers it again
	})
	kill := func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		e.w.Stop(ctx) // cancels the handler at once: the entry stays pending
	}
	e.send("poison", "delete_case_bundle", map[string]any{"fixture_hash": zeroHash})
	<-gs.entered // delivery 1
	kill()
	e.start(gs)
	<-gs.entered // delivery 2, re-read at start
	kill()
	e.start(gs) // delivery 3 is over the limit: dead-lettered unhandled
	r := e.waitReplies(1)[0]
	wantReply(t, r, messages.StatusError, messages.RuntimeError)
	dead, err := e.client.Do(context.Background(), e.client.B().Xrange().Key(e.cfg.CaseStream+":dead").Start("-").End("+").Build()).AsXRange()
	if err != nil || len(dead) != 1 || dead[0].FieldValues["deliveries"] != "2" {
		t.Fatalf("dead letters %+v, %v; want one after 2 deliveries", dead, err)
	}
	select {
	case <-gs.entered:
		t.Fatal("handled a third time")
	default:
	}
}

// The executor never holds more runs entries pending than its run
// concurrency either: a run that failed transiently keeps its slot until it
// is reclaimed.
func TestRunsPendingNeverExceedRunConcurrency(t *testing.T) {
	t.Parallel()
	st := &failOpenStore{Store: memstore.New(memstore.Options{})}
	e := setup(t, st, func(c *worker.Config) {
		c.RunConcurrency = 1
		c.MaxDeliveries = 100
		c.RunLease = 300 * time.Millisecond
	})
	for i := range 3 {
		e.send(fmt.Sprint("rp", i), "run_case", map[string]any{"target_name": "checkout",
			"source": map[string]any{"bundle": map[string]any{"fixture_hash": hashN(i)}}})
	}
	e.waitReplies(3)
	testwait.Eventually(t, 10*time.Second, "three opens of the bundle", func() bool { return st.opens.Load() >= 3 })
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if p := e.consumerPending(e.cfg.Namespace+":runs", "run-workers")["c1"]; p > 1 {
			t.Fatalf("consumer c1 holds %d runs entries pending, over its run concurrency 1", p)
		}
	}
	// And the parked runs are still retried (the one slot is not stuck).
	n := st.opens.Load()
	testwait.Eventually(t, 10*time.Second, "three more opens of the bundle", func() bool { return st.opens.Load() >= n+3 })
}
