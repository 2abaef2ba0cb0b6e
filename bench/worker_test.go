package bench_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/examples"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/flow/journallog"
	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/memstore"
	"github.com/pyrula/caseworker/worker"
)

var (
	flagMsgs       = flag.Int("msgs", 20000, "messages per iteration of BenchmarkThroughput")
	flagLatencyFor = flag.Duration("latency-for", 5*time.Second, "how long each iteration of BenchmarkLatency sends at -latency-rate")
	flagRate       = flag.Int("latency-rate", 1000, "messages per second sent by BenchmarkLatency")
	flagConc       = flag.Int("concurrency", 64, "PYRULA_CONCURRENCY of the workers (64 is its default), asynq's Concurrency and the bare loop's COUNT")
	flagAnchors    = flag.Bool("anchors", true, "run the anchors of BenchmarkThroughput (bare loop, asynq) and BenchmarkShadowSuite (in-process case runs); false: the workers alone, e.g. to profile them")
)

// zeroHash names a bundle that is not in the store: delete_case_bundle
// answers {"deleted":false} after a real store lookup.
const zeroHash = "0000000000000000000000000000000000000000000000000000000000000000"

// BenchmarkThroughput measures messages per second from a pre-filled stream
// until every message is answered and acked, for the worker (in-process,
// each worker with its own connection and consumer name, default settings
// but -concurrency) on delete_case_bundle of a bundle not in a memory store
// (distinct message ids) and on duplicates of one save_case (answered once
// before the timing), with 1 and 3 workers. Every iteration also runs the
// two anchors on the same number of messages right before the worker, so
// that the ratios compare runs under the same machine load: a bare
// XREADGROUP COUNT <concurrency> loop with one awaited XACK per entry, and
// asynq v0.26 with a no-op handler. It reports msgs/s of each, the ratios,
// the Valkey commands and round trips (awaited Do or DoMulti calls) per
// message counted on the workers' clients, and CPU per message of this
// process and of the Valkey server (the server's includes its other
// clients).
//
//	go test -run '^$' -bench Throughput -benchtime 3x .
func BenchmarkThroughput(b *testing.B) {
	for _, kind := range []string{"delete", "dupsave"} {
		for _, n := range []int{1, 3} {
			b.Run(fmt.Sprintf("%s-%dw", kind, n), func(b *testing.B) { benchWorker(b, kind, n) })
		}
	}
}

func newClient(tb testing.TB) valkey.Client {
	tb.Helper()
	opt, err := valkey.ParseURL(testenv.ValkeyURL(tb))
	if err != nil {
		tb.Fatal(err)
	}
	opt.DisableCache = true
	c, err := valkey.NewClient(opt)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// dropKeys unlinks every key matching pattern (SCAN, not KEYS: the Redis is
// shared).
func dropKeys(c valkey.Client, pattern string) {
	ctx := context.Background()
	cursor := uint64(0)
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return
		}
		if len(e.Elements) > 0 {
			c.Do(ctx, c.B().Unlink().Key(e.Elements...).Build())
		}
		if e.Cursor == 0 {
			return
		}
		cursor = e.Cursor
	}
}

// fill XADDs n messages to stream, 1,000 per pipeline.
func fill(tb testing.TB, c valkey.Client, stream string, n int, msg func(i int) string) {
	tb.Helper()
	const chunk = 1000
	for i := 0; i < n; i += chunk {
		cmds := make(valkey.Commands, 0, chunk)
		for j := i; j < min(n, i+chunk); j++ {
			cmds = append(cmds, c.B().Xadd().Key(stream).Id("*").FieldValue().FieldValue(messages.MessageField, msg(j)).Build())
		}
		for _, r := range c.DoMulti(context.Background(), cmds...) {
			if err := r.Error(); err != nil {
				tb.Fatalf("fill %s: %v", stream, err)
			}
		}
	}
}

func envelope(id string, typ messages.MessageType, body any) string {
	raw, _ := json.Marshal(body)
	msg, _ := json.Marshal(messages.Envelope{MessageID: id, Type: typ, Body: raw})
	return string(msg)
}

