package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/pyrula/caseworker/cli/internal/htmlreport"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/runevent"
	"github.com/pyrula/caseworker/suite"
	"github.com/pyrula/caseworker/worker/client"
)

// followedReport keeps, while enqueue follows a run_case or run_suite with
// --html, what its report is drawn from: a case run's case:outcome and
// case:call events, or a suite's suite:plan and suite:outcome.
type followedReport struct {
	outcome json.RawMessage
	calls   []json.RawMessage
	plan    json.RawMessage
	suite   json.RawMessage
}

// keep notes event ev (as raw, its JSON) when the report needs it.
func (r *followedReport) keep(ev journal.Event, raw json.RawMessage) {
	switch ev.Kind {
	case runevent.CaseOutcome:
		r.outcome = raw
	case runevent.CaseCall:
		r.calls = append(r.calls, raw)
	case runevent.SuitePlan:
		r.plan = raw
	case runevent.SuiteOutcome:
		r.suite = raw
	}
}

// ready says whether the followed run wrote the outcome its report draws:
// a suite:outcome or a case:outcome.
func (r *followedReport) ready() bool { return r.suite != nil || r.outcome != nil }

// report is the HTML report of the followed run runID (ready): a suite's,
// its example children's outcomes and timelines read from their events
// through cl, or a case run's.
func (r *followedReport) report(ctx context.Context, cl *client.Client, runID string) (htmlreport.Report, error) {
	if r.suite != nil {
		return r.suiteReport(ctx, cl, runID)
	}
	return htmlreport.Report{Command: "case run", Title: "pyrula enqueue run_case " + runID, Summary: r.outcome,
		Cases: []htmlreport.Case{{Line: r.outcome, Timeline: eventTimeline(r.outcome, r.calls)}}}, nil
}

// suiteReport is the report of suite runID: its outcome and plan, and each
// example child of its failure groups with its outcome and timeline. A
// child whose events are gone from Valkey is named without them.
func (r *followedReport) suiteReport(ctx context.Context, cl *client.Client, runID string) (htmlreport.Report, error) {
	var o suite.Outcome
	if err := json.Unmarshal(r.suite, &o); err != nil {
		return htmlreport.Report{}, fmt.Errorf("suite %s: its suite:outcome: %w", runID, err)
	}
	rep := htmlreport.Report{Command: htmlreport.CommandSuite, Title: "pyrula enqueue run_suite " + runID, Summary: r.suite, Plan: r.plan}
	seen := map[string]bool{}
	for _, g := range o.Groups {
		for _, ex := range g.Examples {
			if seen[ex.RunID] {
				continue
			}
			seen[ex.RunID] = true
			var child followedReport
			_, err := cl.Follow(ctx, cl.EventsKey(ex.RunID), func(ev journal.Event) error {
				raw, err := ev.JSON()
				if err != nil {
					return err
				}
				child.keep(ev, raw)
				return nil
			})
			if errors.Is(err, client.ErrRunGone) {
				continue
			}
			if err != nil {
				return htmlreport.Report{}, fmt.Errorf("suite %s: read child %s: %w", runID, ex.RunID, err)
			}
			if child.outcome != nil {
				rep.Cases = append(rep.Cases, htmlreport.Case{Line: child.outcome, Timeline: eventTimeline(child.outcome, child.calls)})
			}
		}
	}
	return rep, nil
}

// eventTimeline is the timeline of a case run from its events: each
// case:call in run order (a recorded prefix call "verified"), with its
// change, then the call that stopped the run, as timeline builds it for a
// case run in this process.
func eventTimeline(outcome json.RawMessage, calls []json.RawMessage) []htmlreport.Call {
	var out struct {
		PrefixCalls int             `json:"prefix_calls"`
		StopKey     json.RawMessage `json:"stop_key"`
		Divergence  json.RawMessage `json:"divergence"`
	}
	_ = json.Unmarshal(outcome, &out)
	tl := make([]htmlreport.Call, 0, len(calls)+1)
	seqOf := map[string]int{}
	effects := map[string]string{}
	for _, raw := range calls {
		var ev struct {
			Seq  int `json:"seq"`
			Call struct {
				Kind   string `json:"kind"`
				Key    string `json:"key"`
				Effect string `json:"effect"`
			} `json:"call"`
			Provenance string          `json:"provenance"`
			Change     json.RawMessage `json:"change"`
		}
		if json.Unmarshal(raw, &ev) != nil {
			continue
		}
		id := ev.Call.Kind + ":" + ev.Call.Key
		seqOf[id], effects[id] = ev.Seq, ev.Call.Effect
		c := htmlreport.Call{Seq: ev.Seq, Call: id, Effect: ev.Call.Effect, Provenance: ev.Provenance}
		if ev.Seq < out.PrefixCalls {
			c.Provenance = provVerified
		}
		if len(ev.Change) > 0 && string(ev.Change) != "null" {
			c.Change = ev.Change
		}
		tl = append(tl, c)
	}
	var stop string
	if err := json.Unmarshal(out.StopKey, &stop); err == nil && stop != "" {
		c := htmlreport.Call{Seq: len(tl), Call: stop, Provenance: provStopped}
		if seq, ok := seqOf[stop]; ok {
			c.Seq, c.Effect = seq, effects[stop]
		}
		var d struct {
			Call string `json:"call"`
		}
		if json.Unmarshal(out.Divergence, &d) == nil && d.Call == stop {
			c.Change = out.Divergence
		}
		tl = append(tl, c)
	}
	return tl
}
