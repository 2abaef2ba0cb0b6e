package valkeyjournal_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/internal/archivetest"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
	"github.com/pyrula/caseworker/runevent"
)

// benchCalls is the size of a benchmarked run.
const benchCalls = 10_000

// benchRun is the events and results of a run of benchCalls step calls.
type benchRun struct {
	starts, dones []journal.Event
	results       []bundle.Result
}

func newBenchRun() *benchRun {
	r := &benchRun{}
	for n := range benchCalls {
		c := journal.Call{Kind: "step", Key: fmt.Sprintf("quote:%d", n), Fingerprint: fmt.Sprintf("%064x", n), Effect: "read"}
		s, _ := journal.NewEvent(runevent.CallStart, map[string]any{"call": c, "input": map[string]any{"sku": "SKU-42", "qty": n}})
		d, _ := journal.NewEvent(runevent.CallDone, map[string]any{"call": c})
		r.starts = append(r.starts, s)
		r.dones = append(r.dones, d)
		r.results = append(r.results, bundle.Result{Kind: string(c.Kind), Key: c.Key, Fingerprint: c.Fingerprint,
			Result: []byte(fmt.Sprintf(`{"price":%d.25,"currency":"EUR"}`, n))})
	}
	return r
}

// record writes one run of benchCalls calls the way the runtime does:
// with per 0, call:start durable before the call runs, then call:done with
// its result; with per 1, the three in one append (a call that needs no
// durable start); with per n, n calls' events and results in one append (a
// case run's held batches of recorded calls).
func (r *benchRun) record(ctx context.Context, j journal.Journal, id string, per int) error {
	lease, err := j.Create(ctx, journal.CreateParams{RunID: id, TargetName: "bench", Owner: "bench"})
	if err != nil {
		return err
	}
	for n := 0; n < benchCalls; n += max(per, 1) {
		k := min(max(per, 1), benchCalls-n)
		done := journal.Batch{Events: []journal.Event{r.dones[n]}, Results: r.results[n : n+k]}
		switch {
		case per == 0:
			if _, err := j.Append(ctx, lease, journal.Batch{Events: r.starts[n : n+1]}); err != nil {
				return err
			}
		default:
			done.Events = make([]journal.Event, 0, 2*k)
			for c := n; c < n+k; c++ {
				done.Events = append(done.Events, r.starts[c], r.dones[c])
			}
		}
		if _, err := j.Append(ctx, lease, done); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkAppend measures journal append throughput against the test
// Valkey: each iteration records a run of 10,000 calls (20,000 call events,
// 10,000 result records). Reported: events/s, µs per append, and the Valkey
// server's CPU per event (redis_cpu_us/event; the server's, so run it on a
// Valkey nothing else uses).
//
//	PYRULA_TEST_VALKEY_URL=redis://127.0.0.1:6379/0 go test -run '^$' -bench Append -benchtime 3x ./journal/valkeyjournal
func BenchmarkAppend(b *testing.B) {
	for _, bc := range []struct {
		name string
		per  int
		runs int
	}{
		{"StartThenDone", 0, 1},       // 2 appends per call, one run at a time
		{"OneAppendPerCall", 1, 1},    // start+done+result in one append
		{"StartThenDone/8runs", 0, 8}, // 8 runs recorded concurrently
		{"Held256", 256, 1},           // 256 calls per append, as a case run holds its recorded calls
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := newClient(b)
			ns := testenv.UniqueName(b, "jbench")
			cleanup(b, c, ns)
			j, err := valkeyjournal.New(c, valkeyjournal.Options{Namespace: ns})
			if err != nil {
				b.Fatal(err)
			}
			run := newBenchRun()
			ctx := context.Background()
			i := 0
			rcpu0 := testenv.ServerCPU(c)
			b.ResetTimer()
			for b.Loop() {
				var wg sync.WaitGroup
				errs := make(chan error, bc.runs)
				for range bc.runs {
					i++
					id := fmt.Sprintf("run-%d", i)
					wg.Add(1)
					go func() {
						defer wg.Done()
						if err := run.record(ctx, j, id, bc.per); err != nil {
							errs <- err
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
			}
			events := float64(b.N * bc.runs * 2 * benchCalls)
			appends := float64(b.N * bc.runs * benchCalls)
			switch {
			case bc.per == 0:
				appends *= 2
			case bc.per > 1:
				appends = float64(b.N * bc.runs * ((benchCalls + bc.per - 1) / bc.per))
			}
			b.ReportMetric(events/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(b.Elapsed().Seconds()*1e6/appends*float64(bc.runs), "µs/append")
			b.ReportMetric(float64((testenv.ServerCPU(c)-rcpu0).Microseconds())/events, "redis_cpu_us/event")
		})
	}
}

// BenchmarkAppendAnchor is the anchor of BenchmarkAppend, run beside it: the
// same events and records written with plain XADD and HSET commands (no
// script, no lease check, no canonicalisation), call:start in one round trip
// and call:done with its record pipelined in a second. It bounds what a
// fenced append could cost on this server and client.
//
//	PYRULA_TEST_VALKEY_URL=redis://127.0.0.1:6379/0 go test -run '^$' -bench Append -benchtime 3x ./journal/valkeyjournal
func BenchmarkAppendAnchor(b *testing.B) {
	c := newClient(b)
	ns := testenv.UniqueName(b, "jbench")
	cleanup(b, c, ns)
	run := newBenchRun()
	starts := make([]string, benchCalls)
	dones := make([]string, benchCalls)
	for n := range benchCalls {
		s, _ := run.starts[n].JSON()
		d, _ := run.dones[n].JSON()
		starts[n], dones[n] = string(s), string(d)
	}
	ctx := context.Background()
	i := 0
	for b.Loop() {
		i++
		_, events, results := valkeyjournal.Keys(ns, fmt.Sprintf("run-%d", i))
		for n := range benchCalls {
			if err := c.Do(ctx, c.B().Xadd().Key(events).Id(fmt.Sprintf("0-%d", 2*n+1)).FieldValue().FieldValue("event", starts[n]).Build()).Error(); err != nil {
				b.Fatal(err)
			}
			for _, r := range c.DoMulti(ctx,
				c.B().Xadd().Key(events).Id(fmt.Sprintf("0-%d", 2*n+2)).FieldValue().FieldValue("event", dones[n]).Build(),
				c.B().Hset().Key(results).FieldValue().FieldValue(run.results[n].Key, string(run.results[n].Result)).Build()) {
				if err := r.Error(); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.ReportMetric(float64(b.N*2*benchCalls)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(b.Elapsed().Seconds()*1e6/float64(b.N*2*benchCalls), "µs/roundtrip")
}

// BenchmarkRun measures reading a whole 10,000-call run (20,001 events,
// 10,000 results) as a capture does: from Valkey, and from the archive
// after the keys are gone.
//
//	PYRULA_TEST_VALKEY_URL=… PYRULA_TEST_POSTGRES_DSN=… go test -run '^$' -bench 'Run$' ./journal/valkeyjournal
func BenchmarkRun(b *testing.B) {
	c := newClient(b)
	ns := testenv.UniqueName(b, "jbench")
	cleanup(b, c, ns)
	arch := archivetest.New(b, ns)
	j, err := valkeyjournal.New(c, valkeyjournal.Options{Namespace: ns, Archive: arch})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	run := newBenchRun()
	if err := run.record(ctx, j, "run-1", 1); err != nil {
		b.Fatal(err)
	}
	lease, err := j.Acquire(ctx, journal.AcquireParams{RunID: "run-1", Owner: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	end, _ := journal.NewEvent(runevent.RunComplete, nil)
	if _, err := j.Finish(ctx, lease, journal.Batch{Events: []journal.Event{end}}); err != nil {
		b.Fatal(err)
	}
	read := func(b *testing.B, want journal.Origin) {
		for b.Loop() {
			r, err := j.Run(ctx, "run-1")
			if err != nil {
				b.Fatal(err)
			}
			if len(r.Events) != 2*benchCalls+2 || len(r.Results) != benchCalls || r.Meta.Origin != want {
				b.Fatalf("read %d events, %d results from %s", len(r.Events), len(r.Results), r.Meta.Origin)
			}
		}
		b.ReportMetric(b.Elapsed().Seconds()*1e3/float64(b.N), "ms/run")
	}
	b.Run("Valkey", func(b *testing.B) { read(b, journal.OriginValkey) })
	mk, ek, rk := valkeyjournal.Keys(ns, "run-1")
	if err := c.Do(ctx, c.B().Del().Key(mk, ek, rk).Build()).Error(); err != nil {
		b.Fatal(err)
	}
	b.Run("Archive", func(b *testing.B) { read(b, journal.OriginArchive) })
}