// runBare is an anchor: XREADGROUP COUNT <concurrency>, then one XACK per
// entry, each awaited, as the simplest streams consumer does. It returns
// the time to ack n pre-filled entries.
func runBare(tb testing.TB, c valkey.Client, n int) time.Duration {
	ctx := context.Background()
	stream := testenv.UniqueName(tb, "bench-bare")
	defer c.Do(ctx, c.B().Unlink().Key(stream).Build())
	if err := c.Do(ctx, c.B().XgroupCreate().Key(stream).Group("g").Id("0").Mkstream().Build()).Error(); err != nil {
		tb.Fatal(err)
	}
	fill(tb, c, stream, n, func(j int) string {
		return envelope("m"+strconv.Itoa(j), messages.DeleteCaseBundle, map[string]string{"fixture_hash": zeroHash})
	})
	start := time.Now()
	for acked := 0; acked < n; {
		res, err := c.Do(ctx, c.B().Xreadgroup().Group("g", "bare").Count(int64(*flagConc)).Block(100).Streams().Key(stream).Id(">").Build()).AsXRead()
		if err != nil && !valkey.IsValkeyNil(err) {
			tb.Fatal(err)
		}
		for _, e := range res[stream] {
			if err := c.Do(ctx, c.B().Xack().Key(stream).Group("g").Id(e.ID).Build()).Error(); err != nil {
				tb.Fatal(err)
			}
			acked++
		}
	}
	return time.Since(start)
}

// asynqOpt is the asynq connection to the test Valkey (loopback only).
func asynqOpt(tb testing.TB) asynq.RedisClientOpt {
	tb.Helper()
	opt, err := valkey.ParseURL(testenv.ValkeyURL(tb))
	if err != nil || len(opt.InitAddress) == 0 {
		tb.Fatalf("parse %s: %v", testenv.EnvValkeyURL, err)
	}
	if host, _, err := net.SplitHostPort(opt.InitAddress[0]); err != nil || !net.ParseIP(host).IsLoopback() && host != "localhost" {
		tb.Fatalf("%s must be a loopback address", testenv.EnvValkeyURL)
	}
	return asynq.RedisClientOpt{Addr: opt.InitAddress[0], DB: opt.SelectDB, Username: opt.Username, Password: opt.Password}
}

