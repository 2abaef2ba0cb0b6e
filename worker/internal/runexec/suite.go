package runexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
	"github.com/pyrula/caseworker/suite"
	"github.com/pyrula/caseworker/worker/internal/runwire"
)

// A suite runs as a run of its own, the coordinator, whose events are the
// suite's: it never holds a run slot while its children run. Each
// execution of the coordinator does what is left, and every step is
// idempotent, so that any worker may execute it after a crash:
//
//  1. The plan: the cases selected once, written as suite:plan (a resumed
//     suite reads it back, never selecting again).
//  2. The children: each (case, arm) created as a run of its own with a
//     run_case request and its suite field, and added to the runs stream;
//     a child already created is kept.
//  3. While children are left: a suite:progress line when more are done,
//     and the coordinator suspends itself (its runs entry is acked).
//  4. Once every child is done: each child's case:outcome read, the
//     suite:outcome written (suite.Summarize), and the suite ended:
//     run:complete when every child passed, else run:error suite_failed
//     (or suite_too_small, for a selection under min_cases).
//
// A child that ends notes itself in the suite's done set (childDone) and
// wakes the coordinator (a runs entry for the suite) when it is the last
// one, or every twentieth of the suite; the coordinator checks the done set
// again after it suspends itself, so that a wake that came while it held
// the suite is not lost.

// suiteKey is the hash of suite suiteID's counters (total, submitted,
// pass, fail, error, cost_nusd, progress), and suiteDoneKey the set of its
// children done, both under the suite's hash tag.
func (x *Executor) suiteKey(suiteID string) string {
	return x.cfg.Namespace + ":{" + suiteID + "}:suite"
}

func (x *Executor) suiteDoneKey(suiteID string) string {
	return x.suiteKey(suiteID) + ":done"
}

// childDoneScript adds child ARGV[1] to the done set KEYS[1] and, when it
// was not there, counts its verdict ARGV[2] and its cost ARGV[3] (in
// nano-dollars) in the suite's hash KEYS[2]; a child that did not pass
// stops a fail_fast suite (field stop: the first such child). Both keys
// expire after ARGV[4] ms. It returns {added, done, total}.
var childDoneScript = valkey.NewLuaScript(`
local added = redis.call('SADD', KEYS[1], ARGV[1])
if added == 1 then
  redis.call('HINCRBY', KEYS[2], ARGV[2], 1)
  redis.call('HINCRBY', KEYS[2], 'cost_nusd', ARGV[3])
end
if ARGV[2] ~= 'pass' and ARGV[2] ~= 'skipped' and redis.call('HGET', KEYS[2], 'fail_fast') == '1' then
  redis.call('HSETNX', KEYS[2], 'stop', ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
local total = tonumber(redis.call('HGET', KEYS[2], 'total') or '0')
return {added, redis.call('SCARD', KEYS[1]), total}
`)

