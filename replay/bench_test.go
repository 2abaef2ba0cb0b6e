package replay_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/replay/replaytest"
)

// benchRegistry, benchBundleFile and replayFile are replaytest's recorded
// workflow of N read steps (the Temporal anchor in bench/ replays the same).
func benchRegistry(b *testing.B) *flow.Registry {
	b.Helper()
	reg, err := replaytest.Registry()
	if err != nil {
		b.Fatal(err)
	}
	return reg
}

func benchBundleFile(b *testing.B, reg *flow.Registry, n int) string {
	b.Helper()
	path, err := replaytest.WriteBundle(context.Background(), reg, b.TempDir(), n)
	if err != nil {
		b.Fatal(err)
	}
	return path
}

// replayFile is one `pyrula case run FILE --replay-only`; every call must
// be reused and the run complete with nothing unconsumed.
func replayFile(b *testing.B, reg *flow.Registry, path string, n int) {
	if err := replaytest.ReplayFile(context.Background(), reg, path, n); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkReplayOnly: `case run FILE --replay-only` of a recorded run of
// N read-step calls, all post-fork (fork_after_seq = 1), per call, including
// loading and verifying the bundle file. docs/performance.md: ≤ 5 µs per call at
// 10,000 calls, and linear: the anchor is the same run at 1,000 calls in the
// same benchmark, so ratio-10k/1k ≈ 1 means linear. The sizes alternate
// within each iteration so that both see the same machine load. Besides the
// wall time it reports the process's CPU time per call (cpu-us/call-*, the
// garbage collector's included), which the load of other processes on a
// shared machine moves less.
//
//	go test -run '^$' -bench 'ReplayOnly$' -benchtime 10x ./replay/
func BenchmarkReplayOnly(b *testing.B) {
	reg := benchRegistry(b)
	sizes := []int{1_000, 10_000}
	paths := make([]string, len(sizes))
	for i, n := range sizes {
		paths[i] = benchBundleFile(b, reg, n)
		replayFile(b, reg, paths[i], n) // warm up and check once
	}
	elapsed := make([]time.Duration, len(sizes))
	cpu := make([]time.Duration, len(sizes))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for i, n := range sizes {
			t0, c0 := time.Now(), cpuTime()
			replayFile(b, reg, paths[i], n)
			elapsed[i] += time.Since(t0)
			cpu[i] += cpuTime() - c0
		}
	}
	b.StopTimer()
	perCall := func(d []time.Duration, i int) float64 {
		return float64(d[i].Nanoseconds()) / 1e3 / float64(b.N) / float64(sizes[i])
	}
	small, large := perCall(elapsed, 0), perCall(elapsed, 1)
	b.ReportMetric(small, "us/call-1k")
	b.ReportMetric(large, "us/call-10k")
	b.ReportMetric(large/small, "ratio-10k/1k")
	b.ReportMetric(large, "µs/call")
	if cpuSmall, cpuLarge := perCall(cpu, 0), perCall(cpu, 1); cpuSmall > 0 {
		b.ReportMetric(cpuSmall, "cpu-us/call-1k")
		b.ReportMetric(cpuLarge, "cpu-us/call-10k")
		b.ReportMetric(cpuLarge/cpuSmall, "cpu-ratio-10k/1k")
	}
}

// BenchmarkReplayOnlyN reports each size on its own (µs/call), for
// profiling one size (-bench 'ReplayOnlyN/10000') and for the linearity
// up to 100,000 calls.
func BenchmarkReplayOnlyN(b *testing.B) {
	reg := benchRegistry(b)
	sizes := []int{1_000, 10_000, 100_000}
	if testing.Short() {
		sizes = sizes[:2] // the smoke run of scripts/test
	}
	for _, n := range sizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			path := benchBundleFile(b, reg, n)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				replayFile(b, reg, path, n)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N)/float64(n), "µs/call")
		})
	}
}

// spanCounter is a span processor that counts the spans ended, so that
// the traced run's spans are made in full and then dropped.
type spanCounter struct{ ended atomic.Int64 }

func (c *spanCounter) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (c *spanCounter) OnEnd(sdktrace.ReadOnlySpan)                     { c.ended.Add(1) }
func (c *spanCounter) Shutdown(context.Context) error                  { return nil }
func (c *spanCounter) ForceFlush(context.Context) error                { return nil }

// BenchmarkTracedReplay: what tracing costs a case run. The same
// `--replay-only` run of 10,000 read-step calls, alternately untraced (the
// anchor: no span in its context, as in a worker without OTEL_*
// configuration) and under a sampled span of the OpenTelemetry SDK, where
// every call gets a span with its attributes (the spans are made in full,
// then dropped by a counting processor instead of exported). Reports the
// time per call of each and their ratio.
//
//	go test -run '^$' -bench 'TracedReplay$' -benchtime 10x ./replay/
func BenchmarkTracedReplay(b *testing.B) {
	const n = 10_000
	reg := benchRegistry(b)
	path := benchBundleFile(b, reg, n)
	counter := &spanCounter{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(counter))
	defer tp.Shutdown(context.Background())
	traced, run := tp.Tracer("bench").Start(context.Background(), "run")
	defer run.End()
	replayFile(b, reg, path, n) // warm up and check once
	var off, on time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		replayFile(b, reg, path, n)
		t1 := time.Now()
		if err := replaytest.ReplayFile(traced, reg, path, n); err != nil {
			b.Fatal(err)
		}
		off, on = off+t1.Sub(t0), on+time.Since(t1)
	}
	b.StopTimer()
	if spans := counter.ended.Load(); spans < int64(b.N)*n {
		b.Fatalf("%d call spans for %d traced runs of %d calls", spans, b.N, n)
	}
	perCall := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(b.N) / n }
	b.ReportMetric(perCall(off), "us/call-off")
	b.ReportMetric(perCall(on), "us/call-traced")
	b.ReportMetric(perCall(on)/perCall(off), "ratio-traced/off")
}
