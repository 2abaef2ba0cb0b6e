package cli_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// valueLine is a call or outcome line of case run --values.
type valueLine struct {
	Type           string          `json:"type"`
	Kind           string          `json:"kind"`
	Key            string          `json:"key"`
	Effect         string          `json:"effect"`
	Provenance     json.RawMessage `json:"provenance"`
	Result         json.RawMessage `json:"result"`
	Error          json.RawMessage `json:"error"`
	Status         string          `json:"status"`
	Code           string          `json:"code"`
	Reason         string          `json:"reason"`
	StopKey        *string         `json:"stop_key"`
	StopToken      *string         `json:"stop_token"`
	LiveCalls      int             `json:"live_calls"`
	UnconsumedKeys *[]string       `json:"unconsumed_keys"`
	Divergence     *struct {
		Call string `json:"call"`
	} `json:"divergence"`
}

// caseRun runs `case run` and splits its output into call lines (by
// kind:key) and the outcome line.
func caseRun(t *testing.T, e *journalEnv, args ...string) (result, map[string]valueLine, valueLine) {
	t.Helper()
	r := e.run(append([]string{"case", "run"}, args...)...)
	lines := decodeLines[valueLine](t, r)
	if len(lines) == 0 || lines[len(lines)-1].Type != "outcome" {
		t.Fatalf("no outcome line\n%s", r)
	}
	calls := map[string]valueLine{}
	for _, l := range lines[:len(lines)-1] {
		calls[l.Kind+":"+l.Key] = l
	}
	return r, calls, lines[len(lines)-1]
}

// savedRun records a run of target with args (e.g. --input) and saves it
// after the call:done of call id, returning the case's hash.
func savedRun(t *testing.T, e *journalEnv, target, afterCall string, args ...string) string {
	t.Helper()
	out := e.record(target, args...)
	r := e.run("events", out.RunID)
	wantOK(t, r)
	var fork int64
	for _, ev := range decodeLines[event](t, r) {
		if ev.Kind == "call:done" && ev.Call != nil && ev.Call.Kind+":"+ev.Call.Key == afterCall {
			fork = ev.RunSeq
		}
	}
	if fork == 0 {
		t.Fatalf("no call:done of %s", afterCall)
	}
	r = e.run("case", "save", target, out.RunID, "--fork-after-seq", fmt.Sprint(fork))
	wantOK(t, r)
	var s saveOut
	decodeOne(t, r, &s)
	return s.FixtureHash
}

func str(p *string) string {
	if p == nil {
		return "<null>"
	}
	return *p
}

// TestCaseRunWaitsNeedAnswers: a case run never waits. An interrupt or a
// stream read that the recording does not hold and nothing supplies stops
// the run with missing_context naming the call (stop_key) and no token; a
// supplied answer of the right shape is simulated, one of the wrong shape
// is missing_context; under --replay-only (which ignores --supply) the new
// call is replay_diverged with reason unexpected_call. The case is a
// recorded triage run with its defaults (only the classify step); the
// inputs turn on the calls.
func TestCaseRunWaitsNeedAnswers(t *testing.T) {
	t.Parallel()
	e := newJournalEnv(t, false)
	h := savedRun(t, e, "triage", "step:classify:0")
	r, calls, out := caseRun(t, e, h, "--replay-only")
	if r.code != 0 || out.Status != "complete" || len(calls) != 0 || out.UnconsumedKeys == nil || len(*out.UnconsumedKeys) != 0 {
		t.Fatalf("replay-only pass\n%s", r)
	}

	for _, tc := range []struct {
		input, key, supply, result string
	}{
		{"ask_reviewer=true", "interrupt:review:0",
			`{"calls":{"interrupt:review:0":{"action":"escalate","value":{"note":"angry customer"}}}}`, `"review":"escalate"`},
		{"follow_updates=true", "stream:updates:0",
			`{"calls":{"stream:updates:0":{"text":"customer replied"}}}`, `"update":"customer replied"`},
	} {
		t.Run(tc.key, func(t *testing.T) {
			r, calls, out := caseRun(t, e, h, "--input", tc.input)
			if r.code != 3 || out.Status != "error" || out.Code != "missing_context" || str(out.StopKey) != tc.key ||
				out.StopToken != nil || !strings.Contains(r.stdout, `"stop_token":null`) {
				t.Fatalf("no answer: want missing_context at %s\n%s", tc.key, r)
			}
			if _, ok := calls[tc.key]; ok {
				t.Fatalf("a call line for the stopped call\n%s", r)
			}

			supply := writeFile(t, "supply.json", []byte(tc.supply))
			r, calls, out = caseRun(t, e, h, "--input", tc.input, "--supply", supply, "--values")
			if r.code != 0 || out.Status != "complete" || string(calls[tc.key].Provenance) != `"simulated"` ||
				!strings.Contains(string(out.Result), tc.result) || out.LiveCalls != 0 {
				t.Fatalf("supplied: want %s simulated and %s in the result\n%s", tc.key, tc.result, r)
			}

			r, _, out = caseRun(t, e, h, "--replay-only", "--input", tc.input, "--supply", supply)
			if r.code != 3 || out.Code != "replay_diverged" || out.Reason != "unexpected_call" || str(out.StopKey) != tc.key ||
				out.Divergence == nil || out.Divergence.Call != tc.key {
				t.Fatalf("replay-only: want replay_diverged unexpected_call at %s\n%s", tc.key, r)
			}
		})
	}

	// An interrupt answer without an action has the wrong shape.
	bad := writeFile(t, "bad.json", []byte(`{"calls":{"interrupt:review:0":{"value":1}}}`))
	r, _, out = caseRun(t, e, h, "--input", "ask_reviewer=true", "--supply", bad)
	if r.code != 3 || out.Code != "missing_context" || str(out.StopKey) != "interrupt:review:0" {
		t.Fatalf("wrong shape\n%s", r)
	}
}