// runSuite executes a run_suite run (the coordinator): see above.
func (x *Executor) runSuite(ctx context.Context, meta journal.Meta, request json.RawMessage, log *zap.Logger) (host.Outcome, error) {
	var b messages.RunSuiteBody
	if err := json.Unmarshal(request, &b); err != nil {
		return x.fail(ctx, meta, messages.InvalidOverrides, fmt.Sprintf("the run's request is not a run_suite body: %v", err), nil)
	}
	events, _, err := x.journal.Events(ctx, meta.RunID)
	if err != nil {
		return host.Outcome{}, fmt.Errorf("read suite %s: %w", meta.RunID, err)
	}
	plan, planned, err := planOf(events)
	if err != nil {
		return x.fail(ctx, meta, messages.RuntimeError, err.Error(), nil)
	}
	if o, ok, err := recordedOutcome(events); err != nil || ok {
		if err != nil {
			return x.fail(ctx, meta, messages.RuntimeError, err.Error(), nil)
		}
		// Cut short between its outcome and its terminal event (a
		// crash): ended with that outcome, never a second one.
		return x.finishSuite(ctx, meta, o)
	}
	if !planned {
		sel, err := x.selectCases(ctx, b)
		if me := messages.AsError(err); me != nil {
			return x.fail(ctx, meta, me.Code, me.Message, nil)
		}
		if err != nil {
			return host.Outcome{}, err
		}
		plan = suite.NewPlan(meta.RunID, b, sel)
		if err := x.appendLine(ctx, meta, plan.Event); err != nil {
			return host.Outcome{}, err
		}
		log.Info("suite planned", zap.Int("cases", len(plan.Cases)), zap.Int("arms", len(plan.Arms)))
	}
	if plan.TooSmall() != "" {
		return x.endSuite(ctx, meta, plan, nil)
	}
	c := x.client
	state, err := c.Do(ctx, c.B().Hgetall().Key(x.suiteKey(meta.RunID)).Build()).AsStrMap()
	if err != nil {
		return host.Outcome{}, fmt.Errorf("read suite %s's counters: %w", meta.RunID, err)
	}
	if state["submitted"] != "1" {
		if err := x.submitChildren(ctx, meta, b, plan); err != nil {
			return host.Outcome{}, err
		}
	}
	p, err := x.suiteProgress(ctx, meta.RunID, plan.Total)
	if err != nil {
		return host.Outcome{}, err
	}
	if p.Done < plan.Total {
		if strconv.Itoa(p.Done) != state["progress"] {
			if err := x.appendLine(ctx, meta, p.Event); err != nil {
				return host.Outcome{}, err
			}
			if err := c.Do(ctx, c.B().Hset().Key(x.suiteKey(meta.RunID)).FieldValue().FieldValue("progress", strconv.Itoa(p.Done)).Build()).Error(); err != nil {
				return host.Outcome{}, fmt.Errorf("note suite %s's progress: %w", meta.RunID, err)
			}
		}
		return host.Outcome{RunID: meta.RunID, Status: host.StatusSuspended}, nil
	}
	results, err := x.childResults(ctx, plan)
	if err != nil {
		return host.Outcome{}, err
	}
	return x.endSuite(ctx, meta, plan, results)
}

// planOf finds the suite:plan among a suite's events.
func planOf(events []journal.Event) (suite.Plan, bool, error) {
	for _, ev := range events {
		if ev.Kind == runevent.SuitePlan {
			p, err := suite.PlanOf(ev)
			return p, err == nil, err
		}
	}
	return suite.Plan{}, false, nil
}

// appendLine appends the event line gives (a suite:plan, suite:progress
// or suite:outcome) to the suite's journal.
func (x *Executor) appendLine(ctx context.Context, meta journal.Meta, line func(time.Time) (host.Event, error)) error {
	ev, err := line(time.Now().UTC())
	if err != nil {
		return err
	}
	if _, err := x.log.Append(ctx, meta.RunID, host.Batch{Target: meta.TargetName, Events: []host.Event{ev}}); err != nil {
		return fmt.Errorf("append %s to suite %s: %w", ev.Kind, meta.RunID, err)
	}
	return nil
}

// selectCases are the cases a run_suite body selects: its list of
// bundles, the fixture store's cases of its target (suite.SelectStored), or
// the completed runs of its target in the journal (suite.SelectRuns).
func (x *Executor) selectCases(ctx context.Context, b messages.RunSuiteBody) (suite.Selection, error) {
	if b.Cases.Journal != nil {
		return suite.SelectRuns(ctx, x.journal, b.TargetName, *b.Cases.Journal)
	}
	s, err := x.deps.FixtureStore(b.FixtureStore)
	if err != nil {
		return suite.Selection{}, err
	}
	if b.Cases.Store == nil {
		return suite.Selection{Source: suite.SourceBundles, Cases: b.Cases.Bundles}, nil
	}
	return suite.SelectStored(ctx, s, b.TargetName, b.Cases.Store.Limit)
}

