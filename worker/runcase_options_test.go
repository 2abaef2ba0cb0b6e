package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/memstore"
)

// saveSample saves a sample case of testdata/cases into st and returns its
// hash.
func saveSample(t *testing.T, st store.Store, name string) string {
	t.Helper()
	f, err := os.Open("../testdata/cases/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := bundle.Read(f, bundle.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Save(context.Background(), st, c); err != nil {
		t.Fatal(err)
	}
	return string(c.Hash())
}

// TestRunCaseOptionTypos: a run_case whose allow_write token or supply
// entry names nothing of the target is refused invalid_overrides at
// submission, in the message's terms; a step token that only the case
// could make valid is checked by the executor against the case, ending the
// run with run:error invalid_overrides. The case:outcome lists the unused
// supplied entries.
func TestRunCaseOptionTypos(t *testing.T) {
	t.Parallel()
	st := memstore.New(memstore.Options{})
	checkout := map[string]any{"bundle": map[string]any{"fixture_hash": saveSample(t, st, "checkout-recorded.json")}}
	agent := map[string]any{"bundle": map[string]any{"fixture_hash": saveSample(t, st, "support-agent-recorded.json")}}
	e := setup(t, st, nil)
	send := func(id, target string, source, options map[string]any) {
		e.send(id, "run_case", map[string]any{"target_name": target, "source": source, "options": options})
	}
	send("o1", "support_agent", agent, map[string]any{"allow_write": []string{"tool:refund", "tool:refnd"}})
	send("o2", "checkout", checkout, map[string]any{"allow_write": []string{"step:reserve:0"}})
	send("o3", "support_agent", agent, map[string]any{"supply": map[string]any{"tools": map[string]any{"refnd": map[string]any{}}}})
	send("o4", "checkout", checkout, map[string]any{"supply": map[string]any{"calls": map[string]any{"stp:quote:0": map[string]any{}}}})
	send("o5", "checkout", checkout, map[string]any{"allow_write": []string{"step:reserve", "step:notify"}})
	send("o6", "support_agent", agent, map[string]any{"allow_write": []string{"tool:refund"},
		"supply": map[string]any{"tools": map[string]any{"refund": map[string]any{"refund_id": "re_sim"}}}})
	replies := map[string]messages.Reply{}
	for _, r := range e.waitReplies(6) {
		replies[r.MessageID] = r
	}
	for id, want := range map[string]string{
		"o1": `options.allow_write[1] "tool:refnd" names no tool or step of support_agent (valid: tool:lookup_order, tool:refund, tool:refund_policy)`,
		"o2": `options.allow_write[0] "step:reserve:0" is a call key (stop_key); the allow token is step:reserve`,
		"o3": `options.supply.tools["refnd"] names no tool of support_agent (valid: lookup_order, refund, refund_policy)`,
		"o4": `options.supply.calls["stp:quote:0"] is not <kind>:<key> with a call kind (step, model, tool,`,
	} {
		wantReply(t, replies[id], messages.StatusRefused, messages.InvalidOverrides)
		if !strings.Contains(replies[id].Message, want) {
			t.Errorf("%s: message %q, want it to contain %q", id, replies[id].Message, want)
		}
	}

	// step:notify could be a step the case recorded: the executor checks it
	// against the case, which has none.
	events := e.waitRun(runResult(t, replies["o5"]).RunID, 20*time.Second)
	kind, code := last(t, events)
	msg := events[len(events)-1].Message
	want := `options.allow_write[1] "step:notify" names no tool or step of checkout (valid: step:approval, step:child:0,`
	if kind != "run:error" || code != messages.InvalidOverrides || !strings.Contains(msg, want) || count(events, "case:outcome") != 1 {
		t.Errorf("o5 ended %s %s %q, want run:error invalid_overrides %q", kind, code, msg, want)
	}

	// The recording answers the refund: the supplied tool is unused.
	events = e.waitRun(runResult(t, replies["o6"]).RunID, 20*time.Second)
	if kind, code := last(t, events); kind != "run:complete" {
		t.Fatalf("o6 ended %s %s", kind, code)
	}
	var outcome struct {
		UnusedSupply *[]string `json:"unused_supply"`
	}
	for _, ev := range events {
		if ev.Kind == "case:outcome" {
			raw, _ := json.Marshal(ev.Extra)
			_ = json.Unmarshal(raw, &outcome)
		}
	}
	if outcome.UnusedSupply == nil || fmt.Sprint(*outcome.UnusedSupply) != "[tools:refund]" {
		t.Errorf("o6 case:outcome unused_supply %v, want [tools:refund]", outcome.UnusedSupply)
	}
}
