package worker_test

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/testwait"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/replay"
	"github.com/pyrula/caseworker/runevent"
	"github.com/pyrula/caseworker/store/memstore"
	"github.com/pyrula/caseworker/suite"
	"github.com/pyrula/caseworker/worker"
)

// saveRuns records n live runs of target and saves each as a case forked
// right after its run:start (every call after it recorded, to replay),
// through the worker; it returns their fixture hashes.
func (e *env) saveRuns(target string, n int) []string {
	e.t.Helper()
	var hashes []string
	for i := range n {
		run := e.record(target)
		r, err := e.journalOf().Run(e.t.Context(), run)
		if err != nil {
			e.t.Fatal(err)
		}
		var fork int64
		for _, ev := range r.Events {
			if ev.Kind == runevent.RunStart {
				fork = ev.RunSeq
			}
		}
		e.send(fmt.Sprintf("save-%d", i), "save_case", map[string]any{"target_name": target, "run_id": run, "fork_after_seq": fork})
		reply := e.waitReplies(i + 1)[i]
		wantReply(e.t, reply, messages.StatusOK, "")
		var res messages.SaveCaseResult
		if err := json.Unmarshal(reply.Result, &res); err != nil {
			e.t.Fatal(err)
		}
		hashes = append(hashes, res.FixtureHash)
	}
	return hashes
}

// suiteResult decodes a run_suite reply.
func suiteResult(t *testing.T, r messages.Reply) messages.RunSuiteResult {
	t.Helper()
	wantReply(t, r, messages.StatusOK, "")
	var res messages.RunSuiteResult
	if err := json.Unmarshal(r.Result, &res); err != nil || res.SuiteID == "" || res.Events == "" {
		t.Fatalf("run_suite result %s: %+v, %v", r.Result, res, err)
	}
	return res
}

// suiteOutcome is the suite:outcome among a suite's events.
func suiteOutcome(t *testing.T, events []journal.Event) suite.Outcome {
	t.Helper()
	for _, ev := range events {
		if ev.Kind != runevent.SuiteOutcome {
			continue
		}
		raw, err := json.Marshal(ev.Extra)
		if err != nil {
			t.Fatal(err)
		}
		var o suite.Outcome
		if err := json.Unmarshal(raw, &o); err != nil {
			t.Fatal(err)
		}
		return o
	}
	t.Fatalf("no suite:outcome among %d events", len(events))
	return suite.Outcome{}
}

