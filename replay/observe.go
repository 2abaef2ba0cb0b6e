package replay

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/explain"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
)

// outcomeValue is a call's result, else its error.
func outcomeValue(r bundle.Result) json.RawMessage {
	if r.Error != nil {
		return r.Error
	}
	return r.Result
}

// fmtUSD formats dollars as USD's JSON does.
func fmtUSD(v float64) string {
	raw, _ := USD(v).MarshalJSON()
	return string(raw)
}

// Annotate implements host.Annotator: it counts a resolved post-fork call
// and makes its call line, which the runtime journals as a case:call event
// in the call's own append, stamped at the call's call:done. The run's
// first line is urgent (written at once, not held with later answered
// calls), so that a follower sees the run reach its first post-fork call.
// A call of the verified prefix gets no line.
func (e *engine) Annotate(_ context.Context, o host.Observation) (host.Event, bool, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	line, ok := e.lineLocked(o)
	if !ok {
		return host.Event{}, false, false
	}
	// The event outlives the append (a Log may keep its call): its ref
	// comes from a chunk of 64, one allocation for many lines.
	if len(e.refs) == cap(e.refs) {
		e.refs = make([]host.CallRef, 0, 64)
	}
	e.refs = e.refs[:len(e.refs)+1]
	urgent := !e.lineWritten
	e.lineWritten = true
	return callLineEvent(line, o.At.UTC(), &e.refs[len(e.refs)-1]), urgent, true
}

// Observe implements host.Observer: once a call is journaled it counts a
// live call's spend (a traced model call, whose span ctx holds, gets its
// cost on its span), settles its share of a shared budget and notes a
// signal the run sent itself.
func (e *engine) Observe(ctx context.Context, o host.Observation) {
	c := o.Call
	live := o.Resolution.Action == host.ActLive
	e.mu.Lock()
	if live && c.Kind == host.KindModel {
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			if usd, ok := e.costOf(c, o.Record); ok {
				span.SetAttributes(attribute.Float64("pyrula.cost_usd", usd))
			}
		}
	}
	var st settle
	if live {
		spent, known := 0.0, true
		if c.Kind == host.KindModel {
			delete(e.reserved, c.ID())
			spent, known = e.spendLocked(c, o.Record)
		}
		st = e.settleLocked(c, spent, known)
	}
	e.noteSelfSignal(c, o.Record, live)
	e.mu.Unlock()
	if st.ok {
		// A round trip to the shared budget, outside the engine's lock.
		e.p.Shared.Settle(ctx, st.id, st.actual)
	}
}

// lineLocked counts a resolved call and makes its call line; false for a
// call of the verified prefix, which gets none.
func (e *engine) lineLocked(o host.Observation) (CallLine, bool) {
	c := o.Call
	if !e.p.FromStart && c.Seq < len(e.prefix) {
		return CallLine{}, false
	}
	prov := o.Resolution.Provenance
	e.counts[prov]++
	if (prov == ProvLive || prov == ProvChanged) && c.Effect != flow.Pure {
		e.liveCalls++
	}
	if prov == ProvChanged {
		e.changed = append(e.changed, c.ID())
	}
	line := CallLine{Type: "call", Seq: c.Seq, Kind: string(c.Kind), Key: c.Key, Effect: string(c.Effect),
		Fingerprint: c.Fingerprint, Provenance: prov}
	if d, ok := e.pendingChange(c, prov); ok {
		k := keyOf(c.CallRef)
		i, _ := e.index.lookup(k)
		recorded := e.p.Bundle.Results[i]
		e.addChange(d, explain.Call{ID: d.Call, Input: c.Input, RecordedInput: e.recordedInputAt(k, i),
			Result: outcomeValue(o.Record), RecordedResult: outcomeValue(recorded)})
		line.Change = d
	}
	if e.p.Values {
		line.Result, line.Error = o.Record.Result, o.Record.Error
	}
	e.calls = append(e.calls, line)
	return line, true
}

// pendingChange takes what the ladder found changed in call c, when c
// was resolved as changed (prov).
func (e *engine) pendingChange(c host.Call, prov string) (*Divergence, bool) {
	if prov != ProvChanged || len(e.pending) == 0 {
		return nil, false
	}
	d, ok := e.pending[c.ID()]
	if ok {
		delete(e.pending, c.ID())
	}
	return d, ok
}

// spendLocked adds a live model call's price to the cost and returns it;
// known is false when its spend is unobservable (an answer without usage,
// or a model without a price). A call that failed spent 0.
func (e *engine) spendLocked(c host.Call, rec bundle.Result) (spent float64, known bool) {
	spent, ok := e.costOf(c, rec)
	if !ok {
		if e.unobservable == "" && rec.Error == nil {
			e.unobservable = c.ID()
		}
		return 0, rec.Error != nil
	}
	e.cost += spent
	return spent, true
}

