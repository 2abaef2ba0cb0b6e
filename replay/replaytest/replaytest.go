// Package replaytest holds the recorded workflow the case-run benchmarks
// replay: a target of N read steps, a bundle file of one recorded run of it,
// and one `pyrula case run FILE --replay-only` of that file. The replay
// package's benchmarks and the Temporal anchor in the bench module share it,
// so that both time the same case run.
package replaytest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/replay"
	"github.com/pyrula/caseworker/runevent"
)

// Target is the workflow's name: N read steps fetch:0 … fetch:N-1.
const Target = "bench_fetch_loop"

// Query is the query string of every call's input.
const Query = "select * from orders where id = $1"

// Inputs are the workflow's inputs.
type Inputs struct {
	N int `json:"n"`
}

// FetchIn is the input of one fetch call.
type FetchIn struct {
	ID    int    `json:"id"`
	Query string `json:"query"`
}

// FetchOut is the result of one fetch call.
type FetchOut struct {
	ID     int      `json:"id"`
	Status string   `json:"status"`
	Total  float64  `json:"total"`
	Items  []string `json:"items"`
}

// Fetch is the call itself: it runs only while recording; a case run takes
// its result from the recording.
func Fetch(_ context.Context, in FetchIn) (FetchOut, error) {
	return FetchOut{ID: in.ID, Status: "shipped", Total: float64(in.ID) + 0.5, Items: []string{"a", "b", "c"}}, nil
}

// Registry returns a registry holding Target, whose result is the sum of
// the ids.
func Registry() (*flow.Registry, error) {
	reg := flow.NewRegistry()
	err := flow.RegisterWorkflow(reg, flow.Workflow[Inputs, int]{
		Name: Target, CodeVersion: "bench/v1", Defaults: Inputs{N: 0},
		Steps: []flow.Decl{flow.DeclareStep("fetch", flow.Read)},
		Run: func(ctx context.Context, in Inputs) (int, error) {
			sum := 0
			for i := range in.N {
				out, err := flow.Step(ctx, "fetch", FetchIn{ID: i, Query: Query}, Fetch, flow.WithEffect(flow.Read))
				if err != nil {
					return 0, err
				}
				sum += out.ID
			}
			return sum, nil
		},
	})
	return reg, err
}

// WriteBundle records one live run of n fetch calls in a MemLog, captures
// it with fork_after_seq = 1 (only run:start in the history, so every call
// is after the fork, its result keeping its input), and writes the bundle's zstd blob to a file in dir,
// whose path it returns.
func WriteBundle(ctx context.Context, reg *flow.Registry, dir string, n int) (string, error) {
	log := host.NewMemLog()
	rt, err := host.NewRuntime(host.Config{Registry: reg, Log: log})
	if err != nil {
		return "", err
	}
	inputs := map[string]json.RawMessage{"n": json.RawMessage(strconv.Itoa(n))}
	out, err := rt.Run(ctx, host.RunParams{RunID: "rec", Target: Target, Inputs: inputs})
	if err != nil {
		return "", fmt.Errorf("record %d calls: %w", n, err)
	}
	if out.Status != host.StatusComplete {
		return "", fmt.Errorf("record %d calls: the run ended %s", n, out.Status)
	}
	var history []json.RawMessage
	var recInputs json.RawMessage
	for _, ev := range log.Events("rec") {
		raw, err := ev.JSON()
		if err != nil {
			return "", err
		}
		history = append(history, raw)
		if ev.Kind == runevent.RunStart {
			recInputs = ev.Inputs
		}
	}
	fork := int64(1)
	info, _ := reg.Lookup(Target)
	// As a capture writes them (journal/capture): the results of the calls
	// after the fork keep their inputs and the run_seq of their call:start.
	results := log.Results("rec")
	type start struct {
		input json.RawMessage
		seq   int64
	}
	starts := map[string]start{}
	for _, ev := range log.Events("rec") {
		if ev.Kind == runevent.CallStart && ev.Call != nil && ev.RunSeq > fork {
			starts[ev.Call.ID()] = start{ev.Input, ev.RunSeq}
		}
	}
	for i, r := range results {
		if s, ok := starts[r.Kind+":"+r.Key]; ok {
			results[i].Input, results[i].StartSeq = s.input, s.seq
		}
	}
	cb, err := bundle.Encode(&bundle.Bundle{
		Manifest: bundle.Manifest{Format: 1, Kind: bundle.KindWorkflow, TargetName: Target, CodeVersion: "bench/v1",
			ForkAfterSeq: &fork, Inputs: recInputs, Registration: info.Registration, Source: bundle.Source{RunID: "rec"}},
		History: history[:fork],
		Results: results,
	})
	if err != nil {
		return "", err
	}
	var blob bytes.Buffer
	if err := cb.WriteBlob(&blob); err != nil {
		return "", err
	}
	path := filepath.Join(dir, fmt.Sprintf("fetch-%d.case", n))
	return path, os.WriteFile(path, blob.Bytes(), 0o600)
}

// ReplayFile is one `pyrula case run FILE --replay-only` of a bundle
// WriteBundle wrote for n calls: open the file, read and verify the bundle
// (decompress, check, hash), decode it and run it through the engine. It
// fails unless every call was reused and the run completed with nothing
// left over.
func ReplayFile(ctx context.Context, reg *flow.Registry, path string, n int) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	cb, err := bundle.Read(f, bundle.Options{Decode: true})
	f.Close()
	if err != nil {
		return err
	}
	bd, err := cb.Decode()
	if err != nil {
		return err
	}
	rep, err := replay.Run(ctx, replay.Params{Bundle: bd, FixtureHash: string(cb.Hash()), Canonical: true, RunID: "case",
		Registry: reg, Log: host.NewMemLog(), Options: replay.Options{ReplayOnly: true}})
	if err != nil {
		return err
	}
	o := rep.Outcome
	if o.Status != host.StatusComplete || rep.ExitStatus() != 0 || o.Provenance[replay.ProvReused] != n ||
		len(rep.Calls) != n || o.LiveCalls != 0 || o.PrefixCalls != 0 {
		return fmt.Errorf("replay of %d calls: outcome %+v (%d call lines)", n, o, len(rep.Calls))
	}
	return nil
}
