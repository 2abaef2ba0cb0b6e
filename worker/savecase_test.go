package worker_test

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/memstore"
)

// TestCasePricesNotSaved: a run_case whose options carry prices runs with
// them (its live model calls are priced by them under max_cost_usd), and a
// save_case of that case run stores no trace of them in the bundle, though
// the bundle's history holds the run's run:submitted request.
func TestCasePricesNotSaved(t *testing.T) {
	t.Parallel()
	st := memstore.New(memstore.Options{})
	hash := saveSample(t, st, "support-agent-recorded.json")
	e, calls := setupScripted(t, st)
	// local-support-2 has no default price: only the prices option prices
	// it. price-only-model-x is named nowhere but in the prices.
	prices := map[string]any{
		"local-support-2":    map[string]any{"input_per_mtok": 4321.5, "output_per_mtok": 8765.25},
		"price-only-model-x": map[string]any{"input_per_mtok": 1111.5, "output_per_mtok": 2222.25},
	}
	source := map[string]any{"bundle": map[string]any{"fixture_hash": hash}}
	options := func(withPrices bool) map[string]any {
		o := map[string]any{"model": "local-support-2", "from_start": true, "allow_write": []string{"tool:refund"}, "max_cost_usd": 1000}
		if withPrices {
			o["prices"] = prices
		}
		return o
	}
	e.send("p1", "run_case", map[string]any{"target_name": "support_agent", "source": source, "options": options(true)})
	e.send("p2", "run_case", map[string]any{"target_name": "support_agent", "source": source, "options": options(false)})
	replies := map[string]messages.Reply{}
	for _, r := range e.waitReplies(2) {
		replies[r.MessageID] = r
	}
	// Without the prices the model has no price under max_cost_usd.
	if kind, code := last(t, e.waitRun(runResult(t, replies["p2"]).RunID, 20*time.Second)); kind != "run:error" || code != messages.LiveBudgetExceeded {
		t.Fatalf("p2 (no prices) ended %s %s, want run:error live_budget_exceeded", kind, code)
	}
	runID := runResult(t, replies["p1"]).RunID
	events := e.waitRun(runID, 20*time.Second)
	if kind, code := last(t, events); kind != "run:complete" {
		t.Fatalf("p1 ended %s %s", kind, code)
	}
	var outcome struct {
		CostUSD        float64 `json:"cost_usd"`
		CostObservable bool    `json:"cost_observable"`
		LiveCalls      int     `json:"live_calls"`
	}
	for _, ev := range events {
		if ev.Kind == "case:outcome" {
			raw, _ := json.Marshal(ev.Extra)
			_ = json.Unmarshal(raw, &outcome)
		}
	}
	// Each model call: 10 input and 2 output tokens at the prices' rates.
	perCall := (10*4321.5 + 2*8765.25) / 1e6
	if n := calls.Load(); n == 0 || !outcome.CostObservable || math.Abs(outcome.CostUSD-float64(n)*perCall) > 1e-6 {
		t.Fatalf("case:outcome cost_usd %v (observable %v) after %d model calls, want %v", outcome.CostUSD, outcome.CostObservable, n, float64(n)*perCall)
	}

	// Save the case run after its last event, and with inputs only.
	lastSeq := events[len(events)-1].RunSeq
	e.send("s1", "save_case", map[string]any{"target_name": "support_agent", "run_id": runID, "fork_after_seq": lastSeq})
	e.send("s2", "save_case", map[string]any{"target_name": "support_agent", "run_id": runID})
	replies = map[string]messages.Reply{}
	for _, r := range e.waitReplies(4)[2:] {
		replies[r.MessageID] = r
	}
	for _, id := range []string{"s1", "s2"} {
		r := replies[id]
		wantReply(t, r, messages.StatusOK, "")
		var res messages.SaveCaseResult
		if err := json.Unmarshal(r.Result, &res); err != nil {
			t.Fatal(err)
		}
		h, err := bundle.ParseHash(res.FixtureHash)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := store.Get(context.Background(), st, h)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, leak := range []string{`"prices"`, "price-only-model-x", "4321.5", "8765.25", "1111.5", "2222.25"} {
			if strings.Contains(string(got), leak) {
				t.Errorf("%s: the bundle holds %s", id, leak)
			}
		}
		if id == "s1" && !strings.Contains(string(got), `"max_cost_usd":1000`) {
			t.Errorf("s1: the bundle's history lacks the run:submitted request")
		}
	}
}

// TestSaveCaseKindMismatch: save_case refuses kind_mismatch both ways, as
// `pyrula case save --kind` does: agent for a run without model or tool
// calls, workflow for a run with them.
func TestSaveCaseKindMismatch(t *testing.T) {
	t.Parallel()
	e := setup(t, memstore.New(memstore.Options{}), nil)
	wf := e.record("checkout")
	ag := e.record("support_agent")
	e.send("k1", "save_case", map[string]any{"target_name": "checkout", "run_id": wf, "kind": "agent"})
	e.send("k2", "save_case", map[string]any{"target_name": "support_agent", "run_id": ag, "kind": "workflow"})
	e.send("k3", "save_case", map[string]any{"target_name": "support_agent", "run_id": ag, "kind": "agent"})
	got := map[string]messages.Reply{}
	for _, r := range e.waitReplies(3) {
		got[r.MessageID] = r
	}
	wantReply(t, got["k1"], messages.StatusRefused, messages.KindMismatch)
	if !strings.Contains(got["k1"].Message, wf+" made no model or tool calls") {
		t.Errorf("k1: %s", got["k1"].Message)
	}
	wantReply(t, got["k2"], messages.StatusRefused, messages.KindMismatch)
	wantReply(t, got["k3"], messages.StatusOK, "")
}