// A shadow suite of 6 saved checkout cases under two replay-only arms, on
// two workers: the arm that replays the cases as recorded passes all 6; the
// arm that changes the qty input diverges on every case at the same call,
// in one group that names the call and the field. Every child is a case
// run with its own run id and events, and nothing is left pending.
func TestRunSuiteShadow(t *testing.T) {
	t.Parallel()
	st := memstore.New(memstore.Options{})
	e := setup(t, st, func(c *worker.Config) { c.RunLease = 2 * time.Second })
	second := *e
	second.cfg.ConsumerName = "c2"
	second.start(st)
	hashes := e.saveRuns("checkout", 6)
	e.send("suite-1", "run_suite", map[string]any{"target_name": "checkout",
		"cases": map[string]any{"bundles": hashes},
		"arms": []map[string]any{
			{"name": "as-recorded", "options": map[string]any{"replay_only": true}},
			{"name": "qty5", "options": map[string]any{"replay_only": true, "inputs": map[string]any{"qty": 5}}},
		}})
	res := suiteResult(t, e.waitReplies(7)[6])
	events := e.waitRun(res.SuiteID, 60*time.Second)
	if kind, code := last(t, events); kind != runevent.RunError || code != messages.SuiteFailed {
		t.Fatalf("suite ended %s %s, want run:error suite_failed", kind, code)
	}
	if n := count(events, runevent.SuitePlan); n != 1 {
		t.Fatalf("%d suite:plan events, want 1", n)
	}
	o := suiteOutcome(t, events)
	if o.Total != 12 || o.Cases != 6 || o.ByStatus[suite.Pass] != 6 || o.ByStatus[suite.Fail] != 6 || o.ByStatus[suite.Error] != 0 {
		t.Fatalf("outcome totals %d cases, %d children, %v; want 6, 12, 6 pass and 6 fail; groups %+v", o.Cases, o.Total, o.ByStatus, o.Groups)
	}
	if len(o.Groups) != 1 {
		t.Fatalf("%d groups, want 1: %+v", len(o.Groups), o.Groups)
	}
	g := o.Groups[0]
	if g.Count != 6 || g.Code != string(messages.ReplayDiverged) || g.Call != "step:quote:0" || !slices.Equal(g.Changed, []string{"$.qty"}) ||
		!slices.Equal(g.Arms, []string{"qty5"}) || len(g.Examples) != suite.MaxExamples {
		t.Fatalf("group %+v, want 6 × replay_diverged at step:quote:0 changing $.qty, under qty5", g)
	}
	if len(o.Arms) != 2 || o.Arms[0].Passed != 6 || o.Arms[1].Failed != 6 || o.LiveCalls != 0 || o.CostUSD != 0 {
		t.Fatalf("arms %+v, live calls %d, cost %v", o.Arms, o.LiveCalls, o.CostUSD)
	}
	if len(o.ArmDiffs) != 1 || o.ArmDiffs[0].Differ != 6 || o.ArmDiffs[0].Arm != "qty5" || o.ArmDiffs[0].Against != "as-recorded" {
		t.Fatalf("arm diffs %+v", o.ArmDiffs)
	}
	if !strings.Contains(o.Message, "6 of 12 children did not pass") || !strings.Contains(o.Message, "step:quote:0") {
		t.Fatalf("outcome message %q", o.Message)
	}
	// Each child is an ordinary case run of its own.
	ex := g.Examples[0]
	child := e.waitRun(ex.RunID, 10*time.Second)
	if kind, code := last(t, child); kind != runevent.RunError || code != messages.ReplayDiverged || count(child, runevent.CaseOutcome) != 1 {
		t.Fatalf("child %s ended %s %s", ex.RunID, kind, code)
	}
	if !strings.HasPrefix(ex.RunID, res.SuiteID+":1:") || !slices.Contains(hashes, ex.Case) {
		t.Fatalf("example %+v of suite %s", ex, res.SuiteID)
	}
	testwait.Eventually(t, 20*time.Second, "nothing pending on the runs stream", func() bool { return e.runsPending() == 0 })
}

// A suite whose selection is under min_cases never passes: the fixture
// store has no case of send_receipt, and a list of one case under
// min_cases 2 is too small too; both end suite_too_small with an outcome.
func TestRunSuiteTooSmall(t *testing.T) {
	t.Parallel()
	st := memstore.New(memstore.Options{})
	e := setup(t, st, nil)
	hash := saveRecorded(t, st)
	arms := []map[string]any{{"options": map[string]any{"replay_only": true}}}
	e.send("empty", "run_suite", map[string]any{"target_name": "send_receipt", "cases": map[string]any{"store": map[string]any{}}, "arms": arms})
	e.send("one", "run_suite", map[string]any{"target_name": "checkout", "cases": map[string]any{"bundles": []string{hash}}, "arms": arms, "min_cases": 2})
	for _, r := range e.waitReplies(2) {
		events := e.waitRun(suiteResult(t, r).SuiteID, 20*time.Second)
		if kind, code := last(t, events); kind != runevent.RunError || code != messages.SuiteTooSmall {
			t.Fatalf("%s ended %s %s, want run:error suite_too_small", r.MessageID, kind, code)
		}
		if o := suiteOutcome(t, events); o.Status != suite.Fail || o.Code != messages.SuiteTooSmall || !strings.Contains(o.Message, "min_cases") {
			t.Fatalf("%s outcome %+v", r.MessageID, o)
		}
	}
}

