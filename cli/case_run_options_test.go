package cli_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// sampleCase is a recorded sample case of testdata/cases.
func sampleCase(name string) string { return filepath.Join("..", "testdata", "cases", name) }

// editedSample writes a copy of a sample case changed by edit and returns
// its path.
func editedSample(t *testing.T, name string, edit func(b map[string]any)) string {
	t.Helper()
	var b map[string]any
	if err := json.Unmarshal(readFile(t, sampleCase(name)), &b); err != nil {
		t.Fatal(err)
	}
	edit(b)
	raw, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, "edited-"+name, raw)
}

// caseRunArgs runs case run with no server configured.
func caseRunArgs(t *testing.T, args ...string) result {
	t.Helper()
	return run(t, invocation{args: append([]string{"case", "run"}, args...)})
}

// TestCaseRunAllowWriteTypos: an --allow-write token that names no tool or
// step of the target is invalid input listing the valid tokens; a call key
// pasted for its token says which token was meant; tokens from the bundle
// (its manifest's registration, steps its recorded calls hold) are valid.
func TestCaseRunAllowWriteTypos(t *testing.T) {
	t.Parallel()
	checkout, agent := sampleCase("checkout-recorded.json"), sampleCase("support-agent-recorded.json")

	wantError(t, caseRunArgs(t, checkout, "--allow-write", "step:reserv"),
		"--allow-write step:reserv names no tool or step of checkout (valid: step:approval, step:child:0, step:format_receipt, step:quote, step:reserve, step:send_receipt, step:sigsend:0)")
	wantError(t, caseRunArgs(t, checkout, "--allow-write", "step:reserve", "--allow-write", "step:reserve:0"),
		"step:reserve:0 is a call key (stop_key); the allow token is step:reserve")
	wantError(t, caseRunArgs(t, checkout, "--allow-write", "reserve"), "--allow-write reserve names no tool or step of checkout")
	wantError(t, caseRunArgs(t, checkout, "--allow-write", "tool:refund"), "names no tool or step of checkout")
	wantError(t, caseRunArgs(t, agent, "--allow-write", "tool:refnd"),
		"--allow-write tool:refnd names no tool or step of support_agent (valid: tool:lookup_order, tool:refund, tool:refund_policy)")
	// tool:<tool-use id> is the stop_key of a tool call.
	wantError(t, caseRunArgs(t, agent, "--allow-write", "tool:toolu_03"),
		"tool:toolu_03 is a call key (stop_key); the allow token is tool:refund")
	// Under --replay-only too: the token is still a typo.
	wantError(t, caseRunArgs(t, agent, "--replay-only", "--allow-write", "tool:refnd"), "names no tool or step")

	// Every valid form passes: step names and ids, a child target's name,
	// more children than were declared, tools.
	r := caseRunArgs(t, checkout, "--replay-only", "--allow-write", "step:reserve", "--allow-write", "step:child:0",
		"--allow-write", "step:sigsend:0", "--allow-write", "step:send_receipt", "--allow-write", "step:child:3")
	wantOK(t, r)
	wantOK(t, caseRunArgs(t, agent, "--replay-only", "--allow-write", "tool:refund", "--allow-write", "tool:refund_policy"))

	// Decision: a step called inline without a declaration (its token
	// step:<name>) is valid once the case recorded a call of it; a step of
	// the manifest's registration (older code) is valid too.
	wantError(t, caseRunArgs(t, checkout, "--allow-write", "step:notify"), "names no tool or step of checkout")
	inline := editedSample(t, "checkout-recorded.json", func(b map[string]any) {
		b["results"] = append(b["results"].([]any), map[string]any{
			"kind": "step", "key": "notify:0", "fingerprint": strings.Repeat("0", 64), "result": nil})
		reg := b["manifest"].(map[string]any)["registration"].(map[string]any)
		reg["steps"] = append(reg["steps"].([]any), map[string]any{"id": "audit", "name": "audit", "effect": "write"})
	})
	r = caseRunArgs(t, inline, "--allow-write", "step:notify", "--allow-write", "step:audit")
	wantOK(t, r)
	wantError(t, caseRunArgs(t, inline, "--allow-write", "step:notify:0"), "step:notify:0 is a call key (stop_key); the allow token is step:notify")
}

