package replay

import (
	"encoding/json"
	"strings"

	"github.com/pyrula/caseworker/explain"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/messages"
)

func (e *engine) verifyPrefix(c host.Call) host.Resolution {
	rec := e.prefix[c.Seq]
	id := c.ID()
	if rec.ref.ID() != id || !e.sameFingerprint(c, rec.ref.Fingerprint, rec.input, true) {
		if rec.ref.ID() != id {
			d := &Divergence{Seq: c.Seq, Call: id, ActualFingerprint: c.Fingerprint,
				RecordedCall: rec.ref.ID(), RecordedFingerprint: rec.ref.Fingerprint}
			e.noteDivergence(d, c, nil)
			return e.stop(c, messages.PrefixDiverged, "prefix call %d: the recording has %s, the target made %s", c.Seq, rec.ref.ID(), id)
		}
		d := e.explainCall(c, rec.ref.Fingerprint, rec.input, true)
		e.noteDivergence(d, c, rec.input)
		return e.stop(c, messages.PrefixDiverged, "prefix call %d %s: %s (recorded fingerprint %s, actual %s)%s",
			c.Seq, d.Where(), d.What(), rec.ref.Fingerprint, d.ActualFingerprint, rulesText(d.RulesChanged))
	}
	i, ok := e.index.find(keyOf(c.CallRef))
	if !ok {
		return e.stop(c, messages.PrefixDiverged, "prefix call %d %s has no recorded result", c.Seq, id)
	}
	res := e.p.Bundle.Results[i]
	e.consumed[i] = true
	e.prefixDone = c.Seq + 1
	return e.recorded(res, ProvReused)
}

// sameFingerprint compares a call with its recording, under the
// volatile-field rules the recording holds for it. A signal send whose
// run_id is the case run (or one of its children) matches the recording's
// send to the recorded run: the case run causes that difference itself.
// With prefix set (prefix verification only), under --model or
// --prompt-file a model call also matches when it differs only in model or
// system; the ladder compares model calls exactly, so that a model call
// whose input changed is never reused with the old model's answer.
func (e *engine) sameFingerprint(c host.Call, fp string, recInput json.RawMessage, prefix bool) bool {
	rules, rulesChanged := e.recordedRules(c)
	if !rulesChanged && c.Fingerprint == fp {
		return true
	}
	if rulesChanged {
		// The code's rules differ from the recording's: c.Fingerprint is
		// computed under the code's, so compute the recording's.
		if _, got, err := host.FingerprintRules(c.Input, rules); err == nil && got == fp {
			return true
		}
	}
	var actual map[string]json.RawMessage
	if json.Unmarshal(c.Input, &actual) != nil || actual == nil {
		return false
	}
	changed := false
	if c.Kind == host.KindStep && strings.HasPrefix(c.Key, "sigsend:") {
		var to string
		src := e.p.Bundle.Manifest.Source.RunID
		if json.Unmarshal(actual["run_id"], &to) == nil && src != "" &&
			(to == e.p.RunID || strings.HasPrefix(to, e.p.RunID+"/")) {
			actual["run_id"], _ = json.Marshal(src + strings.TrimPrefix(to, e.p.RunID))
			changed = true
		}
	}
	if prefix && c.Kind == host.KindModel && (e.p.Model != "" || e.p.System != "") && recInput != nil {
		var was map[string]json.RawMessage
		if json.Unmarshal(recInput, &was) == nil {
			actual["model"], actual["system"] = was["model"], was["system"]
			changed = true
		}
	}
	if !changed {
		return false
	}
	_, got, err := host.FingerprintRules(actual, rules)
	return err == nil && got == fp
}

// explainCall builds the divergence of call c from its recording: its
// identity, both fingerprints, the field diff against the recorded input
// (with values under --values) and, for a model call, the parts that
// changed. recInput is the recorded input, nil when the recording keeps
// none (prefix says where the call is, for the words of NoInput).
func (e *engine) explainCall(c host.Call, recordedFP string, recInput json.RawMessage, prefix bool) *Divergence {
	id := c.ID()
	d := &Divergence{Seq: c.Seq, Call: id, ActualFingerprint: e.verifiedFingerprint(c),
		RecordedCall: id, RecordedFingerprint: recordedFP, RulesChanged: e.rulesChange(c)}
	if c.Kind == host.KindTool {
		d.Tool = c.Name
	}
	if recInput == nil {
		d.NoInput = "input changed; the recording keeps no input for this call to name the fields"
		if !prefix {
			d.NoInput = "input changed; the case keeps no input for this call (saved before cases kept the inputs of calls after the fork): save the run again to name the fields"
		}
		return d
	}
	d.Diff = e.diff(c, recInput)
	if d.Diff == nil {
		return d
	}
	if e.p.Values {
		d.Diff.addValues(recInput, c.Input)
	}
	if c.Kind == host.KindModel {
		d.Model = explain.Model(recInput, c.Input, d.Diff.Paths())
	}
	return d
}

// noteDivergence makes d the run's divergence (the call that stopped it)
// and gives it its role among the calls that changed before it.
func (e *engine) noteDivergence(d *Divergence, c host.Call, recInput json.RawMessage) {
	e.divergence = d
	e.addChange(d, explain.Call{ID: d.Call, Input: c.Input, RecordedInput: recInput})
}

// addChange gives d its role (the tracker sees calls in the order they
// finish, which is run order but for calls that run at once) and lists it
// on the outcome.
func (e *engine) addChange(d *Divergence, c explain.Call) {
	r := e.tracker.Add(c)
	d.Role, d.CausedBy = r.Role, r.CausedBy
	e.changes = append(e.changes, ChangeRef{Seq: d.Seq, Call: d.Call, Role: d.Role, CausedBy: d.CausedBy})
}