// TestSuiteResumedAfterItsOutcome: a suite cut short between its
// suite:outcome and its terminal event (a crash; here its terminal event
// is taken back out of the journal and the run handed back) ends with that
// outcome when it is executed again: one suite:outcome, one terminal event.
func TestSuiteResumedAfterItsOutcome(t *testing.T) {
	t.Parallel()
	st := memstore.New(memstore.Options{})
	e := setup(t, st, nil)
	hash := saveRecorded(t, st)
	arms := []map[string]any{{"options": map[string]any{"replay_only": true}}}
	e.send("one", "run_suite", map[string]any{"target_name": "checkout", "cases": map[string]any{"bundles": []string{hash}}, "arms": arms, "min_cases": 2})
	suiteID := suiteResult(t, e.waitReplies(1)[0]).SuiteID
	events := e.waitRun(suiteID, 20*time.Second)
	end := events[len(events)-1]
	if end.Kind != runevent.RunError || count(events, runevent.SuiteOutcome) != 1 {
		t.Fatalf("the suite before the cut: %d events, the last %s", len(events), end.Kind)
	}
	ctx := t.Context()
	meta, evKey, _ := valkeyjournal.Keys(e.cfg.Namespace, suiteID)
	for _, cmd := range []valkey.Completed{
		e.client.B().Xdel().Key(evKey).Id(fmt.Sprintf("0-%d", end.RunSeq)).Build(),
		e.client.B().Xsetid().Key(evKey).LastId(fmt.Sprintf("0-%d", end.RunSeq-1)).Build(),
		e.client.B().Hset().Key(meta).FieldValue().FieldValue("status", "running").FieldValue("last_seq", strconv.FormatInt(end.RunSeq-1, 10)).
			FieldValue("lease_owner", "").FieldValue("lease_until", "0").Build(),
		e.client.B().Xadd().Key(e.cfg.Namespace+":runs").Id("*").FieldValue().FieldValue("run_id", suiteID).Build(),
	} {
		if err := e.client.Do(ctx, cmd).Error(); err != nil {
			t.Fatal(err)
		}
	}
	events = e.waitRun(suiteID, 20*time.Second)
	if kind, code := last(t, events); kind != runevent.RunError || code != messages.SuiteTooSmall ||
		count(events, runevent.SuiteOutcome) != 1 || int64(len(events)) != end.RunSeq {
		t.Fatalf("the suite executed again: %d events (%d suite:outcome), the last %s %s", len(events), count(events, runevent.SuiteOutcome), kind, code)
	}
}

// The store selection runs the fixture store's cases of the target, and a
// suite of one that passes completes.
func TestRunSuiteFromStore(t *testing.T) {
	t.Parallel()
	st := memstore.New(memstore.Options{})
	e := setup(t, st, nil)
	saveRecorded(t, st)
	e.send("store", "run_suite", map[string]any{"target_name": "checkout", "cases": map[string]any{"store": map[string]any{}},
		"arms": []map[string]any{{"options": map[string]any{"replay_only": true}}}})
	events := e.waitRun(suiteResult(t, e.waitReplies(1)[0]).SuiteID, 20*time.Second)
	if kind, code := last(t, events); kind != runevent.RunComplete {
		t.Fatalf("suite ended %s %s, want run:complete", kind, code)
	}
	if o := suiteOutcome(t, events); o.Status != suite.Pass || o.Total != 1 || o.ByStatus[suite.Pass] != 1 || len(o.Groups) != 0 {
		t.Fatalf("outcome %+v", o)
	}
}