// TestCaseRunSupplyTypos: a --supply tools entry naming no tool of the
// agent, or a calls key that is not <kind>:<key> of a call kind, is invalid
// input saying what is valid.
func TestCaseRunSupplyTypos(t *testing.T) {
	t.Parallel()
	checkout, agent := sampleCase("checkout-recorded.json"), sampleCase("support-agent-recorded.json")
	supply := func(body string) string { return writeFile(t, "supply.json", []byte(body)) }

	wantError(t, caseRunArgs(t, agent, "--supply", supply(`{"tools":{"refnd":{"refund_id":"re_1"}}}`)),
		`tools["refnd"] names no tool of support_agent (valid: lookup_order, refund, refund_policy)`)
	wantError(t, caseRunArgs(t, checkout, "--supply", supply(`{"tools":{"refund":{}}}`)),
		`tools["refund"] names no tool of checkout: it has no tools`)
	wantError(t, caseRunArgs(t, checkout, "--supply", supply(`{"calls":{"stp:quote:0":{}}}`)),
		`calls["stp:quote:0"] is not <kind>:<key> with a call kind (step, model, tool, sleep, now, random, signal, interrupt, stream)`)
	wantError(t, caseRunArgs(t, checkout, "--supply", supply(`{"calls":{"quote:0":{}}}`)), `calls["quote:0"] is not <kind>:<key>`)
	wantError(t, caseRunArgs(t, checkout, "--supply", supply(`{"calls":{"step:quote":{}}}`)), `calls["step:quote"] is not step:<name>:<n>`)
	wantError(t, caseRunArgs(t, checkout, "--supply", supply(`{"calls":{"model:first":{}}}`)), `calls["model:first"] is not model:<n>`)
	wantError(t, caseRunArgs(t, checkout, "--supply", supply(`{"calls":{"signal:approval":{}}}`)), `is not signal:<name>:<n>`)
	wantError(t, caseRunArgs(t, agent, "--supply", supply(`{"calls":{"tool:refund":{}}}`)), `answer every call of refund with tools["refund"]`)

	// Every kind's key shape passes.
	r := caseRunArgs(t, checkout, "--supply", supply(`{"calls":{"step:quote:0":{},"step:gather:g1":{},"model:0":"x","tool:toolu_9":{},`+
		`"sleep:0":{},"now:0":"2025-01-01T00:00:00Z","random:0":0.5,"signal:approval:0":{"payload":1},"interrupt:ask:0":{},"stream:feed:12":{}}}`))
	wantOK(t, r)
}

// TestCaseRunUnusedSupply: the outcome line lists the supplied entries the
// run never used (always an array).
func TestCaseRunUnusedSupply(t *testing.T) {
	t.Parallel()
	agent := sampleCase("support-agent-recorded.json")
	unusedOf := func(r result) []string {
		t.Helper()
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		var out struct {
			Type         string    `json:"type"`
			UnusedSupply *[]string `json:"unused_supply"`
		}
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &out); err != nil || out.Type != "outcome" || out.UnusedSupply == nil {
			t.Fatalf("want an outcome line with unused_supply (%v)\n%s", err, r)
		}
		return *out.UnusedSupply
	}
	r := caseRunArgs(t, agent)
	wantOK(t, r)
	if got := unusedOf(r); len(got) != 0 {
		t.Fatalf("no --supply: unused_supply %v, want []", got)
	}
	sup := writeFile(t, "s.json", []byte(`{"calls":{"step:quote:0":{"x":1},"model:9":"hi"},"tools":{"refund":{"refund_id":"re_sim","status":"pending"}}}`))
	// The recording answers the refund: every entry is unused.
	r = caseRunArgs(t, agent, "--supply", sup)
	wantOK(t, r)
	if got := fmt.Sprint(unusedOf(r)); got != "[calls:model:9 calls:step:quote:0 tools:refund]" {
		t.Fatalf("unused_supply %s\n%s", got, r)
	}
	// Without the recorded refund the tools entry answers it.
	noRefund := editedSample(t, "support-agent-recorded.json", func(b map[string]any) {
		var keep []any
		for _, res := range b["results"].([]any) {
			if res.(map[string]any)["key"] != "toolu_03" {
				keep = append(keep, res)
			}
		}
		b["results"] = keep
	})
	r = caseRunArgs(t, noRefund, "--supply", sup)
	wantOK(t, r)
	if got := fmt.Sprint(unusedOf(r)); got != "[calls:model:9 calls:step:quote:0]" || !strings.Contains(r.stdout, `"simulated":1`) {
		t.Fatalf("unused_supply %s\n%s", got, r)
	}
}
