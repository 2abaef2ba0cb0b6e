package bench_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/replay/replaytest"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/pgstore"
	"github.com/pyrula/caseworker/store/resolve"
	"github.com/pyrula/caseworker/worker"
)

var (
	flagSuiteRuns      = flag.Int("suite-runs", 200, "recorded runs a BenchmarkShadowSuite iteration replays")
	flagSuiteCalls     = flag.Int("suite-calls", 100, "calls of each recorded run of BenchmarkShadowSuite")
	flagFirstCalls     = flag.String("first-call-sizes", "10,1000,100000", "bundle sizes (calls) of BenchmarkFirstPostForkCall; -short keeps the first two")
	flagRunConcurrency = flag.Int("run-concurrency", 0, "PYRULA_RUN_CONCURRENCY of the suite benchmarks' worker (0: the worker's default)")
	flagFirstStores    = flag.String("first-call-stores", "file,postgres,s3", "fixture stores of BenchmarkFirstPostForkCall (file, postgres, s3; postgres and s3 skip without their test servers)")
)

// startBenchWorker starts one in-process worker on namespace ns with the
// replaytest registry and store st, on client c and, for its message
// loop's round trips, a client of their own (as a worker that connects
// itself has).
func startBenchWorker(b *testing.B, c valkey.Client, ns string, reg *flow.Registry, st store.Store) {
	b.Helper()
	w, err := worker.New(worker.Config{Namespace: ns, ConsumerName: "bench", RunConcurrency: *flagRunConcurrency},
		worker.Params{Client: c, LoopClient: newClient(b), Store: st, Registry: reg, Registerer: prometheus.NewRegistry(), Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { w.Stop(context.Background()) })
}

// waitEvent blocks until the events stream key holds an event whose JSON
// contains marker, and returns when it saw it.
func waitEvent(b *testing.B, c valkey.Client, key, marker string, limit time.Duration) time.Time {
	b.Helper()
	last, deadline := "0", time.Now().Add(limit)
	for time.Now().Before(deadline) {
		res, err := c.Do(context.Background(), c.B().Xread().Count(1000).Block(200).Streams().Key(key).Id(last).Build()).AsXRead()
		if err != nil && !valkey.IsValkeyNil(err) {
			b.Fatalf("XREAD %s: %v", key, err)
		}
		for _, e := range res[key] {
			last = e.ID
			if strings.Contains(e.FieldValues["event"], marker) {
				return time.Now()
			}
		}
	}
	b.Fatalf("%s: no event with %s within %v", key, marker, limit)
	return time.Time{}
}

// BenchmarkShadowSuite measures a shadow suite on one worker process: a
// run_suite over -suite-runs recorded runs of -suite-calls calls each,
// selected from the journal and replayed only, from the message to its
// suite:outcome. Its anchor, run in the same iteration, is the same number
// of case runs of a bundle of the same run replayed in this process one
// after another (replaytest.ReplayFile: no Valkey, no journal). It reports
// cases/s and recorded calls/s of both, the suite's share of the anchor's
// rate (ratio), the process's and the Valkey server's CPU per recorded call
// during the suite (cpu_us/call, redis_cpu_us/call), and the load average.
// -anchors=false leaves the anchor out (to profile the worker alone).
//
//	go test -run '^$' -bench ShadowSuite -benchtime 3x .
func BenchmarkShadowSuite(b *testing.B) {
	runs, calls := *flagSuiteRuns, *flagSuiteCalls
	if testing.Short() {
		runs, calls = 20, 10
	}
	c := newClient(b)
	ns := testenv.UniqueName(b, "bsuite")
	b.Cleanup(func() { dropKeys(c, ns+":*") })
	reg, err := replaytest.Registry()
	if err != nil {
		b.Fatal(err)
	}
	j, err := valkeyjournal.New(c, valkeyjournal.Options{Namespace: ns})
	if err != nil {
		b.Fatal(err)
	}
	recordRuns(b, j, reg, runs, calls)
	file, err := replaytest.WriteBundle(context.Background(), reg, b.TempDir(), calls)
	if err != nil {
		b.Fatal(err)
	}
	startBenchWorker(b, c, ns, reg, nil)
	var suiteTime, anchorTime, cpu, rcpu time.Duration
	b.ResetTimer()
	for i := range b.N {
		if *flagAnchors {
			start := time.Now()
			for range runs {
				if err := replaytest.ReplayFile(context.Background(), reg, file, calls); err != nil {
					b.Fatal(err)
				}
			}
			anchorTime += time.Since(start)
		}
		id := fmt.Sprintf("suite-%d", i)
		start := time.Now()
		cpu0, rcpu0 := processCPU(), testenv.ServerCPU(c)
		fill(b, c, ns+":case-messages", 1, func(int) string {
			return envelope(id, messages.RunSuite, map[string]any{"suite_id": id, "target_name": replaytest.Target, "min_cases": runs,
				"cases": map[string]any{"journal": map[string]any{}},
				"arms":  []map[string]any{{"options": map[string]any{"replay_only": true}}}})
		})
		waitEvent(b, c, valkeyjournal.EventsKey(ns, id), `"kind":"run:complete"`, 10*time.Minute)
		suiteTime += time.Since(start)
		cpu += processCPU() - cpu0
		rcpu += testenv.ServerCPU(c) - rcpu0
	}
	b.StopTimer()
	suiteRate := float64(runs*b.N) / suiteTime.Seconds()
	anchorRate := float64(runs*b.N) / anchorTime.Seconds()
	b.ReportMetric(suiteRate, "suite_cases/s")
	b.ReportMetric(suiteRate*float64(calls), "suite_calls/s")
	if *flagAnchors {
		b.ReportMetric(anchorRate, "inprocess_cases/s")
		b.ReportMetric(suiteRate/anchorRate, "ratio")
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(runs*calls*b.N), "cpu_us/call")
	b.ReportMetric(float64(rcpu.Microseconds())/float64(runs*calls*b.N), "redis_cpu_us/call")
	b.ReportMetric(loadAverage(), "load")
}

// BenchmarkFirstPostForkCall measures, for bundles of each -first-call-sizes
// calls in each -first-call-stores fixture store (file, PostgreSQL, S3), the latency from the XADD of a replay-only
// run_case to the first case:call event of its run (its first post-fork
// call resolved), on one idle worker (each run ends before the next
// message is sent): p50 and p99 over the iteration's messages. Its anchor
// is the same bundle read and verified from the same store in this process
// (store.Load), timed in the same iteration: the ratio says what the
// queue, the lease and the journal add. Each of the two is timed after a
// garbage collection (collect).
//
//	go test -run '^$' -bench FirstPostForkCall -benchtime 20x .
func BenchmarkFirstPostForkCall(b *testing.B) {
	sizes := []int{}
	for _, s := range strings.Split(*flagFirstCalls, ",") {
		var n int
		if _, err := fmt.Sscan(s, &n); err == nil && n > 0 {
			sizes = append(sizes, n)
		}
	}
	if testing.Short() && len(sizes) > 2 {
		sizes = sizes[:2]
	}
	reg, err := replaytest.Registry()
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range sizes {
		for _, kind := range strings.Split(*flagFirstStores, ",") {
			b.Run(fmt.Sprintf("calls=%d/store=%s", n, kind), func(b *testing.B) {
				firstPostForkCall(b, reg, n, kind)
			})
		}
	}
}

// firstPostForkCall is one BenchmarkFirstPostForkCall: a bundle of n calls
// in a fresh store of kind (file, postgres or s3).
func firstPostForkCall(b *testing.B, reg *flow.Registry, n int, kind string) {
	c := newClient(b)
	ns := testenv.UniqueName(b, "bfirst")
	b.Cleanup(func() { dropKeys(c, ns+":*") })
	st := benchStore(b, kind)
	f, err := os.Open(mustBundle(b, reg, n))
	if err != nil {
		b.Fatal(err)
	}
	cb, err := bundle.Read(f, bundle.Options{})
	f.Close()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := store.Save(context.Background(), st, cb); err != nil {
		b.Fatal(err)
	}
	startBenchWorker(b, c, ns, reg, st)
	var latencies, loads []time.Duration
	b.ResetTimer()
	for i := range b.N {
		collect(b)
		start := time.Now()
		if _, err := store.Load(context.Background(), st, cb.Hash()); err != nil {
			b.Fatal(err)
		}
		loads = append(loads, time.Since(start))
		id := fmt.Sprintf("first-%d", i)
		collect(b)
		start = time.Now()
		fill(b, c, ns+":case-messages", 1, func(int) string {
			return envelope(id, messages.RunCase, map[string]any{"run_id": id, "target_name": replaytest.Target,
				"source": map[string]any{"bundle": map[string]any{"fixture_hash": string(cb.Hash())}}, "options": map[string]any{"replay_only": true}})
		})
		latencies = append(latencies, waitEvent(b, c, valkeyjournal.EventsKey(ns, id), `"kind":"case:call"`, 5*time.Minute).Sub(start))
		// The next message goes to an idle worker: what is measured
		// is the latency, not a queue behind the earlier runs.
		b.StopTimer()
		waitEvent(b, c, valkeyjournal.EventsKey(ns, id), `"kind":"run:complete"`, 10*time.Minute)
		b.StartTimer()
	}
	b.StopTimer()
	p50, p99 := percentile(latencies, 50), percentile(latencies, 99)
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99_ms")
	b.ReportMetric(float64(p50)/float64(percentile(loads, 50)), "p50/store_load")
	b.ReportMetric(loadAverage(), "load")
}

// collect runs a garbage collection outside the timing, so that what is
// timed next starts from a collected heap and pays for its own garbage
// only: the worker runs in the benchmark's process, and the garbage of a
// large run, or of the anchor's load, would otherwise be collected during
// whichever of the two comes next.
func collect(b *testing.B) {
	b.StopTimer()
	runtime.GC()
	b.StartTimer()
}

// benchStore is a fresh fixture store of kind, opened from its URL as the
// worker opens one: a file store in a temporary directory, a migrated
// PostgreSQL database of its own, or a bucket of its own on the test S3
// gateway (both skip when their test servers are not configured); closed
// when b ends.
func benchStore(b *testing.B, kind string) store.Store {
	b.Helper()
	ctx := context.Background()
	var url string
	switch kind {
	case "file":
		url = "file://" + filepath.Join(b.TempDir(), "store")
	case "postgres":
		url = testenv.FreshPostgresDatabase(b)
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			b.Fatal(err)
		}
		_, err = pgstore.Migrate(ctx, pool)
		pool.Close()
		if err != nil {
			b.Fatalf("migrate: %v", err)
		}
	case "s3":
		url = testenv.FreshS3Bucket(b, "pyrula-bench-first").StoreURL("cases")
	default:
		b.Fatalf("-first-call-stores: unknown store %q (want file, postgres or s3)", kind)
	}
	st, err := resolve.Open(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}

// mustBundle writes the replaytest bundle of n calls and returns its path.
func mustBundle(b *testing.B, reg *flow.Registry, n int) string {
	b.Helper()
	path, err := replaytest.WriteBundle(context.Background(), reg, b.TempDir(), n)
	if err != nil {
		b.Fatal(err)
	}
	return path
}

// percentile is the p-th percentile of d (nearest rank).
func percentile(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)]
}