// A run_suite body that cannot be acted on is refused before anything is
// submitted, naming the field.
func TestRunSuiteRefusals(t *testing.T) {
	t.Parallel()
	e := setup(t, memstore.New(memstore.Options{}), nil)
	h := strings.Repeat("ab", 32)
	arm := map[string]any{"options": map[string]any{"replay_only": true}}
	for i, c := range []struct {
		body map[string]any
		code messages.Code
		want string
	}{
		{map[string]any{"target_name": "checkout", "cases": map[string]any{"bundles": []string{h}}}, messages.InvalidOverrides, "arms is missing"},
		{map[string]any{"target_name": "checkout", "cases": map[string]any{}, "arms": []any{arm}}, messages.InvalidOverrides, "exactly one of bundles"},
		{map[string]any{"target_name": "checkout", "cases": map[string]any{"bundles": []string{"ABC"}}, "arms": []any{arm}}, messages.InvalidFixtureHash, "cases.bundles[0]"},
		{map[string]any{"target_name": "checkout", "cases": map[string]any{"bundles": []string{h, h}}, "arms": []any{arm}}, messages.InvalidOverrides, "cases.bundles[1] repeats"},
		{map[string]any{"target_name": "checkout", "cases": map[string]any{"bundles": []string{h}}, "arms": []any{arm, map[string]any{"options": map[string]any{"max_cost_usd": -1}}}}, messages.InvalidOverrides, "arms[1].options.max_cost_usd"},
		{map[string]any{"target_name": "checkout", "cases": map[string]any{"bundles": []string{h}}, "arms": []any{map[string]any{"options": map[string]any{"model": "m"}}}}, messages.InvalidOverrides, "apply to agents"},
		{map[string]any{"target_name": "nope", "cases": map[string]any{"bundles": []string{h}}, "arms": []any{arm}}, messages.InvalidOverrides, `no target "nope"`},
	} {
		id := fmt.Sprintf("refused-%d", i)
		e.send(id, "run_suite", c.body)
		var r messages.Reply
		testwait.Eventually(t, 10*time.Second, "the reply to "+id, func() bool {
			for _, got := range e.replies() {
				if got.MessageID == id {
					r = got
					return true
				}
			}
			return false
		})
		if r.Status != messages.StatusRefused || r.Code != c.code || !strings.Contains(r.Message, c.want) {
			t.Errorf("%v: reply %+v, want refused %s naming %q", c.body, r, c.code, c.want)
		}
	}
	if n := e.runsPending(); n != 0 {
		t.Fatalf("%d runs entries after refusals", n)
	}
}

// A suite's budget holds across its children and workers: six children of
// the support agent, each sending its model and tool calls live, on two
// workers, under max_live_calls and max_cost_usd. The live calls reserved
// never pass the ceiling, the children refused end live_budget_exceeded
// with the call that was not sent, and what the suite spent is what the
// model client answered at its price, every reservation settled.
func TestRunSuiteBudget(t *testing.T) {
	t.Parallel()
	st := memstore.New(memstore.Options{})
	hash := saveSample(t, st, "support-agent-recorded.json")
	e, calls := setupScripted(t, st)
	second := *e
	second.cfg.ConsumerName = "c2"
	second.start(st)
	options := map[string]any{"model": "local-support-2", "from_start": true, "allow_write": []string{"tool:refund"},
		"prices": map[string]any{"local-support-2": map[string]any{"input_per_mtok": 1000, "output_per_mtok": 1000}}}
	arms := make([]map[string]any, 6)
	for i := range arms {
		arms[i] = map[string]any{"name": fmt.Sprintf("a%d", i), "options": options}
	}
	// One child alone, to learn how many live calls a child makes.
	e.send("probe", "run_suite", map[string]any{"target_name": "support_agent", "cases": map[string]any{"bundles": []string{hash}},
		"arms": arms[:1], "max_live_calls": 100})
	probe := suiteOutcome(t, e.waitRun(suiteResult(t, e.waitReplies(1)[0]).SuiteID, 30*time.Second))
	per := probe.LiveCalls
	if probe.Status != suite.Pass || per == 0 || probe.Budget == nil || probe.Budget.LiveCalls != per {
		t.Fatalf("probe: %+v, budget %+v", probe, probe.Budget)
	}
	answered := calls.Load()
	limit := 2*per + 1
	e.send("capped", "run_suite", map[string]any{"target_name": "support_agent", "cases": map[string]any{"bundles": []string{hash}},
		"arms": arms, "max_live_calls": limit, "max_cost_usd": 1000})
	events := e.waitRun(suiteResult(t, e.waitReplies(2)[1]).SuiteID, 60*time.Second)
	o := suiteOutcome(t, events)
	b := o.Budget
	if b == nil || b.MaxLiveCalls == nil || *b.MaxLiveCalls != limit || b.LiveCalls > limit || b.UnsettledUSD != 0 {
		t.Fatalf("budget %+v, want at most %d live calls reserved, all settled", b, limit)
	}
	if fit := limit / per; o.ByStatus[suite.Pass] > fit || o.ByStatus[suite.Fail] < 6-fit || o.ByStatus[suite.Fail] == 0 {
		t.Fatalf("by status %v: at most %d children fit %d live calls of %d each", o.ByStatus, fit, limit, per)
	}
	var refused int
	for _, g := range o.Groups {
		if g.Code != string(messages.LiveBudgetExceeded) || g.Call == "" || !strings.Contains(g.Message, "max_live_calls") {
			t.Fatalf("group %+v, want live_budget_exceeded naming the call not sent and the suite's max_live_calls", g)
		}
		refused += g.Count
	}
	if refused != o.ByStatus[suite.Fail] {
		t.Fatalf("%d children refused for budget, %d failed", refused, o.ByStatus[suite.Fail])
	}
	// The spend is the model client's answers at their price: 10 prompt
	// and 2 answer tokens at $1,000 per million each.
	sent := calls.Load() - answered
	if want := replay.USD(float64(sent) * 0.012); math.Abs(float64(b.SpentUSD-want)) > 1e-9 || math.Abs(float64(o.CostUSD-want)) > 1e-9 {
		t.Fatalf("spent %v (outcome %v); the model client answered %d calls: %v", b.SpentUSD, o.CostUSD, sent, want)
	}
	testwait.Eventually(t, 20*time.Second, "nothing pending on the runs stream", func() bool { return e.runsPending() == 0 })
}

