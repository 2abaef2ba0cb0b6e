package intake

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/replay"
	"github.com/pyrula/caseworker/suite"
	"github.com/pyrula/caseworker/worker/internal/runwire"
)

// runSuite handles run_suite: the body is checked (the target, the cases'
// selection, every arm's options as a run_case's, the budget), then the
// suite is submitted durably as a run of its own whose run:submitted
// event holds the body; the run executor selects the cases, fans the
// children out on the runs stream and writes the suite's outcome, all of
// which arrives as the suite's events.
func (in *Intake) runSuite(ctx context.Context, env messages.Envelope) (any, error) {
	var b messages.RunSuiteBody
	if err := decodeBody(env.Body, &b); err != nil {
		return nil, err
	}
	if err := in.checkSuite(b); err != nil {
		return nil, err
	}
	if b.Cases.Journal == nil {
		// Bundles are read from the fixture store; a journal selection
		// rebuilds each case from the journal and needs none.
		if _, err := in.deps.FixtureStore(b.FixtureStore); err != nil {
			return nil, err
		}
	}
	res, err := in.submit(ctx, env, b.SuiteID, "suite_", b.TargetName, nil)
	if err != nil {
		return nil, err
	}
	r := res.(messages.RunResult)
	return messages.RunSuiteResult{SuiteID: r.RunID, Events: r.Events}, nil
}

