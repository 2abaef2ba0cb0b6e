package cli_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/examples"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/flow/journallog"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/capture"
	"github.com/pyrula/caseworker/journal/memjournal"
	"github.com/pyrula/caseworker/runevent"
)

// TestNumericFlagsRefuseNonFinite: --max-cost-usd (the CLI's one float
// flag; pflag parses NaN and Inf) and every rate of a --prices file refuse
// what is not a finite number, naming the flag (exit 1): a NaN ceiling
// would switch the ceiling off.
func TestNumericFlagsRefuseNonFinite(t *testing.T) {
	t.Parallel()
	agent := sampleCase("support-agent-recorded.json")
	for _, v := range []string{"NaN", "nan", "Inf", "+Inf", "-Inf", "infinity"} {
		for _, cmd := range [][]string{{"case", "run", agent}, {"case", "compare", agent, "--model", "a", "--model", "b"}} {
			r := run(t, invocation{args: append(cmd, "--max-cost-usd", v)})
			wantError(t, r, "--max-cost-usd")
			if !strings.Contains(r.stderr, "is not a finite number") {
				t.Errorf("--max-cost-usd %s: want \"is not a finite number\"\n%s", v, r)
			}
		}
	}
	for body, want := range map[string]string{
		`{"m":{"input_per_mtok":1e400,"output_per_mtok":1}}`:  "prices: input_per_mtok 1e400 is not a finite number",
		`{"m":{"input_per_mtok":1,"output_per_mtok":-1e400}}`: "prices: output_per_mtok -1e400 is not a finite number",
		`{"m":{"input_per_mtok":1e300,"output_per_mtok":1}}`:  "prices: m: input_per_mtok 1e+300 is above 1e+06",
	} {
		prices := writeFile(t, "prices.json", []byte(body))
		wantError(t, caseRunArgs(t, agent, "--prices", prices), "case run: --prices "+prices+": "+want)
	}
	// Finite values still pass.
	wantOK(t, caseRunArgs(t, agent, "--replay-only", "--max-cost-usd", "0",
		"--prices", writeFile(t, "prices.json", []byte(`{"m":{"input_per_mtok":1e6,"output_per_mtok":0}}`))))
}

// TestReplayOnlySupplyWarns: --supply under --replay-only is not read (a
// replay-only run answers every call from the recording): the run goes on
// and one warning line names the file, even one that does not exist.
func TestReplayOnlySupplyWarns(t *testing.T) {
	t.Parallel()
	agent := sampleCase("support-agent-recorded.json")
	sup := writeFile(t, "supply.json", []byte(`{"tools":{"refund":{"refund_id":"re_sim"}}}`))
	missing := filepath.Join(t.TempDir(), "no-such-supply.json")
	for _, file := range []string{sup, missing} {
		r := caseRunArgs(t, agent, "--replay-only", "--supply", file)
		want := "warning: --supply " + file + " is not read under --replay-only: a replay-only run answers every call from the recording\n"
		if r.code != 0 || r.stderr != want {
			t.Fatalf("want exit 0 and stderr %q\n%s", want, r)
		}
		if o := lastOutcome(t, r); o.Status != "complete" {
			t.Fatalf("outcome %+v\n%s", o, r)
		}
	}
	// Without --replay-only the file is read, with no warning.
	wantOK(t, caseRunArgs(t, agent, "--supply", sup))
}

// TestReplayOnlyLLMRefNeedsNoKey: a replay-only run sends no model call, so
// --llm-ref anthropic needs no ANTHROPIC_API_KEY (the environment has
// none); the outcome still names the client. An unknown name is still
// invalid input, and without --replay-only the key is still required.
func TestReplayOnlyLLMRefNeedsNoKey(t *testing.T) {
	t.Parallel()
	agent := sampleCase("support-agent-recorded.json")
	for _, ref := range []string{"anthropic", "openai"} {
		r := caseRunArgs(t, agent, "--replay-only", "--llm-ref", ref)
		wantOK(t, r)
		if o := lastOutcome(t, r); o.Status != "complete" || o.LLMRef == nil || *o.LLMRef != ref {
			t.Fatalf("--llm-ref %s: outcome %+v\n%s", ref, o, r)
		}
	}
	wantError(t, caseRunArgs(t, agent, "--replay-only", "--llm-ref", "nope"), `--llm-ref: llm ref "nope" names no model client (have anthropic, openai)`)
	wantError(t, caseRunArgs(t, agent, "--llm-ref", "anthropic"), "ANTHROPIC_API_KEY")
}

