package capture

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
)

// BuildWhole is buildWhole for the package's external tests.
var BuildWhole = buildWhole

// buildWhole is the capture of a run held whole, built in Go types as the
// capture was before it streamed: the reference TestStreamIsBuild holds
// Stream to. Refusals carry reason codes:
// capture_incomplete (a call in flight at the fork, or a call done at or
// before the fork whose result is not recorded; the message lists them),
// kind_mismatch. A fork after the run's last event is invalid input (an
// error without a code, a *ForkRangeError).
//
// source.origin names the journal the run was recorded in: "valkey" for every
// run this software records, also once the run has moved to the archive, so
// that a run saves to the same hash before and after its live keys expire.
//
// results are every recorded result; those of calls made after the fork
// carry the call's input (withInputs).
//
// history holds the run's events up to the fork, terminal events dropped,
// as they were recorded, except that the prices of a case run (its
// run:submitted request's options.prices, see withoutPrices) and the trace
// context a run was submitted under (withoutTraceContext) are left out.
//
// capture.complete is true when the run has finished, so that every result
// after the fork is recorded too; for a run still running or suspended it is
// false and missing says results after the last event may be missing (replay
// resolves those calls down the ladder). bundle.Encode then canonicalises it.
func buildWhole(r *journal.Run, p Params) (*bundle.Bundle, error) {
	m := r.Meta
	if p.ForkAfterSeq != nil && (*p.ForkAfterSeq < 0 || *p.ForkAfterSeq > m.LastSeq) {
		return nil, &ForkRangeError{RunID: m.RunID, ForkAfterSeq: *p.ForkAfterSeq, LastSeq: m.LastSeq}
	}
	kind, err := detectKind(r, p.Kind)
	if err != nil {
		return nil, err
	}
	b := &bundle.Bundle{
		Manifest: bundle.Manifest{
			Format:         bundle.Format,
			Kind:           kind,
			TargetName:     m.TargetName,
			CodeVersion:    codeVersion(r),
			Registration:   p.Registration,
			RecordedConfig: recordedConfig(r, kind),
			PyrulaVersion:  p.PyrulaVersion,
			Source:         bundle.Source{RunID: m.RunID, Namespace: m.Namespace, Origin: string(journal.OriginValkey)},
			ForkAfterSeq:   p.ForkAfterSeq,
			Capture:        bundle.Capture{Complete: true, Missing: []json.RawMessage{}},
			Inputs:         m.Inputs,
		},
		History: []json.RawMessage{},
		Results: []bundle.Result{},
	}
	if p.ForkAfterSeq == nil {
		return b, nil
	}
	fork := *p.ForkAfterSeq
	for _, fp := range ForkPoints(r) {
		if fp.RunSeq == fork && !fp.Valid {
			return nil, messages.Errorf(messages.CaptureIncomplete,
				"run %s cannot be replayed from run_seq %d: %s; pick another --fork-after-seq (pyrula events %s --fork-points lists them) or save after the run finishes",
				m.RunID, fork, fp.Why, m.RunID)
		}
	}
	for _, e := range r.Events {
		if e.RunSeq > fork {
			break
		}
		if journal.IsTerminal(e.Kind) {
			continue
		}
		ev, err := withoutPrices(withoutTraceContext(e))
		if err != nil {
			return nil, fmt.Errorf("capture: run %s: %w", m.RunID, err)
		}
		raw, err := ev.JSON()
		if err != nil {
			return nil, fmt.Errorf("capture: run %s: %w", m.RunID, err)
		}
		b.History = append(b.History, raw)
	}
	b.Results = withInputs(r, fork)
	if !m.Status.Terminal() {
		note, _ := json.Marshal(fmt.Sprintf("results after run_seq %d: the run is still %s", m.LastSeq, m.Status))
		b.Manifest.Capture = bundle.Capture{Complete: false, Missing: []json.RawMessage{note}}
	}
	return b, nil
}

// withInputs returns the run's results, each result of a call made after
// the fork (its call:start is not in the history) carrying the call's input
// and the run_seq of that call:start event (start_seq), so that a case run
// can name the fields of such a call that changed and a case diff can list
// such calls in run order. The results of prefix calls carry neither:
// their call:start events, in the history, hold both.
func withInputs(r *journal.Run, fork int64) []bundle.Result {
	out := slices.Clone(r.Results)
	// Events are in run_seq order: those after the fork start at after.
	after := sort.Search(len(r.Events), func(i int) bool { return r.Events[i].RunSeq > fork })
	type start struct {
		input json.RawMessage
		seq   int64
	}
	starts := map[string]start{}
	for _, e := range r.Events[after:] {
		c, ok := journal.CallOf(e)
		if !ok || e.Kind != runevent.CallStart {
			continue
		}
		id := c.ID()
		if _, seen := starts[id]; seen {
			continue
		}
		in := e.Input
		if len(in) == 0 {
			var raw json.RawMessage
			if ok, err := e.Field("input", &raw); ok && err == nil {
				in = raw
			}
		}
		starts[id] = start{in, e.RunSeq}
	}
	if len(starts) == 0 {
		return out
	}
	// A call started before the fork too (a resumed run starts it again)
	// has its input in the history.
	for _, e := range r.Events[:after] {
		if c, ok := journal.CallOf(e); ok && e.Kind == runevent.CallStart {
			delete(starts, c.ID())
		}
	}
	for i, res := range out {
		s, ok := starts[journal.ResultID(res.Kind, res.Key)]
		if !ok || res.Input != nil {
			continue
		}
		if len(s.input) > 0 {
			out[i].Input = s.input
		}
		out[i].StartSeq = s.seq
	}
	return out
}

// detectKind returns the manifest kind: agent when the run made model or
// tool calls, else workflow; an explicit kind must be that kind
// (kind_mismatch), both ways.
func detectKind(r *journal.Run, want bundle.Kind) (bundle.Kind, error) {
	var evidence string
	for _, res := range r.Results {
		if res.Kind == "model" || res.Kind == "tool" {
			evidence = journal.ResultID(res.Kind, res.Key)
			break
		}
	}
	if evidence == "" {
		for _, e := range r.Events {
			if c, ok := journal.CallOf(e); ok && (c.Kind == "model" || c.Kind == "tool") {
				evidence = c.ID()
				break
			}
		}
	}
	return checkKind(r.Meta.RunID, evidence, want)
}

// codeVersion is the version that executed: the last run:start's
// code_version (a resumed run starts again), else the submitted one.
func codeVersion(r *journal.Run) string {
	v := r.Meta.CodeVersion
	for _, e := range r.Events {
		if e.Kind != runevent.RunStart {
			continue
		}
		var cv string
		if ok, err := e.Field("code_version", &cv); ok && err == nil && cv != "" {
			v = cv
		}
	}
	return v
}

// recordedConfig is {} for workflows; for agents {"model": …}, the model of
// the run's first model call (from its call:start input).
func recordedConfig(r *journal.Run, kind bundle.Kind) json.RawMessage {
	if kind != bundle.KindAgent {
		return json.RawMessage("{}")
	}
	for _, e := range r.Events {
		c, ok := journal.CallOf(e)
		if !ok || e.Kind != runevent.CallStart || c.Kind != "model" {
			continue
		}
		var in struct {
			Model string `json:"model"`
		}
		if ok, err := e.Field("input", &in); ok && err == nil && in.Model != "" {
			out, _ := json.Marshal(map[string]string{"model": in.Model})
			return out
		}
		break
	}
	return json.RawMessage("{}")
}
