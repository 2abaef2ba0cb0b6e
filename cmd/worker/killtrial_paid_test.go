package main_test

// The paid part of the kill trial: case runs and suites of the paid agent
// (internal/paidworker) whose model calls are all live, against a local
// OpenAI-compatible server that counts and bills each request by model,
// and whose write step is allowed (the server counts its executions).
// Each paid run has a model of its own, so that the server's counts tell
// the runs apart: after the trial, each run's requests, writes and bill are
// held to what its journal and its lease epochs allow.

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// The kinds of paid message the trial sends.
const (
	kindPaidStart = "start_run of the paid agent (the recording)"
	kindPaidSave  = "save_case of the paid recording"
	kindPaidCase  = "run_case with live model calls"
	kindPaidSuite = "run_suite with live model calls"
	// paidCalls is how many model calls the paid agent makes.
	paidCalls = 3
)

// paidOptions are run_case options that make every call of the paid
// agent's bundle live under model (another model than the recording's),
// with its write allowed and model priced.
func paidOptions(model string) map[string]any {
	return map[string]any{"model": model, "allow_write": []string{"step:notify"}, "live_budget": 10,
		"prices": map[string]any{model: map[string]any{"input_per_mtok": paidPrice, "output_per_mtok": paidPrice}}}
}

// paidCaseModel is the model of the paid run_case id.
func paidCaseModel(id string) string { return "kt-" + id }

// paidSuiteModel is the model of arm of the paid run_suite id.
func paidSuiteModel(id string, arm int) string { return fmt.Sprintf("kt-%s-%d", id, arm) }

// paidCase is a run_case of the paid bundle hash with every call live.
func paidCase(id, hash string) envelope {
	return envelope{MessageID: id, Type: "run_case", Body: map[string]any{
		"target_name": "paid",
		"source":      map[string]any{"bundle": map[string]any{"fixture_hash": hash}},
		"options":     paidOptions(paidCaseModel(id)),
	}}
}

// paidSuite is a run_suite of the paid bundle hash under suiteArms arms,
// each with every call live under a model of its own.
func paidSuite(id, hash string) envelope {
	arms := make([]map[string]any, suiteArms)
	for a := range arms {
		arms[a] = map[string]any{"name": fmt.Sprintf("m%d", a), "options": paidOptions(paidSuiteModel(id, a))}
	}
	return envelope{MessageID: id, Type: "run_suite", Body: map[string]any{
		"target_name": "paid", "cases": map[string]any{"bundles": []string{hash}}, "arms": arms,
	}}
}

// seedPaid records the paid agent live once (model m1) and saves the case
// after its start, before any kill: the bundle the paid case runs use.
func (k *killTrial) seedPaid() {
	t := k.t
	start := k.note(envelope{MessageID: k.id("paid-seed"), Type: "start_run", Body: map[string]any{"target_name": "paid"}}, kindPaidStart)
	sendAll(t, k.c, k.stream, []any{start})
	k.waitReplied(60 * time.Second)
	var r reply
	raw := allReplies(t, k.c, k.replies)[start.MessageID][0]
	if err := json.Unmarshal([]byte(raw), &r); err != nil || runResultID(r) == "" {
		t.Fatalf("paid seed %s: reply %s, want an ok start_run", start.MessageID, raw)
	}
	k.paidSeedRun = runResultID(r)
	waitRunsFinished(t, k.c, k.ns, []string{k.paidSeedRun}, 60*time.Second)
	save := k.note(envelope{MessageID: k.id("paid-save"), Type: "save_case", Body: map[string]any{"target_name": "paid", "run_id": k.paidSeedRun, "fork_after_seq": 2}}, kindPaidSave)
	sendAll(t, k.c, k.stream, []any{save})
	k.waitReplied(60 * time.Second)
	raw = allReplies(t, k.c, k.replies)[save.MessageID][0]
	if err := json.Unmarshal([]byte(raw), &r); err != nil || fixtureHashOf(r) == "" {
		t.Fatalf("paid seed save %s: reply %s, want ok", save.MessageID, raw)
	}
	k.paidHash = fixtureHashOf(r)
	k.seenRun[start.MessageID], k.seenRun[save.MessageID] = true, true
}

// paidWave adds the paid messages of one wave: a paid run_case every wave,
// a paid run_suite every sixth.
func (k *killTrial) paidWave(add func(envelope, string)) {
	add(paidCase(k.id("paid-case"), k.paidHash), kindPaidCase)
	if k.waves%6 == 0 {
		m := paidSuite(k.id("paid-suite"), k.paidHash)
		k.suiteCases[m.MessageID] = 1
		add(m, kindPaidSuite)
	}
}

// checkPaidRun checks paid run id, of model, with journal j and lease
// epoch epoch (how many executions it had: each may have been cut with one
// call in flight): its paidCalls model calls and its write done once in
// the journal; the server saw each of its questions at least once and in
// all at most one request more per cut execution; the write ran at least
// once and at most once per execution; its outcome costs no less than the
// server billed it.
func (k *killTrial) checkPaidRun(id, model string, j runJournal, epoch int64) {
	t := k.t
	done := j.callsDone()
	answered := 0
	for call, n := range done {
		if strings.HasPrefix(call, "model:") {
			answered += n
		}
	}
	if answered != paidCalls || done["step:notify:0"] != 1 {
		t.Errorf("paid run %s: %d model answers and the write done %d times in its journal, want %d and 1:\n%s", id, answered, done["step:notify:0"], paidCalls, j)
		return
	}
	if n := j.count("case:outcome"); n != 1 {
		t.Errorf("paid run %s: %d case:outcome events, want 1", id, n)
		return
	}
	cost := -1.0
	for _, e := range j.events {
		if e.Kind == "case:outcome" {
			cost = e.CostUSD
		}
	}
	b := k.paid.bill(model)
	requests := 0
	for _, n := range b.requests {
		requests += n
	}
	cuts := int(epoch) - 1
	if len(b.requests) != paidCalls {
		t.Errorf("paid run %s (model %s): the server saw %d questions, want %d: %v\n%s", id, model, len(b.requests), paidCalls, b.requests, j)
	}
	// Without PYRULA_WAIT_REPLICAS a failover may lose a run's latest
	// events: the run makes those calls again, and its outcome counts only
	// the journal that survived (docs/operate.md).
	over := func(format string, args ...any) {
		if k.lossesAllowed {
			k.lost(lossPaidAgain, fmt.Sprintf("paid run %s: "+format, append([]any{id}, args...)...))
			return
		}
		t.Errorf("paid run %s: "+format, append([]any{id}, args...)...)
	}
	switch {
	case requests > paidCalls+cuts:
		over("the server saw %d requests in %d executions, want at most %d: %v\n%s", requests, epoch, paidCalls+cuts, b.requests, j)
	case b.writes < 1 || b.writes > 1+cuts:
		over("the write ran %d times in %d executions, want 1 to %d", b.writes, epoch, 1+cuts)
	case cost < b.billed-1e-12:
		over("the outcome costs $%g, below the $%g the server billed for %d requests", cost, b.billed, requests)
	}
	k.paidRequests += requests
	k.paidAgain += requests - paidCalls
	k.paidWritesAgain += b.writes - 1
	if cuts > 0 {
		k.paidResumed++
		if strings.HasPrefix(id, "suite_") {
			k.paidChildrenResumed++
		}
	}
}