// runAsynq is an anchor: asynq v0.26, a no-op handler, Concurrency as the
// workers', n tasks enqueued (untimed, from 8 goroutines) on a queue of
// its own; timed from the server's start until every task is done (handled,
// and the queue's active and pending lists are empty).
func runAsynq(tb testing.TB, c valkey.Client, client *asynq.Client, rc asynq.RedisClientOpt, n int) time.Duration {
	ctx := context.Background()
	q := testenv.UniqueName(tb, "bench-asynq")
	defer func() {
		dropKeys(c, "asynq:{"+q+"}*")
		c.Do(ctx, c.B().Srem().Key("asynq:queues").Member(q).Build())
	}()
	var wg sync.WaitGroup
	var enqErr atomic.Value
	for g := range 8 {
		wg.Go(func() {
			for j := g; j < n; j += 8 {
				if _, err := client.EnqueueContext(ctx, asynq.NewTask("noop", nil), asynq.Queue(q)); err != nil {
					enqErr.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := enqErr.Load().(error); err != nil {
		tb.Fatal(err)
	}
	var handled atomic.Int64
	srv := asynq.NewServer(rc, asynq.Config{
		Concurrency: *flagConc, Queues: map[string]int{q: 1},
		LogLevel: asynq.FatalLevel, Logger: quietLogger{},
	})
	defer srv.Shutdown()
	start := time.Now()
	if err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { handled.Add(1); return nil })); err != nil {
		tb.Fatal(err)
	}
	waitFor(tb, 5*time.Minute, func() bool {
		if handled.Load() < int64(n) {
			return false
		}
		active, _ := c.Do(ctx, c.B().Llen().Key("asynq:{"+q+"}:active").Build()).AsInt64()
		pending, _ := c.Do(ctx, c.B().Llen().Key("asynq:{"+q+"}:pending").Build()).AsInt64()
		return active == 0 && pending == 0
	})
	return time.Since(start)
}

// quietLogger drops asynq's logs.
type quietLogger struct{}

func (quietLogger) Debug(...any) {}
func (quietLogger) Info(...any)  {}
func (quietLogger) Warn(...any)  {}
func (quietLogger) Error(...any) {}
func (quietLogger) Fatal(...any) {}

// waitFor polls ok every 2 ms until it holds, failing after limit.
func waitFor(tb testing.TB, limit time.Duration, ok func() bool) {
	tb.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			tb.Fatalf("condition not met within %v", limit)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// countingClient counts the commands and the awaited calls (Do, DoMulti:
// one round trip each) that go through it.
type countingClient struct {
	valkey.Client
	cmds, calls *atomic.Int64
}

func (c countingClient) Do(ctx context.Context, cmd valkey.Completed) valkey.ValkeyResult {
	c.calls.Add(1)
	c.cmds.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c countingClient) DoMulti(ctx context.Context, cmds ...valkey.Completed) []valkey.ValkeyResult {
	c.calls.Add(1)
	c.cmds.Add(int64(len(cmds)))
	return c.Client.DoMulti(ctx, cmds...)
}

func (c countingClient) Dedicated(fn func(valkey.DedicatedClient) error) error {
	return c.Client.Dedicated(func(d valkey.DedicatedClient) error {
		return fn(countingDedicated{DedicatedClient: d, cmds: c.cmds, calls: c.calls})
	})
}

type countingDedicated struct {
	valkey.DedicatedClient
	cmds, calls *atomic.Int64
}

func (c countingDedicated) Do(ctx context.Context, cmd valkey.Completed) valkey.ValkeyResult {
	c.calls.Add(1)
	c.cmds.Add(1)
	return c.DedicatedClient.Do(ctx, cmd)
}

func (c countingDedicated) DoMulti(ctx context.Context, cmds ...valkey.Completed) []valkey.ValkeyResult {
	c.calls.Add(1)
	c.cmds.Add(int64(len(cmds)))
	return c.DedicatedClient.DoMulti(ctx, cmds...)
}

// fleet is n in-process workers on one namespace, each with its own
// connection and consumer name, logging as `worker serve` does (JSON, info)
// to io.Discard, with metrics on a registry of their own.
type fleet struct {
	ws          []*worker.Worker
	cmds, calls atomic.Int64
}

func startFleet(tb testing.TB, ns string, n int, st store.Store, reg *flow.Registry) *fleet {
	tb.Helper()
	f := &fleet{}
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel))
	for i := range n {
		// Two clients, as a worker that connects itself opens (one for its
		// message loop's round trips), both counted.
		c := countingClient{Client: newClient(tb), cmds: &f.cmds, calls: &f.calls}
		loop := countingClient{Client: newClient(tb), cmds: &f.cmds, calls: &f.calls}
		w, err := worker.New(worker.Config{Namespace: ns, ConsumerName: fmt.Sprintf("w%d", i), Concurrency: *flagConc},
			worker.Params{Client: c, LoopClient: loop, Store: st, Registry: reg, Registerer: prometheus.NewRegistry(), Logger: log})
		if err != nil {
			tb.Fatal(err)
		}
		if err := w.Start(context.Background()); err != nil {
			tb.Fatal(err)
		}
		f.ws = append(f.ws, w)
	}
	return f
}

func (f *fleet) stop(tb testing.TB) {
	tb.Helper()
	var wg sync.WaitGroup
	for _, w := range f.ws {
		wg.Go(func() {
			if err := w.Stop(context.Background()); err != nil {
				tb.Error(err)
			}
		})
	}
	wg.Wait()
}

// answered reports whether stream replies holds n replies and the case
// stream has nothing pending (every reply precedes its ack).
func answered(c valkey.Client, cfg worker.Config, n int) bool {
	ctx := context.Background()
	got, err := c.Do(ctx, c.B().Xlen().Key(cfg.ReplyStream).Build()).AsInt64()
	if err != nil || got < int64(n) {
		return false
	}
	res, err := c.Do(ctx, c.B().Xpending().Key(cfg.CaseStream).Group(cfg.ConsumerGroup).Build()).ToArray()
	if err != nil || len(res) == 0 {
		return false
	}
	p, _ := res[0].AsInt64()
	return p == 0
}

// names are the default stream names of namespace ns.
func names(ns string) worker.Config {
	cfg, _ := worker.Config{Namespace: ns, ConsumerName: "x"}.Defaults()
	return cfg
}

// newRegistry registers the example targets (save_case captures checkout).
func newRegistry(tb testing.TB) *flow.Registry {
	tb.Helper()
	reg := flow.NewRegistry()
	if _, err := examples.Register(reg); err != nil {
		tb.Fatal(err)
	}
	return reg
}

// recordRun runs target live into namespace ns's journal.
func recordRun(tb testing.TB, c valkey.Client, ns string, reg *flow.Registry, target string) string {
	tb.Helper()
	j, err := valkeyjournal.New(c, valkeyjournal.Options{Namespace: ns})
	if err != nil {
		tb.Fatal(err)
	}
	log, err := journallog.New(j, journallog.Options{Owner: "bench"})
	if err != nil {
		tb.Fatal(err)
	}
	rt, err := host.NewRuntime(host.Config{Registry: reg, Log: log})
	if err != nil {
		tb.Fatal(err)
	}
	runID := "run_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	out, err := rt.Run(context.Background(), host.RunParams{RunID: runID, Target: target})
	if err != nil || out.Status != host.StatusComplete {
		tb.Fatalf("run: %v %+v", err, out)
	}
	return runID
}

// prepareDupSave records a run, has one worker answer a save_case of it (so
// its idempotency record exists) and returns that message, whose
// duplicates the benchmark sends.
func prepareDupSave(tb testing.TB, c valkey.Client, ns string, st store.Store, reg *flow.Registry) string {
	tb.Helper()
	runID := recordRun(tb, c, ns, reg, "checkout")
	msg := envelope("save-1", messages.SaveCase, map[string]string{"target_name": "checkout", "run_id": runID, "kind": "workflow"})
	f := startFleet(tb, ns, 1, st, reg)
	cfg := names(ns)
	fill(tb, c, cfg.CaseStream, 1, func(int) string { return msg })
	waitFor(tb, 30*time.Second, func() bool { return answered(c, cfg, 1) })
	f.stop(tb)
	entries, err := c.Do(context.Background(), c.B().Xrange().Key(cfg.ReplyStream).Start("-").End("+").Build()).AsXRange()
	if err != nil || len(entries) != 1 {
		tb.Fatalf("first save_case: %v %v", entries, err)
	}
	var r messages.Reply
	if err := json.Unmarshal([]byte(entries[0].FieldValues[messages.ReplyField]), &r); err != nil || r.Status != messages.StatusOK {
		tb.Fatalf("first save_case: %s %v", entries[0].FieldValues[messages.ReplyField], err)
	}
	c.Do(context.Background(), c.B().Del().Key(cfg.ReplyStream).Build())
	return msg
}

// benchWorker measures n workers on *flagMsgs messages of kind "delete"
// (distinct message ids, delete_case_bundle of a bundle not in the memory
// store) or "dupsave" (one save_case message id, answered once before the
// timing, sent again *flagMsgs times).
func benchWorker(b *testing.B, kind string, n int) {
	c := newClient(b)
	reg := newRegistry(b)
	msgs := *flagMsgs
	var total time.Duration
	rc := asynqOpt(b)
	aclient := asynq.NewClient(rc)
	b.Cleanup(func() { aclient.Close() })
	var cmds, calls int64
	var cpu, rcpu, bare, aq time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if *flagAnchors {
			bare += runBare(b, c, msgs)
			aq += runAsynq(b, c, aclient, rc, msgs)
		}
		ns := testenv.UniqueName(b, "bench")
		st := memstore.New(memstore.Options{})
		cfg := names(ns)
		msg := func(j int) string {
			return envelope("m"+strconv.Itoa(j), messages.DeleteCaseBundle, map[string]string{"fixture_hash": zeroHash})
		}
		if kind == "dupsave" {
			dup := prepareDupSave(b, c, ns, st, reg)
			msg = func(int) string { return dup }
		}
		fill(b, c, cfg.CaseStream, msgs, msg)
		b.StartTimer()
		start := time.Now()
		cpu0, rcpu0 := processCPU(), testenv.ServerCPU(c)
		f := startFleet(b, ns, n, st, reg)
		waitFor(b, 5*time.Minute, func() bool { return answered(c, cfg, msgs) })
		total += time.Since(start)
		cpu += processCPU() - cpu0
		rcpu += testenv.ServerCPU(c) - rcpu0
		b.StopTimer()
		cmds += f.cmds.Load()
		calls += f.calls.Load()
		f.stop(b)
		checkReplies(b, c, cfg, msgs)
		st.Close()
		dropKeys(c, ns+":*")
		b.StartTimer()
	}
	rate := float64(msgs*b.N) / total.Seconds()
	b.ReportMetric(rate, "msgs/s")
	bareRate := float64(msgs*b.N) / bare.Seconds()
	asynqRate := float64(msgs*b.N) / aq.Seconds()
	if *flagAnchors {
		b.ReportMetric(bareRate, "bare_msgs/s")
		b.ReportMetric(asynqRate, "asynq_msgs/s")
		b.ReportMetric(rate/asynqRate, "x_asynq")
		b.ReportMetric(rate/bareRate, "x_bare")
	}
	b.ReportMetric(float64(cmds)/float64(msgs*b.N), "cmds/msg")
	b.ReportMetric(float64(calls)/float64(msgs*b.N), "trips/msg")
	b.ReportMetric(float64(cpu.Microseconds())/float64(msgs*b.N), "cpu_us/msg")
	b.ReportMetric(float64(rcpu.Microseconds())/float64(msgs*b.N), "redis_cpu_us/msg")
}

// checkReplies checks that there are exactly n replies, all ok.
func checkReplies(tb testing.TB, c valkey.Client, cfg worker.Config, n int) {
	tb.Helper()
	got, err := c.Do(context.Background(), c.B().Xlen().Key(cfg.ReplyStream).Build()).AsInt64()
	if err != nil || got != int64(n) {
		tb.Fatalf("%d replies (%v), want %d", got, err, n)
	}
	last, err := c.Do(context.Background(), c.B().Xrevrange().Key(cfg.ReplyStream).End("+").Start("-").Count(1).Build()).AsXRange()
	if err != nil || len(last) != 1 {
		tb.Fatalf("last reply: %v", err)
	}
	var r messages.Reply
	if err := json.Unmarshal([]byte(last[0].FieldValues[messages.ReplyField]), &r); err != nil || r.Status != messages.StatusOK {
		tb.Fatalf("last reply %s: %v", last[0].FieldValues[messages.ReplyField], err)
	}
}

// stampStore records when Stat is called for each hash (a
// delete_case_bundle's first store call): the handler's moment for
// BenchmarkLatency.
type stampStore struct {
	store.Store
	at func(h bundle.Hash)
}

func (s stampStore) Stat(ctx context.Context, h bundle.Hash) (store.Info, error) {
	s.at(h)
	return s.Store.Stat(ctx, h)
}

// BenchmarkLatency sends messages at a steady -latency-rate (default 1,000
// msg/s) for -latency-for and reports percentiles of enqueue → reply (from
// before the XADD until a reader blocked on the reply stream sees the
// reply) and, for delete_case_bundle, enqueue → handler (until the store's
// Stat is called, the handler's first step; each message names its own hash).
//
//	go test -run '^$' -bench Latency -benchtime 1x .
func BenchmarkLatency(b *testing.B) {
	for _, kind := range []string{"delete", "dupsave"} {
		for _, n := range []int{1, 3} {
			b.Run(fmt.Sprintf("%s-%dw", kind, n), func(b *testing.B) { benchLatency(b, kind, n) })
		}
	}
}

func benchLatency(b *testing.B, kind string, workers int) {
	c := newClient(b)
	reader := newClient(b)
	reg := newRegistry(b)
	ctx := context.Background()
	per := time.Second / time.Duration(*flagRate)
	n := int(*flagLatencyFor / per)
	var toReply, toHandler []time.Duration
	for range b.N {
		ns := testenv.UniqueName(b, "bench")
		cfg := names(ns)
		sent := make([]atomic.Int64, n)
		handled := make([]atomic.Int64, n)
		mem := memstore.New(memstore.Options{})
		st := stampStore{Store: mem, at: func(h bundle.Hash) {
			if i, err := strconv.ParseInt(string(h[48:]), 16, 64); err == nil && i < int64(n) {
				handled[i].Store(time.Now().UnixNano())
			}
		}}
		msg := func(j int) string {
			return envelope("m"+strconv.Itoa(j), messages.DeleteCaseBundle, map[string]string{"fixture_hash": fmt.Sprintf("%064x", j)})
		}
		if kind == "dupsave" {
			dup := prepareDupSave(b, c, ns, st, reg)
			msg = func(int) string { return dup }
		}
		f := startFleet(b, ns, workers, st, reg)
		// The reader: replies carry the message id (m<i>), or for
		// duplicates arrive in the order sent.
		replied := make([]int64, 0, n)
		done := make(chan error, 1)
		go func() {
			last := "0"
			for len(replied) < n {
				res, err := reader.Do(ctx, reader.B().Xread().Count(1000).Block(2000).Streams().Key(cfg.ReplyStream).Id(last).Build()).AsXRead()
				if err != nil && !valkey.IsValkeyNil(err) {
					done <- err
					return
				}
				if err != nil {
					done <- errors.New("no reply within 2 s")
					return
				}
				now := time.Now().UnixNano()
				for _, e := range res[cfg.ReplyStream] {
					last = e.ID
					replied = append(replied, now)
				}
			}
			done <- nil
		}()
		start := time.Now()
		for i := range n {
			if d := time.Until(start.Add(time.Duration(i) * per)); d > 0 {
				time.Sleep(d)
			}
			sent[i].Store(time.Now().UnixNano())
			if err := c.Do(ctx, c.B().Xadd().Key(cfg.CaseStream).Id("*").FieldValue().FieldValue(messages.MessageField, msg(i)).Build()).Error(); err != nil {
				b.Fatal(err)
			}
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		f.stop(b)
		// Replies of distinct ids may arrive out of order: match them by id.
		if kind == "delete" {
			entries, err := c.Do(ctx, c.B().Xrange().Key(cfg.ReplyStream).Start("-").End("+").Build()).AsXRange()
			if err != nil {
				b.Fatal(err)
			}
			byID := make([]int64, n)
			for k, e := range entries {
				var r messages.Reply
				if err := json.Unmarshal([]byte(e.FieldValues[messages.ReplyField]), &r); err != nil {
					b.Fatal(err)
				}
				i, err := strconv.Atoi(r.MessageID[1:])
				if err != nil || i >= n {
					b.Fatalf("reply %+v", r)
				}
				byID[i] = replied[k]
			}
			replied = byID
			for i := range n {
				toHandler = append(toHandler, time.Duration(handled[i].Load()-sent[i].Load()))
			}
		}
		for i := range n {
			toReply = append(toReply, time.Duration(replied[i]-sent[i].Load()))
		}
		mem.Close()
		dropKeys(c, ns+":*")
	}
	reportPercentiles(b, "reply", toReply)
	if len(toHandler) > 0 {
		reportPercentiles(b, "handler", toHandler)
	}
}

func reportPercentiles(b *testing.B, name string, d []time.Duration) {
	slices.Sort(d)
	at := func(p float64) float64 {
		return float64(d[min(len(d)-1, int(p*float64(len(d))))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), name+"_p50_ms")
	b.ReportMetric(at(0.99), name+"_p99_ms")
	b.ReportMetric(float64(d[len(d)-1].Microseconds())/1000, name+"_max_ms")
}

// processCPU is the user and system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
