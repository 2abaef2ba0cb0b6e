package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/messages"
)

// recorded answers a call with its recorded result or error.
func (e *engine) recorded(res bundle.Result, prov string) host.Resolution {
	if res.Error != nil {
		var ce flow.CallError
		_ = json.Unmarshal(res.Error, &ce)
		return host.AnswerError(&ce, prov)
	}
	r := host.Answer(res.Result, prov)
	r.Canonical = e.p.Canonical
	return r
}

func waits(k host.CallKind) bool {
	return k == host.KindInterrupt || k == host.KindSignal || k == host.KindStream
}

// ladder resolves a post-fork call: reused, simulated, live or changed, or
// a stop.
func (e *engine) ladder(ctx context.Context, c host.Call) (host.Resolution, error) {
	st := rung{key: keyOf(c.CallRef)}
	// A receive of a signal that the case run sent itself, and sent in
	// this case run, gets what was sent: the recorded answer holds the
	// recorded send's payload.
	st.own, st.fromRun = e.ownSignal(c)
	if res, ok := e.fromRecording(c, &st); ok {
		return res, nil
	}
	prov := ProvLive
	if st.replaced {
		prov = ProvChanged
	}
	if e.p.ReplayOnly {
		if c.Effect == flow.Pure && !waits(c.Kind) {
			return host.Resolution{Action: host.ActLive, Provenance: prov}, nil
		}
		return e.replayOnlyStop(c, st), nil
	}
	id := c.ID()
	if ans, ok := e.supplied(c); ok {
		if err := host.ValidateAnswer(c.Kind, ans); err != nil {
			return e.stop(c, messages.MissingContext, "the supplied answer for %s has the wrong shape: %v", id, err), nil
		}
		return host.Answer(ans, ProvSimulated), nil
	}
	if waits(c.Kind) && !st.fromRun {
		return e.stop(c, messages.MissingContext, "%s has no recorded or supplied answer and a case run never waits (supply calls[%q])", id, id), nil
	}
	if c.Effect == flow.Pure {
		return host.Resolution{Action: host.ActLive, Provenance: prov}, nil
	}
	if res, ok, err := e.admitLive(ctx, c); !ok || err != nil {
		return res, err
	}
	e.started++
	if st.fromRun {
		// The case run's own inbox answers: nothing waits.
		return host.Answer(st.own, prov), nil
	}
	return host.Resolution{Action: host.ActLive, Provenance: prov}, nil
}

// rung is what the ladder learned of a call on its first rung, the
// recording.
type rung struct {
	key callKey
	// rec is the recorded result of the call's key, when there was one
	// not consumed yet.
	rec bundle.Result
	// replaced says that the recording had the call under another
	// fingerprint (or an error that cannot be replayed): it runs changed.
	replaced bool
	// badError says that the recording holds an error the case run cannot
	// replay.
	badError bool
	// inputChanged is what changed, when the call's input did.
	inputChanged *Divergence
	// own and fromRun: the answer of a signal the case run sent itself.
	own     json.RawMessage
	fromRun bool
}

// fromRecording is the ladder's first rung: the recorded answer of a call
// whose fingerprint matches (reused), or its recorded error. Otherwise it
// notes in st what the recording had, and ok is false.
func (e *engine) fromRecording(c host.Call, st *rung) (host.Resolution, bool) {
	i, ok := e.index.find(st.key)
	if !ok || e.consumed[i] {
		return host.Resolution{}, false
	}
	st.rec = e.p.Bundle.Results[i]
	e.consumed[i] = true
	if !st.fromRun && e.sameFingerprint(c, st.rec.Fingerprint, e.recordedInputAt(st.key, i), false) {
		if st.rec.Error == nil {
			return e.recorded(st.rec, ProvReused), true
		}
		var ce flow.CallError
		if json.Unmarshal(st.rec.Error, &ce) == nil && ce.Type != "" && !(e.p.ReplayOnly && messages.Code(ce.Type).Known()) {
			return host.AnswerError(&ce, ProvReused), true
		}
		st.badError = true
	}
	st.replaced = true
	if !st.fromRun && !st.badError {
		st.inputChanged = e.explainCall(c, st.rec.Fingerprint, e.recordedInput(st.key), false)
		if e.pending == nil {
			e.pending = map[string]*Divergence{}
		}
		e.pending[c.ID()] = st.inputChanged
	}
	return host.Resolution{}, false
}

// replayOnlyStop stops a call that would leave the recording under
// --replay-only, saying why: a recorded error that cannot be replayed, a
// changed input, or a call the recording does not have.
func (e *engine) replayOnlyStop(c host.Call, st rung) host.Resolution {
	id := c.ID()
	d := &Divergence{Seq: c.Seq, Call: id, ActualFingerprint: c.Fingerprint}
	switch {
	case st.badError:
		e.reason = ReasonRecordedError
	case st.inputChanged != nil:
		e.reason = ReasonInputChanged
		d = st.inputChanged
		delete(e.pending, id)
	case st.replaced:
		e.reason = ReasonInputChanged
		d.RecordedCall, d.RecordedFingerprint = id, st.rec.Fingerprint
	default:
		e.reason = ReasonUnexpectedCall
	}
	e.noteDivergence(d, c, e.recordedInput(st.key))
	switch e.reason {
	case ReasonRecordedError:
		return e.stop(c, messages.ReplayDiverged, "%s: the recording holds an error that cannot be replayed (%s)", id, st.rec.Error)
	case ReasonInputChanged:
		return e.stop(c, messages.ReplayDiverged, "%s: %s (recorded fingerprint %s, actual %s)%s",
			d.Where(), d.What(), st.rec.Fingerprint, d.ActualFingerprint, rulesText(d.RulesChanged))
	}
	return e.stop(c, messages.ReplayDiverged, "%s: unexpected call: the recording has no such call", id)
}

