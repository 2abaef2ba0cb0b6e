package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/examples"
	"github.com/pyrula/caseworker/internal/memvalkey"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/worker"
	"github.com/pyrula/caseworker/worker/client"
)

// demoTimeout bounds the whole demo; it takes a few seconds.
const demoTimeout = 2 * time.Minute

// demoNamespace is the namespace of the demo's keys on its embedded server.
const demoNamespace = "demo"

// demoForkAfterSeq is where the demo saves its recorded checkout run: after
// the quote step's call:done (run:submitted 1, run:start 2, call:start 3,
// call:done 4), so the quote's input (sku, qty) is in the recorded prefix.
const demoForkAfterSeq = 4

// demo is `worker demo [--store DIR]`: the whole flow on embedded defaults.
// It starts an in-memory Redis-protocol server (internal/memvalkey) on
// 127.0.0.1, a worker on it with a file fixture store in a temp directory
// (or DIR, kept), and sends through the platform client (worker/client):
// start_run of the example checkout workflow, save_case at a fork,
// run_case from the bundle with a changed input (refused by the recorded
// prefix, then rerun from the start), and run_case from the journal after
// the recorded run aged out. It prints each message, reply and run event as
// it arrives, as labelled lines (a word, then JSON), and fails (exit 1)
// when an outcome is not the one it announces.
func demo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("worker demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("store", "", "directory of the file fixture store (default a temp dir, removed at exit)")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil // the flag set printed the usage
	} else if err != nil {
		return fmt.Errorf("usage: worker demo [--store DIR]: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("usage: worker demo [--store DIR]: unexpected argument %q", fs.Arg(0))
	}
	if *dir == "" {
		tmp, err := os.MkdirTemp("", "pyrula-demo-")
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		defer os.RemoveAll(tmp)
		*dir = filepath.Join(tmp, "cases")
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return fmt.Errorf("demo: --store: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, demoTimeout)
	defer cancel()

	srv, err := memvalkey.Start()
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer srv.Close()
	vc, err := srv.NewClient()
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer vc.Close()

	cfg, err := worker.Config{
		ValkeyURL: srv.URL(), Namespace: demoNamespace, ConsumerName: "demo",
		FixtureStore: "file://" + abs, LogLevel: "warn", LogFormat: "console",
	}.Defaults()
	if err != nil {
		return err
	}
	log, err := newLogger(cfg, stderr)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // stderr may not sync
	reg := flow.NewRegistry()
	if _, err := examples.Register(reg); err != nil {
		return fmt.Errorf("register the example targets: %w", err)
	}
	w, err := worker.New(cfg, worker.Params{Logger: log, Registry: reg, Client: vc})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer scancel()
		_ = w.Stop(sctx) // what is in flight is only the demo's own
	}()
	cl, err := client.New(vc, client.Options{Namespace: demoNamespace})
	if err != nil {
		return err
	}
	d := &demoRun{out: stdout, cl: cl}
	d.line("demo", map[string]any{
		"valkey": srv.URL() + " (embedded, in memory)", "namespace": demoNamespace,
		"case_stream": cfg.CaseStream, "reply_stream": cfg.ReplyStream, "fixture_store": "file://" + abs,
	})
	return d.steps(ctx, srv, cfg)
}

// demoRun prints the demo's lines and sends its messages.
type demoRun struct {
	out io.Writer
	cl  *client.Client
	n   int
	err error // the first write error
}

// line prints one labelled line: label, spaces to column 7, v as JSON.
func (d *demoRun) line(label string, v any) {
	raw, ok := v.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(v); err != nil {
			raw = json.RawMessage(fmt.Sprintf("%q", err.Error()))
		}
	}
	if _, err := fmt.Fprintf(d.out, "%-6s %s\n", label, raw); err != nil && d.err == nil {
		d.err = err
	}
}

// step announces the next step.
func (d *demoRun) step(text string) {
	d.n++
	if _, err := fmt.Fprintf(d.out, "\nstep   %d. %s\n", d.n, text); err != nil && d.err == nil {
		d.err = err
	}
}

// request sends a message, prints it and its reply, and checks the reply's
// status.
func (d *demoRun) request(ctx context.Context, typ messages.MessageType, body any) (messages.Reply, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return messages.Reply{}, err
	}
	m := client.Message{MessageID: fmt.Sprintf("demo-%d", d.n), Type: typ, Body: raw}
	sent, err := d.cl.Send(ctx, m)
	if err != nil {
		return messages.Reply{}, err
	}
	d.line("send", messages.Envelope{MessageID: sent.MessageID, Type: typ, ReplyTo: sent.ReplyTo, Body: raw})
	r, err := d.cl.Reply(ctx, sent)
	if err != nil {
		return r, err
	}
	d.line("reply", r)
	if r.Status != messages.StatusOK {
		return r, fmt.Errorf("demo: step %d: %s was %s %s: %s", d.n, typ, r.Status, r.Code, r.Message)
	}
	return r, nil
}

