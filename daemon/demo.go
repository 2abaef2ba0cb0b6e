//go:build demo

package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/memvalkey"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
	"github.com/pyrula/caseworker/worker"
	"github.com/pyrula/caseworker/worker/client"
)

// demoBuilt says whether this build has `worker demo` (see demo_off.go).
const demoBuilt = true

// demoTimeout bounds the whole demo; it takes a few seconds.
const demoTimeout = 2 * time.Minute

// demoNamespace is the namespace of the demo's keys on its embedded server.
const demoNamespace = "demo"

// demoFlags are the flags of `worker demo`.
type demoFlags struct {
	dir     string
	target  string
	inputs  []string
	changes []string
	fork    int64
	format  string
}

// repeated is a repeatable string flag.
type repeated []string

func (r *repeated) String() string     { return fmt.Sprint(*r) }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

// demo is `worker demo [--target NAME] [--input K=JSON]… [--change K=JSON]…
// [--fork-after-seq N] [--store DIR] [--format text|json]`: the whole flow on embedded defaults,
// over the binary's own targets. It starts an in-memory Redis-protocol
// server (package memvalkey) on 127.0.0.1, a worker on it with a file
// fixture store in a temp directory (or DIR, kept), and sends through the
// platform client (worker/client): start_run of the target, save_case at a
// fork, run_case from the bundle replay-only, with --change a run_case with
// the changed inputs and then the same from the start with every write
// allowed, and run_case from the journal after the recorded run aged out.
// With --format text (the default) it prints a few readable lines per step:
// the recorded run, the saved case and its hash, each case run's outcome
// with its provenance counts and divergence; with --format json it prints
// each message, reply and run event as it arrives, as labelled lines (a
// word, then JSON). It fails (exit 1) when an outcome is not the one it
// announces.
func demo(ctx context.Context, prog string, reg *flow.Registry, args []string, stdout, stderr io.Writer) error {
	usage := prog + " demo [--target NAME] [--input K=JSON]... [--change K=JSON]... [--fork-after-seq N] [--store DIR] [--format text|json]"
	fs := flag.NewFlagSet(prog+" demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f demoFlags
	fs.StringVar(&f.dir, "store", "", "directory of the file fixture store (default a temp dir, removed at exit)")
	fs.StringVar(&f.target, "target", "", "the target to record and replay (default the first workflow by name)")
	fs.Var((*repeated)(&f.inputs), "input", "an input of the recorded run as KEY=JSON (repeatable)")
	fs.Var((*repeated)(&f.changes), "change", "an input to change in the case runs, as KEY=JSON (repeatable)")
	fs.Int64Var(&f.fork, "fork-after-seq", -1, "the run_seq to save the case at (default after the first call's call:done)")
	fs.StringVar(&f.format, "format", "text", "output: text (a summary of each step) or json (every message, reply and event as a labelled JSON line)")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil // the flag set printed the usage
	} else if err != nil {
		return fmt.Errorf("usage: %s: %w", usage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("usage: %s: unexpected argument %q", usage, fs.Arg(0))
	}
	if f.format != "text" && f.format != "json" {
		return fmt.Errorf("usage: %s: --format %q is not text or json", usage, f.format)
	}
	target, err := demoTarget(reg, f.target)
	if err != nil {
		return err
	}
	inputs, err := keyValues("--input", f.inputs)
	if err != nil {
		return err
	}
	changes, err := keyValues("--change", f.changes)
	if err != nil {
		return err
	}
	temporary := f.dir == ""
	if temporary {
		tmp, err := os.MkdirTemp("", "pyrula-demo-")
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		defer os.RemoveAll(tmp)
		f.dir = filepath.Join(tmp, "cases")
	}
	abs, err := filepath.Abs(f.dir)
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
	d := &demoRun{out: stdout, cl: cl, json: f.format == "json"}
	storeText := "file://" + abs
	if temporary {
		// The directory is removed at exit: the summary does not name it.
		storeText = "a file store in a temporary directory, removed at exit"
	}
	d.line("demo", map[string]any{
		"valkey": srv.URL() + " (embedded, in memory)", "namespace": demoNamespace,
		"case_stream": cfg.CaseStream, "reply_stream": cfg.ReplyStream, "fixture_store": "file://" + abs,
		"target": target.Name,
	})
	d.text("worker demo: a worker on an embedded in-memory Valkey-protocol server (%s, namespace %s) records, saves and replays a run of %s %s.\nFixture store: %s.\n",
		srv.URL(), demoNamespace, target.Kind, target.Name, storeText)
	if err := d.steps(ctx, srv, cfg, demoPlan{target: target, inputs: inputs, changes: changes, fork: f.fork}); err != nil {
		return err
	}
	d.text("\nDone: %d steps, every reply ok and every run ended as announced.\nEvery message, reply and event as JSON lines: %s demo --format json\n", d.n, prog)
	if d.err != nil {
		return fmt.Errorf("demo: write output: %w", d.err)
	}
	return nil
}

// demoTarget is the target named, or the first workflow by name (the first
// target when there is no workflow).
func demoTarget(reg *flow.Registry, name string) (host.TargetInfo, error) {
	targets := reg.Targets()
	if name != "" {
		if t, ok := reg.Lookup(name); ok {
			return t, nil
		}
		return host.TargetInfo{}, fmt.Errorf("demo: --target %s: no such target is registered (have %s)", name, targetNames(targets))
	}
	for _, t := range targets {
		if t.Kind == "workflow" {
			return t, nil
		}
	}
	if len(targets) == 0 {
		return host.TargetInfo{}, errors.New("demo: the binary registers no targets")
	}
	return targets[0], nil
}

func targetNames(targets []host.TargetInfo) string {
	names := make([]string, len(targets))
	for i, t := range targets {
		names[i] = t.Name
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// keyValues reads KEY=JSON flags into an object.
func keyValues(flagName string, flags []string) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	for _, f := range flags {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" || !json.Valid([]byte(v)) {
			return nil, fmt.Errorf("demo: %s %q is not KEY=JSON (quote strings: %s k='\"text\"')", flagName, f, flagName)
		}
		out[k] = json.RawMessage(v)
	}
	return out, nil
}

// demoRun prints the demo's lines and sends its messages.
type demoRun struct {
	out  io.Writer
	cl   *client.Client
	json bool // --format json: labelled JSON lines instead of the summary
	n    int
	err  error // the first write error
}

// printf writes to the output, keeping the first write error.
func (d *demoRun) printf(format string, args ...any) {
	if _, err := fmt.Fprintf(d.out, format, args...); err != nil && d.err == nil {
		d.err = err
	}
}

// text prints a line of the summary (--format text only).
func (d *demoRun) text(format string, args ...any) {
	if !d.json {
		d.printf(format, args...)
	}
}

// line prints one labelled line (--format json only): label, spaces to
// column 7, v as JSON.
func (d *demoRun) line(label string, v any) {
	if !d.json {
		return
	}
	raw, ok := v.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(v); err != nil {
			raw = json.RawMessage(fmt.Sprintf("%q", err.Error()))
		}
	}
	d.printf("%-6s %s\n", label, raw)
}