// admitLive is the live rung's checks of a non-pure call: a write needs
// its --allow-write token, the live budget must have room, and under
// --max-cost-usd a model call's worst-case price is reserved against the
// ceiling. ok is false with the stop when the call may not run.
func (e *engine) admitLive(ctx context.Context, c host.Call) (host.Resolution, bool, error) {
	id := c.ID()
	if c.Effect == flow.Write && !e.allowed(c) {
		return host.StopWith(&host.StopError{Code: messages.WriteNotAllowed, StopKey: id, StopToken: c.Token,
			Message: fmt.Sprintf("%s is a write; allow it with --allow-write %s", id, c.Token)}), false, nil
	}
	if e.started >= e.budget {
		return e.stop(c, messages.LiveBudgetExceeded, "%s would be live call %d, over --live-budget %d", id, e.started+1, e.budget), false, nil
	}
	if e.p.MaxCostUSD != nil && e.unobservable != "" {
		return e.stop(c, messages.LiveBudgetExceeded, "%s: the spend of %s is unobservable under --max-cost-usd", id, e.unobservable), false, nil
	}
	worst, priced := 0.0, false
	if c.Kind == host.KindModel {
		if price, ok := e.prices[modelOf(c.Input)]; ok {
			worst, priced = price.WorstCase(PromptBound(c.Input, c.Model), maxTokensOf(c)), true
		}
		if e.p.MaxCostUSD != nil {
			if res, ok := e.reserveCost(c); !ok {
				return res, false, nil
			}
		}
	}
	if e.p.Shared != nil {
		return e.reserveShared(ctx, c, worst, priced)
	}
	return host.Resolution{}, true, nil
}

// reserveCost reserves a live model call's worst-case price against
// --max-cost-usd, or stops it when that price, on top of what was spent
// and reserved, would pass the ceiling (or the model has no price).
func (e *engine) reserveCost(c host.Call) (host.Resolution, bool) {
	id := c.ID()
	model := modelOf(c.Input)
	if _, ok := e.prices[model]; !ok {
		return e.stop(c, messages.LiveBudgetExceeded, "%s: model %q has no price under --max-cost-usd (add it with --prices)", id, model), false
	}
	worst := e.prices[model].WorstCase(PromptBound(c.Input, c.Model), maxTokensOf(c))
	committed := e.cost
	for _, r := range e.reserved {
		committed += r
	}
	if committed+worst > *e.p.MaxCostUSD {
		return e.stop(c, messages.LiveBudgetExceeded,
			"%s: not sent: it could cost up to %s USD (at most %d prompt and %d answer tokens of %s) on top of %s USD spent or reserved, over --max-cost-usd %s",
			id, fmtUSD(worst), PromptBound(c.Input, c.Model), maxTokensOf(c), model, fmtUSD(committed), fmtUSD(*e.p.MaxCostUSD)), false
	}
	if e.reserved == nil {
		e.reserved = map[string]float64{}
	}
	e.reserved[id] = worst
	return host.Resolution{}, true
}

// ownSignal returns the answer {"payload": …} of a signal receive when the
// signal it reads (the n-th its run got under its name) is one the case run
// sent itself in this case run.
func (e *engine) ownSignal(c host.Call) (json.RawMessage, bool) {
	if c.Kind != host.KindSignal || len(e.selfSent) == 0 {
		return nil, false
	}
	n, err := strconv.Atoi(c.Key[strings.LastIndexByte(c.Key, ':')+1:])
	list := e.selfSent[c.Name]
	if err != nil || n < 0 || n >= len(list) || !list[n].sent {
		return nil, false
	}
	ans, err := json.Marshal(struct {
		Payload json.RawMessage `json:"payload"`
	}{list[n].payload})
	return ans, err == nil
}

// noteSelfSignal notes a signal send that reached the case run's inbox: a
// send to the case run that did not fail. sent says that it ran in this
// case run.
func (e *engine) noteSelfSignal(c host.Call, rec bundle.Result, sent bool) {
	if c.Kind != host.KindStep || !strings.HasPrefix(c.Key, "sigsend:") || rec.Error != nil {
		return
	}
	var in struct {
		RunID   string          `json:"run_id"`
		Name    string          `json:"name"`
		Payload json.RawMessage `json:"payload"`
	}
	if json.Unmarshal(c.Input, &in) != nil || in.RunID != e.p.RunID {
		return
	}
	if e.selfSent == nil {
		e.selfSent = map[string][]selfSignal{}
	}
	e.selfSent[in.Name] = append(e.selfSent[in.Name], selfSignal{payload: in.Payload, sent: sent})
}

// allowed reports whether an --allow-write token names the write c.
func (e *engine) allowed(c host.Call) bool {
	if c.Token != "" && e.allow[c.Token] {
		return true
	}
	if c.Kind == host.KindStep && c.Name != "" {
		if e.allow["step:"+c.Name] {
			return true
		}
		for _, id := range e.steps[c.Name] {
			if e.allow["step:"+id] {
				return true
			}
		}
	}
	return false
}

func (e *engine) supplied(c host.Call) (json.RawMessage, bool) {
	if a, ok := e.p.Supply.Calls[c.ID()]; ok {
		e.useSupply("calls:" + c.ID())
		return a, true
	}
	if c.Kind == host.KindTool {
		if a, ok := e.p.Supply.Tools[c.Name]; ok {
			e.useSupply("tools:" + c.Name)
			return a, true
		}
	}
	return nil, false
}