// submitChildren creates every child of plan not created yet (a run_case
// run with the suite field) and adds it to the runs stream; then it notes
// the suite submitted. The suite's total is set first, so that a child
// that ends at once counts against it.
func (x *Executor) submitChildren(ctx context.Context, meta journal.Meta, b messages.RunSuiteBody, plan suite.Plan) error {
	c, key := x.client, x.suiteKey(meta.RunID)
	ttl := x.cfg.IdempotencyTTL.Milliseconds()
	for _, err := range c.DoMulti(ctx,
		c.B().Arbitrary("HSET").Keys(key).Args(append([]string{"total", strconv.Itoa(plan.Total), "fail_fast", failFastField(plan)}, budgetFields(b)...)...).Build(),
		c.B().Pexpire().Key(key).Milliseconds(ttl).Build()) {
		if err.Error() != nil {
			return fmt.Errorf("set suite %s's total: %w", meta.RunID, err.Error())
		}
	}
	sub, _, err := runwire.Submitted(ctx, x.journal, meta.RunID)
	if err != nil {
		return err
	}
	msgID := sub.Extra[runwire.FieldMessageID]
	typ, _ := json.Marshal(string(messages.RunCase))
	info, _ := x.reg.Lookup(meta.TargetName)
	var adds []valkey.Completed
	for i := range plan.Total {
		child := plan.Child(i)
		arm := b.Arms[child.Arm]
		req, err := json.Marshal(messages.RunCaseBody{RunID: child.RunID, TargetName: plan.Target,
			Source: plan.SourceOf(child.Case), Options: arm.Options, FixtureStore: b.FixtureStore})
		if err != nil {
			return fmt.Errorf("encode child %s: %w", child.RunID, err)
		}
		ref, err := json.Marshal(runwire.SuiteRef{SuiteID: meta.RunID, Index: i, Assert: arm.Assert})
		if err != nil {
			return fmt.Errorf("encode child %s: %w", child.RunID, err)
		}
		var inputs json.RawMessage
		if len(arm.Options.Inputs) > 0 {
			if inputs, err = json.Marshal(arm.Options.Inputs); err != nil {
				return fmt.Errorf("encode child %s's inputs: %w", child.RunID, err)
			}
		}
		fields := map[string]json.RawMessage{runwire.FieldMessageID: msgID, runwire.FieldMessageType: typ,
			runwire.FieldRequest: req, runwire.FieldSuite: ref}
		runwire.AddTraceContext(ctx, fields) // the children's spans join the suite's trace
		_, err = x.journal.Create(ctx, journal.CreateParams{RunID: child.RunID, TargetName: plan.Target, CodeVersion: info.CodeVersion,
			Inputs: inputs, Fields: fields})
		switch {
		case errors.Is(err, journal.ErrRunExists):
			// Created by an earlier execution: added to the runs stream
			// again below (an entry of a run that is running or done is
			// acked by the executor that reads it).
		case err != nil:
			return fmt.Errorf("submit child %s: %w", child.RunID, err)
		}
		if err := runwire.ConfirmCreated(ctx, x.replicas, x.cfg.Namespace, child.RunID); err != nil {
			return fmt.Errorf("submit child: %w", err)
		}
		adds = append(adds, c.B().Xadd().Key(x.stream).Id("*").FieldValue().FieldValue(runwire.RunField, child.RunID).Build())
	}
	for start := 0; start < len(adds); start += 500 {
		if err := x.replicas.DoMulti(ctx, adds[start:min(start+500, len(adds))]...); err != nil {
			return fmt.Errorf("add suite %s's children to %s: %w", meta.RunID, x.stream, err)
		}
	}
	if err := c.Do(ctx, c.B().Hset().Key(key).FieldValue().FieldValue("submitted", "1").Build()).Error(); err != nil {
		return fmt.Errorf("note suite %s submitted: %w", meta.RunID, err)
	}
	return nil
}