// savedOnModel records support_agent with every model call on model, as a
// worker's run_case with model does (its request asks for the model), saves it as a case forked after its
// first model call, the way case save and save_case do (journal/capture),
// and returns the bundle file.
func savedOnModel(t *testing.T, model string) string {
	t.Helper()
	ctx := context.Background()
	reg := flow.NewRegistry()
	if _, err := examples.Register(reg); err != nil {
		t.Fatal(err)
	}
	j, err := memjournal.New(memjournal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	log, err := journallog.New(j, journallog.Options{Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := host.NewRuntime(host.Config{Registry: reg, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := rt.Run(ctx, host.RunParams{RunID: "run_m", Target: examples.SupportAgent, Model: model}); err != nil || out.Status != host.StatusComplete {
		t.Fatalf("record: %+v %v", out, err)
	}
	events, _, err := j.Events(ctx, "run_m")
	if err != nil {
		t.Fatal(err)
	}
	var fork *int64
	for _, e := range events {
		if c, ok := journal.CallOf(e); ok && e.Kind == runevent.CallDone && c.Kind == "model" && c.Key == "0" {
			fork = &e.RunSeq
			break
		}
	}
	if fork == nil {
		t.Fatal("no call:done of model:0")
	}
	info, _ := reg.Lookup(examples.SupportAgent)
	cb, err := capture.FromJournal(ctx, j, capture.FromJournalParams{Target: examples.SupportAgent, RunID: "run_m",
		Params: capture.Params{ForkAfterSeq: fork, Registration: info.Registration}})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(cb.Manifest().RecordedConfig); got != `{"model":"`+model+`"}` {
		t.Fatalf("recorded_config %s, want the model %s", got, model)
	}
	// The run was asked for the model, as a worker's run_case with options
	// model is: its run:submitted event keeps the request.
	b, err := cb.Decode()
	if err != nil {
		t.Fatal(err)
	}
	for i, raw := range b.History {
		var ev map[string]json.RawMessage
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatal(err)
		}
		if string(ev["kind"]) == `"run:submitted"` {
			ev["request"] = json.RawMessage(`{"target_name":"support_agent","options":{"model":"` + model + `"}}`)
			b.History[i], _ = json.Marshal(ev)
		}
	}
	if cb, err = bundle.Encode(b); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "on-model.json")
	if err := os.WriteFile(path, cb.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCaseRunReplaysRecordedModel: a case saved from a run on another
// model than the agent's own replays with that model: replay-only passes
// (no prefix_diverged at $.model) and the model is no changed axis; an
// explicit --model of another model is still a change.
func TestCaseRunReplaysRecordedModel(t *testing.T) {
	t.Parallel()
	path := savedOnModel(t, "local-support-2")
	r := caseRunArgs(t, path, "--replay-only")
	wantOK(t, r)
	var out struct {
		Status      string   `json:"status"`
		ChangedAxes []string `json:"changed_axes"`
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &out); err != nil || out.Status != "complete" || out.ChangedAxes == nil || len(out.ChangedAxes) != 0 {
		t.Fatalf("outcome %+v (%v)\n%s", out, err, r)
	}
	r = caseRunArgs(t, path, "--model", "local-support-3", "--allow-write", "tool:refund")
	if !strings.Contains(r.stdout, `"changed_axes":["model"]`) {
		t.Fatalf("--model local-support-3: want changed_axes [model]\n%s", r)
	}
}
