package replay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/examples"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/replay"
	"github.com/pyrula/caseworker/runevent"
)

type recording struct {
	target  string
	events  []json.RawMessage
	results []bundle.Result
	inputs  json.RawMessage
	kinds   []string // kind of each event
	keys    []string // call id of each event ("" when none)
}

func newRegistry(t *testing.T) *flow.Registry {
	t.Helper()
	reg := flow.NewRegistry()
	if _, err := examples.Register(reg); err != nil {
		t.Fatal(err)
	}
	return reg
}

// record runs target live in a MemLog.
func record(t *testing.T, target string, inputs map[string]json.RawMessage) recording {
	t.Helper()
	return recordRun(t, host.RunParams{Target: target, Inputs: inputs})
}

// recordRun runs p (its RunID set to "rec") live in a MemLog.
func recordRun(t *testing.T, p host.RunParams) recording {
	t.Helper()
	target := p.Target
	p.RunID = "rec"
	log := host.NewMemLog()
	rt, err := host.NewRuntime(host.Config{Registry: newRegistry(t), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	out, err := rt.Run(context.Background(), p)
	if err != nil || out.Status != host.StatusComplete {
		t.Fatalf("record %s: %+v %v", target, out, err)
	}
	r := recording{target: target, results: log.Results("rec")}
	for _, ev := range log.Events("rec") {
		raw, _ := json.Marshal(ev)
		r.events = append(r.events, raw)
		r.kinds = append(r.kinds, string(ev.Kind))
		id := ""
		if ev.Call != nil {
			id = ev.Call.ID()
		}
		r.keys = append(r.keys, id)
		if ev.Kind == runevent.RunStart {
			r.inputs = ev.Inputs
		}
	}
	return r
}

// seqAfter is the run_seq of the call:done of call id.
func (r recording) seqAfter(t *testing.T, id string) int64 {
	t.Helper()
	for i, k := range r.kinds {
		if k == "call:done" && r.keys[i] == id {
			return int64(i + 1)
		}
	}
	t.Fatalf("no call:done of %s in %v", id, r.keys)
	return 0
}

// bundleAt is the recording saved at fork (a run_seq; 0 keeps everything
// but the terminal event).
func (r recording) bundleAt(fork int64) *bundle.Bundle {
	if fork == 0 {
		fork = int64(len(r.events) - 1)
	}
	kind := bundle.KindWorkflow
	if strings.Contains(r.target, "agent") {
		kind = bundle.KindAgent
	}
	return &bundle.Bundle{
		Manifest: bundle.Manifest{Format: 1, Kind: kind, TargetName: r.target, CodeVersion: "examples/v0",
			ForkAfterSeq: &fork, Inputs: r.inputs, Source: bundle.Source{RunID: "rec"}},
		History: slices.Clone(r.events[:fork]),
		Results: slices.Clone(r.results),
	}
}

func runCase(t *testing.T, b *bundle.Bundle, opts replay.Options) (replay.Report, *host.MemLog) {
	t.Helper()
	log := host.NewMemLog()
	rep, err := replay.Run(context.Background(), replay.Params{Bundle: b, RunID: "case", Registry: newRegistry(t),
		Log: log, FixtureHash: "h", Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	return rep, log
}

func intp(n int) *int { return &n }

func TestReplayOnlyPass(t *testing.T) {
	rec := record(t, examples.Checkout, nil)
	rep, log := runCase(t, rec.bundleAt(rec.seqAfter(t, "step:quote:0")), replay.Options{ReplayOnly: true})
	o := rep.Outcome
	if o.Status != host.StatusComplete || len(*o.UnconsumedKeys) != 0 || rep.ExitStatus() != 0 {
		t.Fatalf("outcome %+v", o)
	}
	if o.PrefixCalls != 1 || o.Provenance["reused"] < 5 || o.LiveCalls != 0 || o.CodeVersion.Recorded != "examples/v0" || o.CodeVersion.Current != examples.CodeVersion {
		t.Fatalf("outcome %+v", o)
	}
	if rep.Calls[0].Key != "reserve:0" || rep.Calls[0].Provenance != "reused" {
		t.Fatalf("calls %+v", rep.Calls)
	}
	kinds := map[host.EventKind]int{}
	for _, ev := range log.Events("case") {
		kinds[ev.Kind]++
	}
	if kinds[runevent.CaseCall] != len(rep.Calls) || kinds[runevent.CaseOutcome] != 1 || kinds[runevent.RunComplete] != 1 {
		t.Fatalf("journal kinds %v", kinds)
	}
}

func TestPrefixDiverged(t *testing.T) {
	rec := record(t, examples.Checkout, nil)
	b := rec.bundleAt(rec.seqAfter(t, "step:reserve:0"))
	rep, log := runCase(t, b, replay.Options{Inputs: map[string]json.RawMessage{"qty": json.RawMessage("3")}})
	o := rep.Outcome
	if o.Code != "prefix_diverged" || rep.ExitStatus() != 2 || o.Divergence == nil || o.Divergence.Call != "step:quote:0" ||
		fmt.Sprint(o.Divergence.Diff.Changed) != "[$.qty]" || o.Divergence.RecordedFingerprint == o.Divergence.ActualFingerprint {
		t.Fatalf("outcome %+v %+v", o, o.Divergence)
	}
	last := log.Events("case")[len(log.Events("case"))-1]
	if last.Kind != runevent.RunError || last.StopKey != "step:quote:0" || last.Extra["divergence"] == nil {
		t.Fatalf("run:error %+v", last)
	}
	// An input that does not touch the prefix is fine.
	rep, _ = runCase(t, b, replay.Options{Inputs: map[string]json.RawMessage{"email": json.RawMessage(`"x@example.com"`)},
		AllowWrite: []string{"step:child:0"}})
	if rep.Outcome.Status != host.StatusComplete || rep.Outcome.Provenance["changed"] != 1 || rep.Outcome.ChangedCalls[0] != "step:child:0" {
		t.Fatalf("outcome %+v", rep.Outcome)
	}
	// --from-start reruns with the change: quote changes (a read, live).
	rep, _ = runCase(t, b, replay.Options{FromStart: true, Inputs: map[string]json.RawMessage{"qty": json.RawMessage("3")},
		AllowWrite: []string{"step:reserve", "step:child:0", "step:format_receipt"}})
	if rep.Outcome.Status != host.StatusComplete || rep.Outcome.PrefixCalls != 0 || !strings.Contains(fmt.Sprint(rep.Outcome.ChangedCalls), "step:quote:0") {
		t.Fatalf("from start %+v", rep.Outcome)
	}
}

func TestLadder(t *testing.T) {
	rec := record(t, examples.Checkout, nil)
	b := rec.bundleAt(rec.seqAfter(t, "step:quote:0"))
	// Drop the recorded reserve result: reserve becomes a new write.
	var results []bundle.Result
	for _, r := range b.Results {
		if r.Key != "reserve:0" && r.Kind != "signal" {
			results = append(results, r)
		}
	}
	b.Results = results
	cases := []struct {
		name  string
		opts  replay.Options
		code  string
		key   string
		token string
		prov  map[string]int
	}{
		{name: "write not allowed", code: "write_not_allowed", key: "step:reserve:0", token: "step:reserve"},
		{name: "replay only unexpected", opts: replay.Options{ReplayOnly: true}, code: "replay_diverged", key: "step:reserve:0"},
		{name: "budget", opts: replay.Options{AllowWrite: []string{"step:reserve"}, LiveBudget: intp(0)}, code: "live_budget_exceeded", key: "step:reserve:0"},
		{name: "signal missing", opts: replay.Options{AllowWrite: []string{"step:reserve"}}, code: "missing_context", key: "signal:approval:0"},
		{name: "signal wrong shape", opts: replay.Options{AllowWrite: []string{"step:reserve"},
			Supply: replay.Supply{Calls: map[string]json.RawMessage{"signal:approval:0": json.RawMessage(`{"decision":"approved"}`)}}},
			code: "missing_context", key: "signal:approval:0"},
		{name: "simulated", opts: replay.Options{AllowWrite: []string{"step:reserve", "step:child:0"},
			Supply: replay.Supply{Calls: map[string]json.RawMessage{"signal:approval:0": json.RawMessage(`{"payload":{"decision":"approved"}}`),
				"step:reserve:0": json.RawMessage(`{"reservation_id":"rsv_sim"}`)}}},
			prov: map[string]int{"simulated": 2, "live": 0}},
		{name: "live write", opts: replay.Options{AllowWrite: []string{"reserve", "step:reserve", "step:child:0"},
			Supply: replay.Supply{Calls: map[string]json.RawMessage{"signal:approval:0": json.RawMessage(`{"payload":{"decision":"approved"}}`)}}},
			prov: map[string]int{"simulated": 1, "live": 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep, _ := runCase(t, b, tc.opts)
			o := rep.Outcome
			if tc.code != "" {
				if o.Code != tc.code || string(o.StopKey) != fmt.Sprintf("%q", tc.key) || rep.ExitStatus() != 3 {
					t.Fatalf("outcome %+v stop_key %s", o, o.StopKey)
				}
				wantToken := "null"
				if tc.token != "" {
					wantToken = fmt.Sprintf("%q", tc.token)
				}
				if string(o.StopToken) != wantToken {
					t.Fatalf("stop_token %s, want %s", o.StopToken, wantToken)
				}
				return
			}
			if o.Status != host.StatusComplete {
				t.Fatalf("outcome %+v", o)
			}
			for k, v := range tc.prov {
				if o.Provenance[k] != v {
					t.Fatalf("provenance %v, want %v", o.Provenance, tc.prov)
				}
			}
		})
	}
}

func TestReplayOnlyInputChangedAndUnconsumed(t *testing.T) {
	rec := record(t, examples.Checkout, nil)
	b := rec.bundleAt(rec.seqAfter(t, "step:quote:0"))
	for i, r := range b.Results {
		if r.Key == "reserve:0" {
			b.Results[i].Fingerprint = strings.Repeat("0", 64)
		}
	}
	rep, _ := runCase(t, b, replay.Options{ReplayOnly: true})
	if rep.Outcome.Code != "replay_diverged" || rep.Outcome.Reason != "input_changed" {
		t.Fatalf("%+v", rep.Outcome)
	}
	// A recorded call the run never makes.
	b = rec.bundleAt(rec.seqAfter(t, "step:quote:0"))
	b.Results = append(b.Results, bundle.Result{Kind: "step", Key: "extra:0", Fingerprint: strings.Repeat("1", 64), Result: json.RawMessage("1")})
	rep, _ = runCase(t, b, replay.Options{ReplayOnly: true})
	if rep.Outcome.Status != host.StatusComplete || fmt.Sprint(*rep.Outcome.UnconsumedKeys) != "[step:extra:0]" || rep.ExitStatus() != 3 {
		t.Fatalf("%+v", rep.Outcome)
	}
}

func TestSleepAdvancesNow(t *testing.T) {
	_, log := sleepingCase(t)
	var wake, now string
	for _, ev := range log.Events("case") {
		if ev.Kind == runevent.CallStart && ev.Call.Kind == host.KindSleep {
			wake = ev.WakeAt.Format("2006-01-02T15:04:05")
		}
	}
	for _, r := range log.Results("case") {
		if r.Kind == "now" {
			json.Unmarshal(r.Result, &now)
		}
	}
	if wake == "" || now < wake {
		t.Fatalf("now %s before wake_at %s", now, wake)
	}
}

// sleepingCase runs the checkout recorded, forked after its quote, with
// an hour's durable sleep whose recorded result (and now's) it lacks: the
// sleep runs live on the case run's clock, which jumps over it. The run
// must complete.
func sleepingCase(t *testing.T) (replay.Report, *host.MemLog) {
	t.Helper()
	rec := record(t, examples.Checkout, nil)
	b := rec.bundleAt(rec.seqAfter(t, "step:quote:0"))
	var keep []bundle.Result
	for _, r := range b.Results {
		if r.Kind != "sleep" && r.Kind != "now" {
			keep = append(keep, r)
		}
	}
	b.Results = keep
	rep, log := runCase(t, b, replay.Options{Inputs: map[string]json.RawMessage{"delay_ms": json.RawMessage("3600000")}, Values: true,
		AllowWrite: []string{"step:child:0"}})
	if rep.Outcome.Status != host.StatusComplete {
		t.Fatalf("%+v", rep.Outcome)
	}
	return rep, log
}

// TestCallLinesCarryTheirCallsTime: each case:call line carries the time
// of its call's call:done, on the case run's clock, which jumps over a
// sleep (the calls after it, live and reused, are stamped after the wake).
func TestCallLinesCarryTheirCallsTime(t *testing.T) {
	start := time.Now()
	rep, log := sleepingCase(t)
	done := map[string]time.Time{}
	lines, late := 0, 0
	for _, ev := range log.Events("case") {
		switch ev.Kind {
		case runevent.CallDone:
			done[ev.Call.ID()] = ev.At
		case runevent.CaseCall:
			at, ok := done[ev.Call.ID()]
			if !ok || !ev.At.Equal(at) {
				t.Fatalf("the line of %s at %s, its call:done at %s (%v)", ev.Call.ID(), ev.At, at, ok)
			}
			lines++
			if at.Sub(start) > 50*time.Minute {
				late++
			}
		}
	}
	if lines != len(rep.Calls) || late == 0 || late == lines {
		t.Fatalf("%d lines for %d calls, %d of them after the hour's sleep", lines, len(rep.Calls), late)
	}
}

func TestAgentCost(t *testing.T) {
	rec := record(t, examples.SupportAgent, nil)
	b := rec.bundleAt(rec.seqAfter(t, "model:0"))
	// --model makes post-fork model calls live (changed); the prefix model call still verifies.
	rep, _ := runCase(t, b, replay.Options{Model: "local-support-1b", AllowWrite: []string{"tool:refund"}})
	if rep.Outcome.Status != host.StatusComplete || rep.Outcome.Provenance["changed"] == 0 {
		t.Fatalf("%+v", rep.Outcome)
	}
	// Under a cost limit a model with no price stops.
	rep, _ = runCase(t, b, replay.Options{Model: "local-support-1b", MaxCostUSD: new(1.0), AllowWrite: []string{"tool:refund"}})
	if rep.Outcome.Code != "live_budget_exceeded" {
		t.Fatalf("%+v", rep.Outcome)
	}
	// A call whose worst case could pass the ceiling is not sent: nothing
	// is spent.
	prices := replay.Prices{"local-support-1b": {InputPerMTok: 1e6, OutputPerMTok: 0}}
	rep, _ = runCase(t, b, replay.Options{Model: "local-support-1b", MaxCostUSD: new(1.0), Prices: prices, AllowWrite: []string{"tool:refund"}})
	if rep.Outcome.Code != "live_budget_exceeded" || rep.Outcome.CostUSD != 0 || rep.Outcome.LiveCalls != 0 ||
		!strings.Contains(rep.Outcome.Message, "not sent") {
		t.Fatalf("%+v", rep.Outcome)
	}
	if messages.Code(rep.Outcome.Code).ExitStatus() != 3 {
		t.Fatal("exit")
	}
}

// TestCostCeilingHolds runs the same agent case under ceilings from
// nothing to plenty: the spend never passes the ceiling, a stopped run
// stops before sending (live_budget_exceeded), a higher ceiling never
// allows fewer live calls, and a high enough one completes.
func TestCostCeilingHolds(t *testing.T) {
	rec := record(t, examples.SupportAgent, nil)
	b := rec.bundleAt(rec.seqAfter(t, "model:0"))
	// 1 $ per thousand prompt tokens, 2 $ per thousand answer tokens, and
	// an agent answer bound from the registration (DefaultMaxTokens).
	prices := replay.Prices{"local-support-1b": {InputPerMTok: 1000, OutputPerMTok: 2000}}
	lastLive, completed, partial := -1, false, false
	for _, ceiling := range []float64{0, 1, 5, 9, 10, 10.2, 10.4, 10.6, 10.8, 11, 11.5, 12, 20, 120} {
		rep, _ := runCase(t, b, replay.Options{Model: "local-support-1b", MaxCostUSD: new(ceiling), Prices: prices, AllowWrite: []string{"tool:refund"}})
		o := rep.Outcome
		if float64(o.CostUSD) > ceiling {
			t.Errorf("ceiling %g: spent %g", ceiling, float64(o.CostUSD))
		}
		switch {
		case o.Status == host.StatusComplete:
			completed = true
		case o.Code == "live_budget_exceeded" && strings.Contains(o.Message, "not sent"):
			partial = partial || o.LiveCalls > 0
		default:
			t.Errorf("ceiling %g: %+v", ceiling, o)
		}
		if o.LiveCalls < lastLive {
			t.Errorf("ceiling %g: %d live calls, fewer than %d under a lower ceiling", ceiling, o.LiveCalls, lastLive)
		}
		t.Logf("ceiling %g: %s %s live %d cost %v", ceiling, o.Status, o.Code, o.LiveCalls, float64(o.CostUSD))
		lastLive = o.LiveCalls
	}
	if !completed || lastLive == 0 || !partial {
		t.Errorf("completed %v (last %d live calls), stopped after a live call %v: want both", completed, lastLive, partial)
	}
}

// TestCostPrintsWithoutFloatNoise checks the outcome's cost_usd encoding.
func TestCostPrintsWithoutFloatNoise(t *testing.T) {
	for v, want := range map[float64]string{0.1 + 0.2: "0.3", 0.0011409999999999998: "0.001141", 0: "0", 12.5: "12.5", 1e-10: "0"} {
		raw, err := json.Marshal(replay.USD(v))
		if err != nil || string(raw) != want {
			t.Errorf("USD(%v) = %s %v, want %s", v, raw, err, want)
		}
	}
}

func TestPriceLongContext(t *testing.T) {
	p, err := replay.ParsePrices([]byte(`{"m":{"input_per_mtok":1,"output_per_mtok":2,"long_context":{"above_input_tokens":100,"input_per_mtok":10,"output_per_mtok":20}}}`))
	if err != nil {
		t.Fatal(err)
	}
	short := p["m"].Cost(flow.Usage{InputTokens: 50, CacheReadInputTokens: 50, OutputTokens: 1000000})
	long := p["m"].Cost(flow.Usage{InputTokens: 50, CacheReadInputTokens: 51, OutputTokens: 1000000})
	if short != 2+100.0/1e6 || long != 20+1010.0/1e6 {
		t.Fatalf("short %v long %v", short, long)
	}
	for _, bad := range []string{`[]`, `{"m":{"input_per_mtok":1}}`, `{"m":{"input_per_mtok":-1,"output_per_mtok":1}}`, `{"m":{"input_per_mtok":1,"output_per_mtok":1,"x":1}}`} {
		if _, err := replay.ParsePrices([]byte(bad)); err == nil {
			t.Errorf("ParsePrices(%s) accepted", bad)
		}
	}
}

func TestParseSupplyLimits(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"tools":{`)
	for i := range 201 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"t%d":1`, i)
	}
	b.WriteString("}}")
	if _, err := replay.ParseSupply([]byte(b.String())); err == nil || !strings.Contains(err.Error(), "at most 200") {
		t.Fatalf("201 tools: %v", err)
	}
	big := `{"calls":{"a:1":"` + strings.Repeat("x", 70000) + `"}}`
	if _, err := replay.ParseSupply([]byte(big)); err == nil {
		t.Fatal("70 KB accepted")
	}
	if _, err := replay.ParseSupply([]byte(`{"calls":{},"other":1}`)); err == nil {
		t.Fatal("unknown key accepted")
	}
}
