package replay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/replay"
)

// benchTarget is a workflow of N read steps: fetch:0 … fetch:N-1.
const benchTarget = "bench_fetch_loop"

type benchInputs struct {
	N int `json:"n"`
}

type fetchIn struct {
	ID    int    `json:"id"`
	Query string `json:"query"`
}

type fetchOut struct {
	ID     int      `json:"id"`
	Status string   `json:"status"`
	Total  float64  `json:"total"`
	Items  []string `json:"items"`
}

func benchRegistry(b *testing.B) *flow.Registry {
	b.Helper()
	reg := flow.NewRegistry()
	err := flow.RegisterWorkflow(reg, flow.Workflow[benchInputs, int]{
		Name: benchTarget, CodeVersion: "bench/v1", Defaults: benchInputs{N: 0},
		Steps: []flow.Decl{flow.DeclareStep("fetch", flow.Read)},
		Run: func(ctx context.Context, in benchInputs) (int, error) {
			sum := 0
			for i := range in.N {
				out, err := flow.Step(ctx, "fetch", fetchIn{ID: i, Query: "select * from orders where id = $1"},
					func(_ context.Context, in fetchIn) (fetchOut, error) {
						return fetchOut{ID: in.ID, Status: "shipped", Total: float64(in.ID) + 0.5, Items: []string{"a", "b", "c"}}, nil
					}, flow.WithEffect(flow.Read))
				if err != nil {
					return 0, err
				}
				sum += out.ID
			}
			return sum, nil
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	return reg
}

// benchBundleFile records one live run of n fetch calls in a MemLog,
// captures it with fork_after_seq = 1 (only run:start in the history, so
// every call is post-fork), and writes the bundle's zstd blob to a file.
func benchBundleFile(b *testing.B, reg *flow.Registry, n int) string {
	b.Helper()
	ctx := context.Background()
	log := flow.NewMemLog()
	rt, err := flow.NewRuntime(flow.Config{Registry: reg, Log: log})
	if err != nil {
		b.Fatal(err)
	}
	inputs := map[string]json.RawMessage{"n": json.RawMessage(fmt.Sprint(n))}
	out, err := rt.Run(ctx, flow.RunParams{RunID: "rec", Target: benchTarget, Inputs: inputs})
	if err != nil || out.Status != flow.StatusComplete {
		b.Fatalf("record n=%d: %+v %v", n, out, err)
	}
	var history []json.RawMessage
	var recInputs json.RawMessage
	for _, ev := range log.Events("rec") {
		raw, err := json.Marshal(ev)
		if err != nil {
			b.Fatal(err)
		}
		history = append(history, raw)
		if ev.Kind == flow.EventRunStart {
			recInputs = ev.Inputs
		}
	}
	fork := int64(1)
	info, _ := reg.Lookup(benchTarget)
	cb, err := bundle.Encode(&bundle.Bundle{
		Manifest: bundle.Manifest{Format: 1, Kind: bundle.KindWorkflow, TargetName: benchTarget, CodeVersion: "bench/v1",
			ForkAfterSeq: &fork, Inputs: recInputs, Registration: info.Registration, Source: bundle.Source{RunID: "rec"}},
		History: history[:fork],
		Results: log.Results("rec"),
	})
	if err != nil {
		b.Fatal(err)
	}
	var blob bytes.Buffer
	if err := cb.WriteBlob(&blob); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), fmt.Sprintf("fetch-%d.case", n))
	if err := os.WriteFile(path, blob.Bytes(), 0o600); err != nil {
		b.Fatal(err)
	}
	return path
}

// replayFile is one `pyrula case run FILE --replay-only`: open the file,
// read and verify the bundle (decompress, canonicalise, hash), decode it and
// run it through the engine; every call must be reused and the run
// complete with nothing unconsumed.
func replayFile(b *testing.B, reg *flow.Registry, path string, n int) {
	ctx := context.Background()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	cb, err := bundle.Read(f, bundle.Options{})
	f.Close()
	if err != nil {
		b.Fatal(err)
	}
	bd, err := cb.Decode()
	if err != nil {
		b.Fatal(err)
	}
	rep, err := replay.Run(ctx, replay.Params{Bundle: bd, FixtureHash: string(cb.Hash()), Canonical: true, RunID: "case",
		Registry: reg, Log: flow.NewMemLog(), Options: replay.Options{ReplayOnly: true}})
	if err != nil {
		b.Fatal(err)
	}
	o := rep.Outcome
	if o.Status != flow.StatusComplete || rep.ExitStatus() != 0 || o.Provenance[replay.ProvReused] != n ||
		len(rep.Calls) != n || o.LiveCalls != 0 || o.PrefixCalls != 0 {
		b.Fatalf("n=%d: outcome %+v (calls %d)", n, o, len(rep.Calls))
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