// TestCaseRunSleepAdvancesNow: a durable sleep after the fork does not
// wait; it moves the case run's clock, so the clock read after it is an
// hour on (a run that waited would hang past the test's timeout). Both are
// pure calls: live, free of the live budget, and allowed under
// --replay-only.
func TestCaseRunSleepAdvancesNow(t *testing.T) {
	t.Parallel()
	e := newJournalEnv(t, false)
	h := savedRun(t, e, "triage", "step:classify:0")
	for _, extra := range [][]string{nil, {"--replay-only"}, {"--live-budget", "0"}} {
		before := time.Now()
		args := append([]string{h, "--input", "snooze_ms=3600000", "--values"}, extra...)
		r, calls, out := caseRun(t, e, args...)
		if r.code != 0 || out.Status != "complete" || out.LiveCalls != 0 {
			t.Fatalf("%v: want a complete run\n%s", extra, r)
		}
		for _, id := range []string{"sleep:0", "now:0"} {
			if c := calls[id]; string(c.Provenance) != `"live"` || c.Effect != "pure" {
				t.Fatalf("%v: %s: want a live pure call\n%s", extra, id, r)
			}
		}
		var s string
		if err := json.Unmarshal(calls["now:0"].Result, &s); err != nil {
			t.Fatalf("now:0 result %s: %v", calls["now:0"].Result, err)
		}
		now, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		if d := now.Sub(before); d < time.Hour-time.Second || d > time.Hour+5*time.Minute {
			t.Fatalf("%v: now:0 is %s after the start, want an hour\n%s", extra, d, r)
		}
		var res struct {
			WokeAt time.Time `json:"woke_at"`
		}
		if err := json.Unmarshal(out.Result, &res); err != nil || !res.WokeAt.Equal(now.Truncate(time.Second)) {
			t.Fatalf("%v: result woke_at %v, want %v (%v)\n%s", extra, res.WokeAt, now, err, r)
		}
	}
}

