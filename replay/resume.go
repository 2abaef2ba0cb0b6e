package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/explain"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/runevent"
)

// resumed is what a case run's own journal held when the engine started:
// nothing for a new case run; for one that was started before (its worker
// died, or the run was delivered again) what had been done.
type resumed struct {
	// callLines counts the case:call events already journaled.
	callLines int
	// outcome is the case:outcome already journaled, if any.
	outcome *Outcome
	// loaded is the journal as resume read it when resume wrote nothing
	// (no lost call line, no charge): the runtime starts from it.
	loaded *host.Recorded
}

// resume rebuilds the engine's state from the case run's own journal, so
// that a case run resumed after a crash ends exactly as an uninterrupted
// run of the same case: the flow runtime answers every call the journal
// finished from the journal without asking the engine, so the engine
// counts here what those calls were: the prefix calls verified, the
// recorded results consumed, and for each post-fork call its line (from
// the provenance on its call:done), the live calls and their spend, and
// the signals the run sent itself. Call lines the journal lacks are
// written now, in order: a call's line goes in its call:done's append, but
// a journal written when lines had an append of their own can hold a
// call:done whose line a crash cut off.
func (e *engine) resume(ctx context.Context) (resumed, error) {
	var r resumed
	var rec host.Recorded
	if e.p.Recorded != nil {
		rec = *e.p.Recorded
	} else {
		var err error
		if rec, err = e.p.Log.Load(ctx, e.p.RunID); err != nil {
			return r, fmt.Errorf("replay: run %s: load its journal: %w", e.p.RunID, err)
		}
	}
	r.loaded = &rec
	if len(rec.Events) == 0 {
		return r, nil
	}
	results := make(map[callKey]bundle.Result, len(rec.Results))
	for _, res := range rec.Results {
		results[callKey{host.CallKind(res.Kind), res.Key}] = res
	}
	type started struct {
		pos   int
		input json.RawMessage
	}
	calls := map[callKey]started{}
	done := map[callKey]bool{}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range rec.Events {
		e.noteSeq(ev.RunSeq)
		switch ev.Kind {
		case runevent.CaseCall:
			r.callLines++
		case runevent.CaseOutcome:
			raw, err := json.Marshal(ev.Extra)
			if err != nil {
				return r, err
			}
			var o Outcome
			if err := json.Unmarshal(raw, &o); err != nil {
				return r, fmt.Errorf("replay: run %s: its journaled case:outcome: %w", e.p.RunID, err)
			}
			o.Type = "outcome"
			r.outcome = &o
		case runevent.CaseCharge:
			// A call in flight at an earlier worker's death, counted at
			// its worst case by the resumption after it.
			var usd float64
			if err := json.Unmarshal(ev.Extra["cost_usd"], &usd); err != nil {
				return r, fmt.Errorf("replay: run %s: its journaled case:charge: %w", e.p.RunID, err)
			}
			e.cost += usd
		case runevent.CallStart:
			if ev.Call == nil {
				continue
			}
			k := keyOf(*ev.Call)
			if _, seen := calls[k]; !seen {
				calls[k] = started{pos: len(calls), input: ev.Input}
			}
		case runevent.CallDone:
			if ev.Call == nil {
				continue
			}
			st := calls[keyOf(*ev.Call)]
			done[keyOf(*ev.Call)] = true
			c := host.Call{CallRef: *ev.Call, RunID: e.p.RunID, Input: st.input, Seq: st.pos}
			res := results[keyOf(*ev.Call)]
			e.resumeCall(c, ev.Provenance, res)
		}
	}
	// Call lines lost in a crash between a call:done and its case:call.
	e.lineWritten = r.callLines > 0
	for _, line := range e.calls[min(r.callLines, len(e.calls)):] {
		ev := callLineEvent(line, e.clock.Now().UTC(), new(host.CallRef))
		r.loaded = nil
		seq, err := e.p.Log.Append(ctx, e.p.RunID, host.Batch{Target: e.p.Target, Events: []host.Event{ev}})
		if err != nil {
			return r, fmt.Errorf("replay: run %s: write case:call: %w", e.p.RunID, err)
		}
		e.noteSeq(seq)
		r.callLines++
	}
	// A model call started and not done was in flight when the run's last
	// worker died: the provider may have billed it, and the call is sent
	// again. It counts at its worst case, so that the run's cost is never
	// below what the provider billed and a ceiling holds across the crash;
	// and the charge is journaled before the call is made again, so that a
	// resumption after another crash counts it too (the journal's call:done
	// of the call made again says nothing of the request lost).
	inFlight := make([]callKey, 0, 1)
	for k := range calls {
		if !done[k] && k.kind == host.KindModel {
			inFlight = append(inFlight, k)
		}
	}
	slices.SortFunc(inFlight, func(a, b callKey) int { return calls[a].pos - calls[b].pos })
	for _, k := range inFlight {
		st := calls[k]
		price, ok := e.prices[modelOf(st.input)]
		if !ok {
			continue
		}
		var req flow.ModelRequest
		_ = json.Unmarshal(st.input, &req)
		c := host.Call{Input: st.input, Model: &req}
		usd := price.WorstCase(PromptBound(c.Input, c.Model), maxTokensOf(c))
		ev, err := chargeEvent(host.CallRef{Kind: k.kind, Key: k.key}, usd, e.clock.Now().UTC())
		if err != nil {
			return r, fmt.Errorf("replay: run %s: %w", e.p.RunID, err)
		}
		// Acts: the call is made again next, so a Log that can lose writes
		// makes the charge durable first.
		r.loaded = nil
		seq, err := e.p.Log.Append(ctx, e.p.RunID, host.Batch{Target: e.p.Target, Events: []host.Event{ev}, Acts: true})
		if err != nil {
			return r, fmt.Errorf("replay: run %s: write case:charge: %w", e.p.RunID, err)
		}
		e.noteSeq(seq)
		e.cost += usd
	}
	return r, nil
}