// A what-if suite passes or fails on the answers: two arms of the support
// agent answering live, one asserting a reply the model does not give. Its
// children's case runs complete in both arms; the asserting arm's fail in
// one group that names the assertion and what the answer was. An
// assertion that cannot be checked is refused before anything runs.
func TestRunSuiteAssertions(t *testing.T) {
	t.Parallel()
	st := memstore.New(memstore.Options{})
	hash := saveSample(t, st, "support-agent-recorded.json")
	e, _ := setupScripted(t, st)
	options := map[string]any{"model": "local-support-2", "from_start": true, "allow_write": []string{"tool:refund"}}
	e.send("asserted", "run_suite", map[string]any{"target_name": "support_agent", "cases": map[string]any{"bundles": []string{hash}},
		"arms": []map[string]any{
			{"name": "done", "options": options, "assert": []map[string]any{{"path": "$.reply", "equals": "done"}, {"max_live_calls": 5}}},
			{"name": "polite", "options": options, "assert": []map[string]any{{"path": "$.reply", "matches": "(?i)thank"}}},
		}})
	e.send("bad-assert", "run_suite", map[string]any{"target_name": "support_agent", "cases": map[string]any{"bundles": []string{hash}},
		"arms": []map[string]any{{"options": options, "assert": []map[string]any{{"path": "$.reply", "equals": "a", "matches": "b"}}}}})
	replies := map[string]messages.Reply{}
	for _, r := range e.waitReplies(2) {
		replies[r.MessageID] = r
	}
	if r := replies["bad-assert"]; r.Status != messages.StatusRefused || !strings.Contains(r.Message, "arms[0].assert[0] must have exactly one of") {
		t.Fatalf("bad assertion: %+v", r)
	}
	o := suiteOutcome(t, e.waitRun(suiteResult(t, replies["asserted"]).SuiteID, 30*time.Second))
	if o.ByStatus[suite.Pass] != 1 || o.ByStatus[suite.Fail] != 1 || len(o.Groups) != 1 {
		t.Fatalf("outcome %v, groups %+v", o.ByStatus, o.Groups)
	}
	g := o.Groups[0]
	if g.Reason != suite.ReasonAssertion || g.Call != `$.reply matches "(?i)thank"` || !slices.Equal(g.Arms, []string{"polite"}) ||
		g.Message != `$.reply is "done", which "(?i)thank" does not match` {
		t.Fatalf("group %+v", g)
	}
}