// suiteProgress reads how many children of suite suiteID are done, by
// verdict, and their spend.
func (x *Executor) suiteProgress(ctx context.Context, suiteID string, total int) (suite.Progress, error) {
	c := x.client
	res := c.DoMulti(ctx, c.B().Scard().Key(x.suiteDoneKey(suiteID)).Build(), c.B().Hgetall().Key(x.suiteKey(suiteID)).Build())
	done, err := res[0].AsInt64()
	if err != nil {
		return suite.Progress{}, fmt.Errorf("read suite %s's children done: %w", suiteID, err)
	}
	m, err := res[1].AsStrMap()
	if err != nil {
		return suite.Progress{}, fmt.Errorf("read suite %s's counters: %w", suiteID, err)
	}
	p := suite.Progress{Type: suite.ProgressType, Done: int(done), Total: total, ByStatus: map[string]int{}}
	for _, v := range []string{suite.Pass, suite.Fail, suite.Error, suite.Skipped} {
		p.ByStatus[v], _ = strconv.Atoi(m[v])
	}
	cost, _ := strconv.ParseInt(m["cost_nusd"], 10, 64)
	p.CostUSD = float64(usdOf(cost))
	return p, nil
}

// childResults reads the case:outcome of every child of plan.
func (x *Executor) childResults(ctx context.Context, plan suite.Plan) ([]suite.Result, error) {
	all := make([]suite.Result, plan.Total)
	found := make([]bool, plan.Total)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(suite.ReadConcurrency)
	for i := range plan.Total {
		g.Go(func() error {
			child := plan.Child(i)
			r, ok, err := x.childOutcome(gctx, child.RunID)
			if err != nil {
				return err
			}
			r.Child = child
			all[i], found[i] = r, ok
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	results := make([]suite.Result, 0, plan.Total)
	for i, r := range all {
		if found[i] {
			results = append(results, r)
		}
	}
	return results, nil
}

// childOutcome reads the case:outcome of run runID (ok false when it has
// none).
func (x *Executor) childOutcome(ctx context.Context, runID string) (suite.Result, bool, error) {
	// A finished case run ends with its case:outcome and terminal event:
	// its last events, when the journal reads them alone, are enough.
	if t, ok := x.journal.(journal.TailReader); ok {
		events, err := t.Tail(ctx, runID, suite.OutcomeTail)
		if err != nil {
			return suite.Result{}, false, fmt.Errorf("read child %s: %w", runID, err)
		}
		if r, ok, err := outcomeOf(events); ok || err != nil {
			return r, ok, err
		}
	}
	events, _, err := x.journal.Events(ctx, runID)
	if err != nil {
		return suite.Result{}, false, fmt.Errorf("read child %s: %w", runID, err)
	}
	return outcomeOf(events)
}

// outcomeOf is the result the last case:outcome of events says, with the
// answer of the run:complete after it (ok false when there is none).
func outcomeOf(events []journal.Event) (suite.Result, bool, error) {
	var answer json.RawMessage
	for i := len(events) - 1; i >= 0; i-- {
		switch events[i].Kind {
		case runevent.RunComplete:
			answer = events[i].Result
		case runevent.CaseOutcome:
			r, err := suite.CaseOutcomeOf(events[i])
			r.Answer = answer
			return r, err == nil, err
		}
	}
	return suite.Result{}, false, nil
}

// endSuite writes the suite's outcome and ends it: run:complete when every
// child passed, else run:error with the outcome's code.
func (x *Executor) endSuite(ctx context.Context, meta journal.Meta, plan suite.Plan, results []suite.Result) (host.Outcome, error) {
	o := suite.Summarize(plan, results, time.Since(meta.CreatedAt).Milliseconds())
	budget, err := x.suiteBudgetState(ctx, meta.RunID)
	if err != nil {
		return host.Outcome{}, err
	}
	o.Budget = budget
	if err := x.appendLine(ctx, meta, o.Event); err != nil {
		return host.Outcome{}, err
	}
	return x.finishSuite(ctx, meta, o)
}

// recordedOutcome is the suite:outcome among a suite's events, ok false
// when there is none.
func recordedOutcome(events []journal.Event) (suite.Outcome, bool, error) {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Kind != runevent.SuiteOutcome {
			continue
		}
		raw, err := events[i].JSON()
		if err != nil {
			return suite.Outcome{}, false, fmt.Errorf("the suite's recorded outcome: %w", err)
		}
		var o suite.Outcome
		if err := json.Unmarshal(raw, &o); err != nil {
			return suite.Outcome{}, false, fmt.Errorf("the suite's recorded outcome does not decode: %w", err)
		}
		return o, true, nil
	}
	return suite.Outcome{}, false, nil
}

// finishSuite ends a suite whose outcome o is written: run:complete when
// every child passed, else run:error with the outcome's code.
func (x *Executor) finishSuite(ctx context.Context, meta journal.Meta, o suite.Outcome) (host.Outcome, error) {
	if o.Code != "" {
		return x.fail(ctx, meta, o.Code, o.Message, nil)
	}
	result, err := json.Marshal(map[string]any{"by_status": o.ByStatus, "total": o.Total})
	if err != nil {
		return host.Outcome{}, err
	}
	seq, err := x.log.Finish(ctx, meta.RunID, host.Event{Kind: runevent.RunComplete, At: time.Now().UTC(), Result: result})
	if errors.Is(err, host.ErrFinished) {
		return host.Outcome{RunID: meta.RunID, Status: host.StatusComplete}, nil
	}
	if err != nil {
		return host.Outcome{}, err
	}
	return host.Outcome{RunID: meta.RunID, Status: host.StatusComplete, LastSeq: seq}, nil
}

// childDone notes child run runID of suite ref done (its verdict and spend
// from its case:outcome) and wakes the suite when it is the last child, or
// at every twentieth of the suite. It is called again when a finished
// child's entry is delivered again, so that a wake lost in a crash is sent
// then.
func (x *Executor) childDone(ctx context.Context, runID string, ref runwire.SuiteRef) error {
	r, ok, err := x.childOutcome(ctx, runID)
	if err != nil {
		return err
	}
	verdict, cost := suite.Error, int64(0)
	if ok {
		verdict, _, _ = r.Judge(ref.Assert)
		cost = nusd(float64(r.Outcome.CostUSD))
	}
	keys := []string{x.suiteDoneKey(ref.SuiteID), x.suiteKey(ref.SuiteID)}
	args := []string{runID, verdict, strconv.FormatInt(cost, 10), strconv.FormatInt(x.cfg.IdempotencyTTL.Milliseconds(), 10)}
	res, err := childDoneScript.Exec(ctx, x.client, keys, args).AsIntSlice()
	if err != nil || len(res) != 3 {
		return fmt.Errorf("note child %s of suite %s done: %v", runID, ref.SuiteID, err)
	}
	added, done, total := res[0] == 1, res[1], res[2]
	// With PYRULA_WAIT_REPLICAS the note reaches the suite node's
	// replicas before the child's entry is acked: a note lost to a
	// failover would leave the suite waiting for the child for ever.
	err = x.replicas.Confirm(ctx, x.client.B().Sismember().Key(keys[0]).Member(runID).Build(),
		func(r valkey.ValkeyResult) bool { in, err := r.AsBool(); return err == nil && in },
		runwire.ReplicatedKey(x.cfg.Namespace, ref.SuiteID))
	if err != nil {
		return fmt.Errorf("note child %s of suite %s done: on the replicas: %w", runID, ref.SuiteID, err)
	}
	if added {
		x.report.SuiteChild(verdict)
	}
	step := max(total/20, 1)
	if total > 0 && (done >= total || added && done%step == 0) {
		return x.wake(ctx, ref.SuiteID)
	}
	return nil
}

// wake adds a runs entry for suite suiteID, so that a worker executes its
// coordinator again.
func (x *Executor) wake(ctx context.Context, suiteID string) error {
	c := x.client
	if _, err := x.replicas.Do(ctx, c.B().Xadd().Key(x.stream).Id("*").FieldValue().FieldValue(runwire.RunField, suiteID).Build()); err != nil {
		return fmt.Errorf("wake suite %s: %w", suiteID, err)
	}
	return nil
}

// recheckSuite is called once a coordinator suspended itself and no longer
// counts as executing here: a child that ended while it held the suite may
// have had its wake acked unexecuted (Execute), so when every child is done
// now it wakes the suite again.
func (x *Executor) recheckSuite(ctx context.Context, suiteID string) error {
	all, err := x.allChildrenDone(ctx, suiteID)
	if err != nil {
		return err
	}
	if all {
		return x.wake(ctx, suiteID)
	}
	return nil
}

// allChildrenDone reports whether every child of suite suiteID is noted
// done.
func (x *Executor) allChildrenDone(ctx context.Context, suiteID string) (bool, error) {
	c := x.client
	res := c.DoMulti(ctx, c.B().Scard().Key(x.suiteDoneKey(suiteID)).Build(), c.B().Hget().Key(x.suiteKey(suiteID)).Field("total").Build())
	done, err := res[0].AsInt64()
	if err != nil {
		return false, fmt.Errorf("read suite %s's children done: %w", suiteID, err)
	}
	total, err := res[1].AsInt64()
	if err != nil {
		return false, fmt.Errorf("read suite %s's total: %w", suiteID, err)
	}
	return total > 0 && done >= total, nil
}

// suiteRefOf is the suite field of a run:submitted event, ok false when the
// run is no suite's child.
func suiteRefOf(sub journal.Event) (runwire.SuiteRef, bool) {
	raw, ok := sub.Extra[runwire.FieldSuite]
	if !ok {
		return runwire.SuiteRef{}, false
	}
	var ref runwire.SuiteRef
	if json.Unmarshal(raw, &ref) != nil || ref.SuiteID == "" {
		return runwire.SuiteRef{}, false
	}
	return ref, true
}

// isSuite reports whether run runID is a suite (submitted by run_suite);
// false when that cannot be read.
func (x *Executor) isSuite(ctx context.Context, runID string) bool {
	sub, _, err := runwire.Submitted(ctx, x.journal, runID)
	if err != nil {
		return false
	}
	typ, err := runType(sub)
	return err == nil && typ == messages.RunSuite
}

// failFastField is the fail_fast field of a suite's counters: "1" when the
// plan stops at its first failure.
func failFastField(p suite.Plan) string {
	if p.FailFast {
		return "1"
	}
	return "0"
}

// childState is what a child of a suite reads of its suite's counters
// before it runs, in one read: which child stopped the suite (fail_fast;
// "" while none has) and whether the suite caps spend or calls.
type childState struct {
	stoppedBy          string
	capsCost, capsCall bool
}

// stateResult is what readSuiteState reads.
type stateResult struct {
	state childState
	err   error
}

// readSuiteState reads childState of suite suiteID (suiteState) on a
// goroutine of its own, so that the caller's other reads overlap it; the
// channel holds its result. It calls stopped first when the suite stopped
// (fail_fast), so that the caller can cancel what overlaps the read.
func (x *Executor) readSuiteState(ctx context.Context, suiteID string, stopped func()) <-chan stateResult {
	read := make(chan stateResult, 1)
	go func() {
		st, err := x.suiteState(ctx, suiteID)
		if err == nil && st.stoppedBy != "" {
			stopped()
		}
		read <- stateResult{st, err}
	}()
	return read
}

// suiteState reads childState of suite suiteID.
func (x *Executor) suiteState(ctx context.Context, suiteID string) (childState, error) {
	c := x.client
	vals, err := c.Do(ctx, c.B().Hmget().Key(x.suiteKey(suiteID)).Field("stop", "max_nusd", "max_calls").Build()).ToArray()
	if err != nil || len(vals) != 3 {
		return childState{}, fmt.Errorf("read suite %s's state: %v", suiteID, err)
	}
	var st childState
	st.stoppedBy, _ = vals[0].ToString()
	_, costErr := vals[1].ToString()
	_, callsErr := vals[2].ToString()
	st.capsCost, st.capsCall = costErr == nil, callsErr == nil
	return st, nil
}