// chargeEvent is the case:charge event of call, in flight at a crash,
// counted at usd.
func chargeEvent(call host.CallRef, usd float64, at time.Time) (host.Event, error) {
	callJSON, err := json.Marshal(struct {
		Kind host.CallKind `json:"kind"`
		Key  string        `json:"key"`
	}{call.Kind, call.Key})
	if err != nil {
		return host.Event{}, fmt.Errorf("case:charge of %s: %w", call.ID(), err)
	}
	usdJSON, err := json.Marshal(usd)
	if err != nil {
		return host.Event{}, fmt.Errorf("case:charge of %s: %w", call.ID(), err)
	}
	return host.Event{Kind: runevent.CaseCharge, At: at, Extra: map[string]json.RawMessage{"call": callJSON, "cost_usd": usdJSON}}, nil
}

// resumeCall accounts for one call the journal finished before the engine
// started, as Resolve and Observe did when it was made (under e.mu).
func (e *engine) resumeCall(c host.Call, prov string, res bundle.Result) {
	live := prov == ProvLive || prov == ProvChanged
	if live && c.Kind == host.KindModel {
		e.spendLocked(c, res)
	}
	e.noteSelfSignal(c, res, live)
	if i, ok := e.index.find(keyOf(c.CallRef)); ok && (prov == ProvReused || (!e.p.FromStart && c.Seq < len(e.prefix))) {
		e.consumed[i] = true
	}
	if !e.p.FromStart && c.Seq < len(e.prefix) {
		e.prefixDone = max(e.prefixDone, c.Seq+1)
		return
	}
	if prov == "" {
		return // not resolved by the ladder (a call of a plain run)
	}
	e.counts[prov]++
	if live && c.Effect != flow.Pure {
		e.liveCalls++
		e.started++
	}
	if prov == ProvChanged {
		e.changed = append(e.changed, c.ID())
	}
	line := CallLine{Type: "call", Seq: c.Seq, Kind: string(c.Kind), Key: c.Key, Effect: string(c.Effect),
		Fingerprint: c.Fingerprint, Provenance: prov}
	if prov == ProvChanged {
		// What changed, as the ladder found it when the call was made: a
		// recorded call whose input changed (not a signal the run sent
		// itself, which the ladder also marks changed).
		k := keyOf(c.CallRef)
		_, fromRun := e.ownSignal(c)
		if i, ok := e.index.lookup(k); ok && !fromRun && !e.sameFingerprint(c, e.p.Bundle.Results[i].Fingerprint, e.recordedInput(k), false) {
			rec := e.p.Bundle.Results[i]
			d := e.explainCall(c, rec.Fingerprint, e.recordedInput(k), false)
			e.addChange(d, explain.Call{ID: d.Call, Input: c.Input, RecordedInput: e.recordedInput(k),
				Result: outcomeValue(res), RecordedResult: outcomeValue(rec)})
			line.Change = d
		}
	}
	if e.p.Values {
		line.Result, line.Error = res.Result, res.Error
	}
	e.calls = append(e.calls, line)
}