// step announces the next step.
func (d *demoRun) step(text string) {
	d.n++
	if d.json {
		d.printf("\nstep   %d. %s\n", d.n, text)
		return
	}
	d.printf("\n%d. %s\n", d.n, text)
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

// anyEnd is the want of a run whose terminal event the demo shows without
// expecting one in particular.
const anyEnd messages.Code = "*"

// run sends a start_run or run_case, follows its run to the end, printing
// each event, and checks that it ended with want ("" for run:complete,
// anyEnd for any end). It returns the run id and its events.
func (d *demoRun) run(ctx context.Context, typ messages.MessageType, body any, want messages.Code) (string, []journal.Event, error) {
	r, err := d.request(ctx, typ, body)
	if err != nil {
		return "", nil, err
	}
	res, err := client.RunResult(r)
	if err != nil {
		return "", nil, err
	}
	var events []journal.Event
	end, err := d.cl.Follow(ctx, res.Events, func(ev journal.Event) error {
		events = append(events, ev)
		raw, err := ev.JSON()
		if err != nil {
			return err
		}
		d.line("event", raw)
		return nil
	})
	if err != nil {
		return res.RunID, events, err
	}
	d.line("end", map[string]any{"run_id": res.RunID, "status": end.Status, "code": end.Code})
	d.text("   %s\n", runSummary(res.RunID, end, events))
	if want == anyEnd {
		return res.RunID, events, nil
	}
	wantStatus := journal.StatusComplete
	if want != "" {
		wantStatus = journal.StatusError
	}
	if end.Status != wantStatus || end.Code != want {
		return res.RunID, events, fmt.Errorf("demo: step %d: run %s ended %s %q, expected %s %q", d.n, res.RunID, end.Status, end.Code, wantStatus, want)
	}
	return res.RunID, events, nil
}

// demoPlan is what the demo records and replays.
type demoPlan struct {
	target  host.TargetInfo
	inputs  map[string]json.RawMessage
	changes map[string]json.RawMessage
	fork    int64 // -1: after the first call's call:done
}

// writeTokens are --allow-write tokens of every write the target declares.
func writeTokens(t host.TargetInfo) []string {
	tokens := []string{}
	for _, s := range t.Registration.Steps {
		if s.Effect == string(flow.Write) {
			tokens = append(tokens, "step:"+s.ID)
		}
	}
	for _, tool := range t.Registration.Tools {
		if tool.Writes {
			tokens = append(tokens, "tool:"+tool.Name)
		}
	}
	return tokens
}

// steps sends the demo's messages in order.
func (d *demoRun) steps(ctx context.Context, srv *memvalkey.Server, cfg worker.Config, p demoPlan) error {
	name := p.target.Name
	d.step(fmt.Sprintf("start_run: the worker records a live run of %s %s", p.target.Kind, name))
	recorded, events, err := d.run(ctx, messages.StartRun, map[string]any{"target_name": name, "inputs": p.inputs}, "")
	if err != nil {
		return err
	}
	fork := p.fork
	if fork < 0 {
		fork = firstForkPoint(events)
	}

	d.step(fmt.Sprintf("save_case: freeze that run at a fork (after run_seq %d) as a bundle in the file store", fork))
	r, err := d.request(ctx, messages.SaveCase, map[string]any{
		"target_name": name, "run_id": recorded, "fork_after_seq": fork,
	})
	if err != nil {
		return err
	}
	var saved messages.SaveCaseResult
	if err := json.Unmarshal(r.Result, &saved); err != nil {
		return fmt.Errorf("demo: save_case result: %w", err)
	}
	d.text("   %s\n", savedSummary(saved))
	bundleSource := map[string]any{"bundle": map[string]any{"fixture_hash": saved.FixtureHash}}

	d.step("run_case from the bundle, replay only: the same code makes the same calls, every one answered by the recording")
	if _, _, err := d.run(ctx, messages.RunCase, map[string]any{
		"target_name": name, "source": bundleSource, "options": map[string]any{"replay_only": true},
	}, ""); err != nil {
		return err
	}

	if len(p.changes) > 0 {
		d.step(fmt.Sprintf("run_case from the bundle with changed inputs %s: a call in the recorded prefix that now gets another input stops the run prefix_diverged; calls after the fork resolve down the ladder", compact(p.changes)))
		if _, _, err := d.run(ctx, messages.RunCase, map[string]any{
			"target_name": name, "source": bundleSource,
			"options": map[string]any{"inputs": p.changes},
		}, anyEnd); err != nil {
			return err
		}
		tokens := writeTokens(p.target)
		d.step(fmt.Sprintf("run_case from the bundle with the same change, from the start, writes allowed (%s): a what-if run; changed calls run live, the rest reuse the recording", strings.Join(tokens, " ")))
		if _, _, err := d.run(ctx, messages.RunCase, map[string]any{
			"target_name": name, "source": bundleSource,
			"options": map[string]any{"inputs": p.changes, "from_start": true, "allow_write": tokens},
		}, ""); err != nil {
			return err
		}
	}

	aged := cfg.CompletedTTL + time.Second
	d.step(fmt.Sprintf("run_case from the journal after %s (PYRULA_COMPLETED_TTL) passed with no archive: the recorded run aged out of Valkey, so the run ends whatif_source_missing", aged))
	srv.FastForward(aged)
	d.line("clock", map[string]any{"fast_forward": aged.String(), "note": "the embedded server aged every key's TTL"})
	if _, _, err := d.run(ctx, messages.RunCase, map[string]any{
		"target_name": name,
		"source":      map[string]any{"journal": map[string]any{"run_id": recorded, "fork_after_seq": nil}},
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

// savedSummary is the summary line of a save_case result.
func savedSummary(saved messages.SaveCaseResult) string {
	var m struct {
		Kind         string `json:"kind"`
		TargetName   string `json:"target_name"`
		ForkAfterSeq *int64 `json:"fork_after_seq"`
		HistoryCount int    `json:"history_count"`
		ResultCount  int    `json:"result_count"`
	}
	s := "saved case " + saved.FixtureHash
	if err := json.Unmarshal(saved.ManifestSummary, &m); err != nil {
		return s
	}
	fork := "inputs only"
	if m.ForkAfterSeq != nil {
		fork = fmt.Sprintf("forked after run_seq %d", *m.ForkAfterSeq)
	}
	return fmt.Sprintf("%s: %s %s, %s, %d history events, %d recorded results", s, m.Kind, m.TargetName, fork, m.HistoryCount, m.ResultCount)
}

// runSummary is the summary line of a followed run: how it ended and, for
// a case run, its outcome: provenance counts, the divergence or the stop.
func runSummary(runID string, end client.End, events []journal.Event) string {
	var out struct {
		Message     string         `json:"message"`
		PrefixCalls int            `json:"prefix_calls"`
		Provenance  map[string]int `json:"provenance"`
		StopKey     string         `json:"stop_key"`
		Divergence  *struct {
			Call string `json:"call"`
			Diff struct {
				Added   []string `json:"added"`
				Removed []string `json:"removed"`
				Changed []string `json:"changed"`
			} `json:"diff"`
		} `json:"divergence"`
	}
	outcome, calls := false, 0
	for _, ev := range events {
		switch ev.Kind {
		case runevent.CallDone:
			calls++
		case runevent.CaseOutcome:
			if raw, err := ev.JSON(); err == nil && json.Unmarshal(raw, &out) == nil {
				outcome = true
			}
		}
	}
	s := fmt.Sprintf("run %s: %s", runID, end.Status)
	if end.Code != "" {
		s += " " + string(end.Code)
	}
	switch {
	case !outcome:
		return fmt.Sprintf("%s; %d events, %d calls", s, len(events), calls)
	case out.Divergence != nil:
		var diff []string
		for _, part := range []struct {
			what  string
			paths []string
		}{{"changed", out.Divergence.Diff.Changed}, {"added", out.Divergence.Diff.Added}, {"removed", out.Divergence.Diff.Removed}} {
			if len(part.paths) > 0 {
				diff = append(diff, part.what+" "+strings.Join(part.paths, ", "))
			}
		}
		if len(diff) == 0 {
			diff = append(diff, "another input")
		}
		return fmt.Sprintf("%s at %s: its input %s", s, out.Divergence.Call, strings.Join(diff, "; "))
	case out.Provenance == nil: // refused by the executor before the engine ran
		return s + ": " + out.Message
	}
	p := out.Provenance
	s += fmt.Sprintf("; calls: %d prefix (verified), %d reused, %d simulated, %d live, %d changed", out.PrefixCalls, p["reused"], p["simulated"], p["live"], p["changed"])
	if out.StopKey != "" {
		s += fmt.Sprintf("; stopped at %s: %s", out.StopKey, out.Message)
	}
	return s
}

// firstForkPoint is the run_seq of the first call:done (the first call in
// the prefix), or of run:start when the run made no call.
func firstForkPoint(events []journal.Event) int64 {
	var start int64
	for _, e := range events {
		switch e.Kind {
		case runevent.RunStart:
			if start == 0 {
				start = e.RunSeq
			}
		case runevent.CallDone:
			return e.RunSeq
		}
	}
	return start
}

// compact is v as compact JSON.
func compact(v any) string {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(raw)
}