// run sends a start_run or run_case, follows its run to the end, printing
// each event, and checks that it ended with want ("" for run:complete).
func (d *demoRun) run(ctx context.Context, typ messages.MessageType, body any, want messages.Code) (string, error) {
	r, err := d.request(ctx, typ, body)
	if err != nil {
		return "", err
	}
	res, err := client.RunResult(r)
	if err != nil {
		return "", err
	}
	end, err := d.cl.Follow(ctx, res.Events, func(ev journal.Event) error {
		raw, err := ev.JSON()
		if err != nil {
			return err
		}
		d.line("event", raw)
		return nil
	})
	if err != nil {
		return res.RunID, err
	}
	d.line("end", map[string]any{"run_id": res.RunID, "status": end.Status, "code": end.Code})
	wantStatus := journal.StatusComplete
	if want != "" {
		wantStatus = journal.StatusError
	}
	if end.Status != wantStatus || end.Code != want {
		return res.RunID, fmt.Errorf("demo: step %d: run %s ended %s %q, expected %s %q", d.n, res.RunID, end.Status, end.Code, wantStatus, want)
	}
	return res.RunID, nil
}

// steps sends the demo's messages in order.
func (d *demoRun) steps(ctx context.Context, srv *memvalkey.Server, cfg worker.Config) error {
	d.step("start_run: the worker records a live run of the example checkout workflow")
	recorded, err := d.run(ctx, messages.StartRun, map[string]any{"target_name": examples.Checkout}, "")
	if err != nil {
		return err
	}

	d.step(fmt.Sprintf("save_case: freeze that run at a fork (after run_seq %d, the quote step) as a bundle in the file store", demoForkAfterSeq))
	r, err := d.request(ctx, messages.SaveCase, map[string]any{
		"target_name": examples.Checkout, "run_id": recorded, "fork_after_seq": demoForkAfterSeq,
	})
	if err != nil {
		return err
	}
	var saved messages.SaveCaseResult
	if err := json.Unmarshal(r.Result, &saved); err != nil {
		return fmt.Errorf("demo: save_case result: %w", err)
	}
	bundleSource := map[string]any{"bundle": map[string]any{"fixture_hash": saved.FixtureHash}}

	d.step("run_case from the bundle with a changed input (qty 5): the quote in the recorded prefix now gets another input, so the run stops prefix_diverged")
	if _, err := d.run(ctx, messages.RunCase, map[string]any{
		"target_name": examples.Checkout, "source": bundleSource,
		"options": map[string]any{"inputs": map[string]any{"qty": 5}},
	}, messages.PrefixDiverged); err != nil {
		return err
	}

	d.step("run_case from the bundle, qty 5, from the start with its writes allowed: a what-if run; changed calls run live, the rest reuse the recording")
	if _, err := d.run(ctx, messages.RunCase, map[string]any{
		"target_name": examples.Checkout, "source": bundleSource,
		"options": map[string]any{"inputs": map[string]any{"qty": 5}, "from_start": true,
			"allow_write": []string{"step:reserve", "step:child:0"}},
	}, ""); err != nil {
		return err
	}

	aged := cfg.CompletedTTL + time.Second
	d.step(fmt.Sprintf("run_case from the journal after %s (PYRULA_COMPLETED_TTL) passed with no archive: the recorded run aged out of Valkey, so the run ends whatif_source_missing", aged))
	srv.FastForward(aged)
	d.line("clock", map[string]any{"fast_forward": aged.String(), "note": "the embedded server aged every key's TTL"})
	if _, err := d.run(ctx, messages.RunCase, map[string]any{
		"target_name": examples.Checkout,
		"source":      map[string]any{"journal": map[string]any{"run_id": recorded}},
	}, messages.WhatifSourceMissing); err != nil {
		return err
	}
	d.line("done", map[string]any{"steps": d.n, "recorded_run": recorded, "fixture_hash": saved.FixtureHash})
	if d.err != nil {
		return fmt.Errorf("demo: write output: %w", d.err)
	}
	if err := ctx.Err(); err != nil {
		return errors.Join(errors.New("demo: interrupted"), err)
	}
	return nil
}