// A fail_fast suite stops at its first child that does not pass: on one
// worker running one run at a time, the first child diverges and every
// later child ends at once, not run (skipped), naming the child that
// stopped the suite.
func TestRunSuiteFailFast(t *testing.T) {
	t.Parallel()
	st := memstore.New(memstore.Options{})
	e := setup(t, st, func(c *worker.Config) { c.RunConcurrency = 1 })
	hashes := e.saveRuns("checkout", 3)
	e.send("ff", "run_suite", map[string]any{"target_name": "checkout", "fail_fast": true,
		"cases": map[string]any{"bundles": hashes},
		"arms": []map[string]any{
			{"name": "qty5", "options": map[string]any{"replay_only": true, "inputs": map[string]any{"qty": 5}}},
			{"name": "as-recorded", "options": map[string]any{"replay_only": true}},
		}})
	res := suiteResult(t, e.waitReplies(4)[3])
	o := suiteOutcome(t, e.waitRun(res.SuiteID, 30*time.Second))
	if o.ByStatus[suite.Fail] != 1 || o.ByStatus[suite.Skipped] != 5 || o.ByStatus[suite.Pass] != 0 || o.Code != messages.SuiteFailed ||
		len(o.Groups) != 1 || o.Arms[1].Skipped != 3 || !strings.Contains(o.Message, "5 skipped under fail_fast") {
		t.Fatalf("outcome %v, groups %+v, arms %+v, message %q", o.ByStatus, o.Groups, o.Arms, o.Message)
	}
	skipped := e.waitRun(res.SuiteID+":1:2", 10*time.Second)
	if kind, code := last(t, skipped); kind != runevent.RunError || code != messages.Cancelled {
		t.Fatalf("a skipped child ended %s %s", kind, code)
	}
}

// A suite's child dead-lettered after MaxDeliveries transient failures
// (every Open of its bundle fails) still counts in its suite: the suite
// ends suite_failed, the child failed with runtime_error, instead of
// waiting for it.
func TestRunSuiteChildDeadLettered(t *testing.T) {
	t.Parallel()
	st := &failOpenStore{Store: memstore.New(memstore.Options{})}
	e := setup(t, st, func(c *worker.Config) {
		c.MaxDeliveries = 2
		c.RunLease = 300 * time.Millisecond
	})
	e.send("dead-child", "run_suite", map[string]any{"target_name": "checkout",
		"cases": map[string]any{"bundles": []string{hashN(7)}},
		"arms":  []map[string]any{{"options": map[string]any{"replay_only": true}}}})
	res := suiteResult(t, e.waitReplies(1)[0])
	events := e.waitRun(res.SuiteID, 30*time.Second)
	if kind, code := last(t, events); kind != runevent.RunError || code != messages.SuiteFailed {
		t.Fatalf("suite ended %s %s, want run:error suite_failed", kind, code)
	}
	o := suiteOutcome(t, events)
	if o.Total != 1 || o.ByStatus[suite.Fail] != 1 || len(o.Groups) != 1 || o.Groups[0].Code != string(messages.RuntimeError) ||
		!strings.Contains(o.Groups[0].Message, "dead-lettered") {
		t.Fatalf("outcome %+v, want its one child failed: runtime_error, dead-lettered", o)
	}
	dead, err := e.client.Do(t.Context(), e.client.B().Xrange().Key(e.cfg.Namespace+":runs:dead").Start("-").End("+").Build()).AsXRange()
	if err != nil || len(dead) != 1 || dead[0].FieldValues["run_id"] != res.SuiteID+":0:0" {
		t.Fatalf("runs dead letters %+v, %v; want the child's", dead, err)
	}
	if n := st.opens.Load(); n != 2 {
		t.Errorf("%d attempts, want 2 (PYRULA_MAX_DELIVERIES)", n)
	}
	testwait.Eventually(t, 10*time.Second, "nothing pending on the runs stream", func() bool { return e.runsPending() == 0 })
}