// checkSuite checks a run_suite body against the registry: every refusal
// names the field.
func (in *Intake) checkSuite(b messages.RunSuiteBody) error {
	if b.TargetName == "" {
		return messages.Errorf(messages.InvalidOverrides, "target_name is missing")
	}
	info, ok := in.reg.Lookup(b.TargetName)
	if !ok {
		return messages.Errorf(messages.InvalidOverrides, "no target %q is registered in this worker", b.TargetName)
	}
	if b.SuiteID != "" {
		if err := journal.CheckRunID(b.SuiteID); err != nil {
			return messages.Errorf(messages.InvalidOverrides, "suite_id: %v", err)
		}
		if len(b.SuiteID) > suite.MaxSuiteIDBytes {
			return messages.Errorf(messages.InvalidOverrides, "suite_id is longer than %d bytes (a child's run id adds its arm and case)", suite.MaxSuiteIDBytes)
		}
	}
	cases := len(b.Cases.Bundles)
	switch {
	case sources(b.Cases) != 1:
		return messages.Errorf(messages.InvalidOverrides, "cases must have exactly one of bundles (a non-empty list of fixture hashes), store and journal")
	case b.Cases.Journal != nil && b.Cases.Journal.Sample < 0:
		return messages.Errorf(messages.InvalidOverrides, "cases.journal.sample %d is negative", b.Cases.Journal.Sample)
	case b.Cases.Journal != nil && !b.Cases.Journal.After.IsZero() && !b.Cases.Journal.Before.IsZero() && !b.Cases.Journal.After.Before(b.Cases.Journal.Before):
		return messages.Errorf(messages.InvalidOverrides, "cases.journal.after %s is not before cases.journal.before %s",
			b.Cases.Journal.After.Format(time.RFC3339), b.Cases.Journal.Before.Format(time.RFC3339))
	case b.Cases.Journal != nil && b.Cases.Journal.Fork != "" && b.Cases.Journal.Fork != messages.ForkAfterStart && b.Cases.Journal.Fork != messages.ForkInputsOnly:
		return messages.Errorf(messages.InvalidOverrides, "cases.journal.fork %q is not %s or %s", b.Cases.Journal.Fork, messages.ForkAfterStart, messages.ForkInputsOnly)
	case b.Cases.Store != nil && b.Cases.Store.Limit < 0:
		return messages.Errorf(messages.InvalidOverrides, "cases.store.limit %d is negative", b.Cases.Store.Limit)
	case len(b.Arms) == 0:
		return messages.Errorf(messages.InvalidOverrides, "arms is missing: give at least one arm ({\"options\": {…}}, a run_case's options)")
	case len(b.Arms) > messages.MaxSuiteArms:
		return messages.Errorf(messages.InvalidOverrides, "arms has %d arms, more than %d", len(b.Arms), messages.MaxSuiteArms)
	case cases*len(b.Arms) > messages.MaxSuiteChildren:
		return messages.Errorf(messages.InvalidOverrides, "%d cases × %d arms is over %d children", cases, len(b.Arms), messages.MaxSuiteChildren)
	case b.MinCases != nil && *b.MinCases < 0:
		return messages.Errorf(messages.InvalidOverrides, "min_cases %d is negative", *b.MinCases)
	case b.MaxLiveCalls != nil && *b.MaxLiveCalls < 0:
		return messages.Errorf(messages.InvalidOverrides, "max_live_calls %d is negative", *b.MaxLiveCalls)
	case b.MaxCostUSD != nil && (math.IsNaN(*b.MaxCostUSD) || math.IsInf(*b.MaxCostUSD, 0) || *b.MaxCostUSD < 0):
		return messages.Errorf(messages.InvalidOverrides, "max_cost_usd %g is not a finite number of US dollars, 0 or more", *b.MaxCostUSD)
	}
	seen := map[string]int{}
	for i, h := range b.Cases.Bundles {
		if _, err := bundle.ParseHash(h); err != nil {
			return messages.Errorf(messages.InvalidFixtureHash, "cases.bundles[%d] is not 64 lowercase hex characters", i)
		}
		if j, dup := seen[h]; dup {
			return messages.Errorf(messages.InvalidOverrides, "cases.bundles[%d] repeats cases.bundles[%d] (%s)", i, j, h)
		}
		seen[h] = i
	}
	names := map[string]int{}
	for i, a := range b.Arms {
		name := suite.ArmName(a, i)
		if j, dup := names[name]; dup {
			return messages.Errorf(messages.InvalidOverrides, "arms[%d] is named %q, as arms[%d] is", i, name, j)
		}
		names[name] = i
		if len(a.Assert) > messages.MaxSuiteAssertions {
			return messages.Errorf(messages.InvalidOverrides, "arms[%d].assert has %d assertions, more than %d", i, len(a.Assert), messages.MaxSuiteAssertions)
		}
		for k, as := range a.Assert {
			if err := suite.CheckAssertionShape(as); err != nil {
				return messages.Errorf(messages.InvalidOverrides, "arms[%d].assert[%d] %v", i, k, err)
			}
		}
		opts, err := runwire.CaseOptions(a.Options)
		if me := messages.AsError(err); me != nil {
			return messages.Errorf(me.Code, "arms[%d].%s", i, me.Message)
		}
		if err := replay.CheckOptions(opts, info, nil); err != nil {
			return messages.Errorf(messages.InvalidOverrides, "arms[%d]: %v", i, err)
		}
		if info.Kind != bundle.KindAgent && (a.Options.Model != "" || a.Options.Prompt != "") {
			return messages.Errorf(messages.InvalidOverrides, "arms[%d].options: model and prompt apply to agents; %s is a %s", i, b.TargetName, info.Kind)
		}
		if _, err := in.deps.CaseModels(in.deps.LLMRef(a.Options.LLMRef), a.Options.ReplayOnly); err != nil {
			if me := messages.AsError(err); me != nil {
				return messages.Errorf(me.Code, "arms[%d].options.llm_ref: %s", i, me.Message)
			}
			return fmt.Errorf("arms[%d]: %w", i, err)
		}
	}
	return nil
}

// sources counts the selections a suite's cases name.
func sources(c messages.SuiteCases) int {
	n := 0
	for _, named := range []bool{len(c.Bundles) > 0, c.Store != nil, c.Journal != nil} {
		if named {
			n++
		}
	}
	return n
}