// costOf is what model call c cost, at its model's price for the usage its
// result reports; false when the result, its usage or the price is
// missing.
func (e *engine) costOf(c host.Call, rec bundle.Result) (float64, bool) {
	var resp flow.ModelResponse
	price, ok := e.prices[modelOf(c.Input)]
	if rec.Result == nil || json.Unmarshal(rec.Result, &resp) != nil || resp.Usage == nil || !ok {
		return 0, false
	}
	return price.Cost(*resp.Usage), true
}

// lineExtra turns a line into the fields of its journal event: every field
// but "type"; for a call line the identity goes under "call" (the event's
// own "kind" is case:call).
func lineExtra(v any, call bool) map[string]json.RawMessage {
	raw, _ := json.Marshal(v)
	var m map[string]json.RawMessage
	_ = json.Unmarshal(raw, &m)
	delete(m, "type")
	if call {
		ref, _ := json.Marshal(map[string]json.RawMessage{"kind": m["kind"], "key": m["key"], "fingerprint": m["fingerprint"], "effect": m["effect"]})
		for _, k := range []string{"kind", "key", "fingerprint", "effect"} {
			delete(m, k)
		}
		m["call"] = ref
	}
	return m
}

// callLineEvent is the case:call event of line written at at: the call,
// provenance and seq in the event's typed fields (no map, no JSON built
// per call), or, for a line with values or a change (or without a provenance), every
// field through lineExtra. Both give the same bytes for the same line
// (TestCallLineEventBytes). The event's call is ref, set here.
func callLineEvent(line CallLine, at time.Time, ref *host.CallRef) host.Event {
	if len(line.Result) > 0 || len(line.Error) > 0 || line.Provenance == "" || line.Change != nil {
		return host.Event{Kind: runevent.CaseCall, At: at, Extra: lineExtra(line, true)}
	}
	*ref = host.CallRef{Kind: host.CallKind(line.Kind), Key: line.Key, Fingerprint: line.Fingerprint, Effect: flow.Effect(line.Effect)}
	return host.Event{Kind: runevent.CaseCall, At: at, CallSeq: int64(line.Seq), Provenance: line.Provenance, Call: ref}
}

// outcomeLocked builds the outcome line from the terminal event (or, for a
// suspended run, the runtime's outcome).
func (e *engine) outcomeLocked(term host.Event, out host.Outcome) Outcome {
	o := Outcome{Type: "outcome", RunID: e.p.RunID, Target: e.p.Target, Status: out.Status,
		Provenance: maps2(e.counts), PrefixCalls: e.prefixDone, ChangedCalls: slices.Clone(e.changed),
		LiveCalls: e.liveCalls, CostUSD: USD(e.cost), LLMRef: e.llmRef(), CostObservable: e.unobservable == "",
		CodeVersion: CodeVersions{Recorded: e.p.Bundle.Manifest.CodeVersion, Current: e.target.CodeVersion},
		FixtureHash: e.p.FixtureHash, LastSeq: out.LastSeq}
	switch term.Kind {
	case runevent.RunComplete:
		o.Status = host.StatusComplete
		if e.p.Values {
			o.Result = term.Result
		}
	case runevent.RunError:
		o.Status = host.StatusError
		o.Code, o.Message = string(term.Code), term.Message
		o.StopKey, o.StopToken = nullable(term.StopKey), nullable(term.StopToken)
		if term.Code == messages.ReplayDiverged {
			o.Reason = e.reason
		}
		if term.Code == messages.PrefixDiverged || term.Code == messages.ReplayDiverged {
			o.Divergence = e.divergence
		}
	case runevent.RunCancelled:
		o.Status = host.StatusCancelled
		o.Code = string(messages.Cancelled)
	}
	if e.p.ReplayOnly {
		keys := e.unconsumedLocked()
		o.UnconsumedKeys = &keys
	}
	o.UnusedSupply = unusedSupply(e.p.Supply, e.usedSupply)
	o.Changes = append([]ChangeRef{}, e.changes...)
	slices.SortStableFunc(o.Changes, func(a, b ChangeRef) int { return a.Seq - b.Seq })
	if len(o.Changes) > 0 {
		o.Cause = o.Changes[0].Call
	}
	o.ChangedAxes = slices.Clone(e.axes)
	if len(e.usedSupply) > 0 {
		o.ChangedAxes = append(o.ChangedAxes, AxisSuppliedAnswers)
	}
	return o
}

func maps2(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func nullable(s string) json.RawMessage {
	if s == "" {
		return json.RawMessage("null")
	}
	raw, _ := json.Marshal(s)
	return raw
}

// unconsumedLocked lists the recorded post-fork calls the run never made.
func (e *engine) unconsumedLocked() []string {
	var keys []string
	for i, r := range e.p.Bundle.Results {
		if !e.consumed[i] {
			keys = append(keys, r.Kind+":"+r.Key)
		}
	}
	slices.Sort(keys)
	if keys == nil {
		keys = []string{}
	}
	return keys
}