// TestCaseRunRecordedError: the recorded run's child failed (its type is a
// reason code, runtime_error) and the target carried on. A case run reuses
// the recorded error; --replay-only refuses to replay it:
// replay_diverged with reason recorded_error. A target that fails in a case
// run is runtime_error; a new child run is a write that needs its token.
func TestCaseRunRecordedError(t *testing.T) {
	t.Parallel()
	e := newJournalEnv(t, false)
	h := savedRun(t, e, "triage", "step:classify:0", "--input", `second_opinion="X-1"`)
	r, calls, out := caseRun(t, e, h, "--values")
	child := calls["step:child:0"]
	if r.code != 0 || string(child.Provenance) != `"reused"` || !strings.Contains(string(child.Error), `"type":"runtime_error"`) ||
		!strings.Contains(string(out.Result), `"second_opinion":"failed: runtime_error"`) {
		t.Fatalf("reused error\n%s", r)
	}
	r, _, out = caseRun(t, e, h, "--replay-only")
	if r.code != 3 || out.Code != "replay_diverged" || out.Reason != "recorded_error" || str(out.StopKey) != "step:child:0" {
		t.Fatalf("replay-only: want replay_diverged recorded_error\n%s", r)
	}
	// From the start with an unknown ticket the changed read runs live and
	// fails, and so does the target: runtime_error, exit 3, no stop key.
	r, calls, out = caseRun(t, e, h, "--from-start", "--input", `ticket="X-2"`)
	if r.code != 3 || out.Status != "error" || out.Code != "runtime_error" || out.StopKey != nil ||
		string(calls["step:classify:0"].Provenance) != `"changed"` || !strings.Contains(r.stdout, `"stop_key":null`) {
		t.Fatalf("runtime_error\n%s", r)
	}
	// A new child: a write that needs its step:<id> token.
	h = savedRun(t, e, "triage", "step:classify:0")
	r, _, out = caseRun(t, e, h, "--input", `second_opinion="T-9"`)
	if r.code != 3 || out.Code != "write_not_allowed" || str(out.StopKey) != "step:child:0" || str(out.StopToken) != "step:child:0" {
		t.Fatalf("new child without a token\n%s", r)
	}
	r, calls, out = caseRun(t, e, h, "--input", `second_opinion="T-9"`, "--allow-write", "step:child:0", "--values")
	if r.code != 0 || string(calls["step:child:0"].Provenance) != `"live"` || out.LiveCalls != 1 ||
		!strings.Contains(string(out.Result), `"second_opinion":"refunds"`) {
		t.Fatalf("new child allowed\n%s", r)
	}
}

// TestCaseRunUnconsumedKeys: under --replay-only a run that completes but
// never makes recorded post-fork calls lists them in unconsumed_keys and
// exits 3; without --replay-only the same run passes.
func TestCaseRunUnconsumedKeys(t *testing.T) {
	t.Parallel()
	e := newJournalEnv(t, false)
	h := savedRun(t, e, "triage", "step:classify:0", "--input", "snooze_ms=5")
	r, _, out := caseRun(t, e, h, "--replay-only")
	if r.code != 0 || out.UnconsumedKeys == nil || len(*out.UnconsumedKeys) != 0 {
		t.Fatalf("replay-only pass\n%s", r)
	}
	r, _, out = caseRun(t, e, h, "--replay-only", "--input", "snooze_ms=0")
	if r.code != 3 || out.Status != "complete" || out.Code != "" || out.UnconsumedKeys == nil ||
		!slices.Equal(*out.UnconsumedKeys, []string{"now:0", "sleep:0"}) {
		t.Fatalf("unconsumed: want exit 3 with now:0 and sleep:0\n%s", r)
	}
	r, _, out = caseRun(t, e, h, "--input", "snooze_ms=0")
	if r.code != 0 || out.Status != "complete" || out.UnconsumedKeys != nil {
		t.Fatalf("without --replay-only\n%s", r)
	}
}

// TestCaseRunSuppliedModelAnswer: a model call the recording lacks takes a
// supplied answer before it would run live: a string answer is simulated
// (and the turn ends with it), an answer of another shape is
// missing_context naming the call.
func TestCaseRunSuppliedModelAnswer(t *testing.T) {
	t.Parallel()
	e := newJournalEnv(t, false)
	h := savedRun(t, e, "support_agent", "model:0")
	edited := editedCase(t, e, h, "1") // without model:1's result
	bad := writeFile(t, "bad-model.json", []byte(`{"calls":{"model:1":42}}`))
	r, _, out := caseRun(t, e, edited, "--supply", bad)
	if r.code != 3 || out.Code != "missing_context" || str(out.StopKey) != "model:1" || out.StopToken != nil {
		t.Fatalf("wrong-shaped model answer\n%s", r)
	}
	good := writeFile(t, "good-model.json", []byte(`{"calls":{"model:1":"We will refund you today."}}`))
	r, calls, out := caseRun(t, e, edited, "--supply", good, "--values")
	if r.code != 0 || string(calls["model:1"].Provenance) != `"simulated"` || out.LiveCalls != 0 ||
		!strings.Contains(string(out.Result), "We will refund you today.") {
		t.Fatalf("string model answer\n%s", r)
	}
}
