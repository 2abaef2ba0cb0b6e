package replay

import (
	"encoding/json"
	"fmt"

	"github.com/pyrula/caseworker/explain"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/messages"
)

// The provenances of a call line (and of call:done in the case run's
// journal).
const (
	ProvReused    = "reused"
	ProvSimulated = "simulated"
	ProvLive      = "live"
	ProvChanged   = "changed"
)

// The reasons of a replay_diverged stop.
const (
	ReasonInputChanged   = "input_changed"
	ReasonUnexpectedCall = "unexpected_call"
	ReasonRecordedError  = "recorded_error"
)

// Divergence says which call left the recording and what changed in it:
// the call made, the call recorded at the same position (prefix) or under
// the same key, both fingerprints, and a field-level diff of the inputs
// (with --values, the recorded and the actual value at each path). The
// recording keeps the input of a prefix call in its call:start event and
// of a later call on its result; a case saved before results kept inputs
// has none for the calls after its fork, and NoInput says so in words. A
// model call's divergence also says which parts of its input changed
// (Model). Role says how the call relates to the calls that changed
// before it in the same run (explain.Tracker): the first is the cause.
// A recorded call is verified under the volatile-field rules the bundle
// recorded: the diff lists the paths those rules ignore apart, and when the
// code declares other rules for the call, RulesChanged holds both sets and
// ActualFingerprint is the call's fingerprint under the recorded ones.
type Divergence struct {
	Seq                 int    `json:"seq"`
	Call                string `json:"call"`
	ActualFingerprint   string `json:"actual_fingerprint"`
	RecordedCall        string `json:"recorded_call,omitempty"`
	RecordedFingerprint string `json:"recorded_fingerprint,omitempty"`
	// Tool is the tool's name, for a tool call (whose key is its
	// tool-use id).
	Tool         string               `json:"tool,omitempty"`
	Role         string               `json:"role,omitempty"`
	CausedBy     string               `json:"caused_by,omitempty"`
	Diff         *InputDiff           `json:"diff,omitempty"`
	NoInput      string               `json:"no_input,omitempty"`
	Model        *explain.ModelChange `json:"model,omitempty"`
	RulesChanged *RulesChange         `json:"rules_changed,omitempty"`
}

// Where names the call: its id, with the tool's name for a tool call
// ("tool:toolu_01 (lookup_order)").
func (d *Divergence) Where() string {
	if d.Tool != "" {
		return d.Call + " (" + d.Tool + ")"
	}
	return d.Call
}

// What words what changed in the call on one line: the parts of a model
// call, else the input fields, else why the recording cannot tell.
func (d *Divergence) What() string {
	switch {
	case d == nil:
		return ""
	case d.Model != nil && len(d.Model.Parts) > 0:
		return d.Model.Summary()
	case d.Diff != nil:
		return d.Diff.Summary()
	case d.Call != d.RecordedCall && d.RecordedCall != "":
		return fmt.Sprintf("the target made %s where the recording has %s", d.Call, d.RecordedCall)
	case d.NoInput != "":
		return d.NoInput
	}
	return ""
}

// ChangeRef is one changed or diverging call on the outcome line, in run
// order: its role and, for a consequent call, the call that caused it.
type ChangeRef struct {
	Seq      int    `json:"seq"`
	Call     string `json:"call"`
	Role     string `json:"role"`
	CausedBy string `json:"caused_by,omitempty"`
}

// CallLine is the {"type":"call"} line of a new post-fork call.
type CallLine struct {
	Type        string          `json:"type"`
	Seq         int             `json:"seq"`
	Kind        string          `json:"kind"`
	Key         string          `json:"key"`
	Effect      string          `json:"effect"`
	Fingerprint string          `json:"fingerprint"`
	Provenance  string          `json:"provenance"`
	Result      json.RawMessage `json:"result,omitempty"`
	Error       json.RawMessage `json:"error,omitempty"`
	// Change, on a line whose provenance is changed, says what changed in
	// the call's input and its role.
	Change *Divergence `json:"change,omitempty"`
}

// CodeVersions are the recorded and current code versions of the target.
type CodeVersions struct {
	Recorded string `json:"recorded"`
	Current  string `json:"current"`
}

// Outcome is the {"type":"outcome"} line.
type Outcome struct {
	Type    string      `json:"type"`
	RunID   string      `json:"run_id"`
	Target  string      `json:"target"`
	Status  host.Status `json:"status"`
	Code    string      `json:"code,omitempty"`
	Message string      `json:"message,omitempty"`
	// StopKey and StopToken are set (null or a string) on a run:error.
	StopKey    json.RawMessage `json:"stop_key,omitempty"`
	StopToken  json.RawMessage `json:"stop_token,omitempty"`
	Reason     string          `json:"reason,omitempty"`
	Divergence *Divergence     `json:"divergence,omitempty"`
	// Cause is the first call that changed or diverged; absent when none
	// did.
	Cause string `json:"cause,omitempty"`
	// Changes are the calls that changed or diverged, in run order, with
	// their roles; always an array.
	Changes []ChangeRef `json:"changes"`
	// ChangedAxes say what the case run changed from the recording, of
	// code_version (the target's code version differs from the recorded
	// one), model (--model), prompt (--prompt-file), inputs (--input) and
	// supplied_answers (a --supply entry answered a call), in that order;
	// always an array.
	ChangedAxes []string `json:"changed_axes"`
	// Provenance counts the call lines (the new post-fork calls; every
	// call with FromStart) by provenance.
	Provenance map[string]int `json:"provenance"`
	// PrefixCalls counts the recorded prefix calls verified.
	PrefixCalls int `json:"prefix_calls"`
	// ChangedCalls are the ids of the call lines whose provenance is
	// changed.
	ChangedCalls []string `json:"changed_calls"`
	// LiveCalls counts the call lines whose provenance is live or changed
	// and whose call is not pure: the calls that counted against the live
	// budget and finished. Calls inside children are part of their parent
	// call; a call in flight when the run stopped or was cancelled has no
	// line and is not counted.
	LiveCalls int `json:"live_calls"`
	CostUSD   USD `json:"cost_usd"`
	// CostObservable is false when a live model call reported no usage or
	// used a model with no price.
	CostObservable bool `json:"cost_observable"`
	// LLMRef names the model client that answered live model calls
	// (--llm-ref, llm_ref); null when none was named and the target's own
	// client, if any, answered them.
	LLMRef      *string      `json:"llm_ref"`
	CodeVersion CodeVersions `json:"code_version"`
	FixtureHash string       `json:"fixture_hash"`
	// UnconsumedKeys (replay-only) are the recorded post-fork calls the run
	// never made.
	UnconsumedKeys *[]string `json:"unconsumed_keys,omitempty"`
	// UnusedSupply are the supplied entries (Options.Supply) that answered
	// no call, as "calls:<kind>:<key>" and "tools:<name>", sorted; always
	// an array.
	UnusedSupply []string        `json:"unused_supply"`
	Result       json.RawMessage `json:"result,omitempty"`
	LastSeq      int64           `json:"last_seq"`
}

// Report is what a case run printed: its call lines and its outcome.
type Report struct {
	Calls   []CallLine
	Outcome Outcome
}

// ExitStatus is the CLI exit status of the report: 0 complete (and, under
// replay-only, every recorded call consumed), 2 a refusal before start
// (prefix_diverged), 3 a run that failed, was cancelled or suspended.
func (r Report) ExitStatus() int {
	o := r.Outcome
	switch {
	case o.Status == host.StatusComplete && (o.UnconsumedKeys == nil || len(*o.UnconsumedKeys) == 0):
		return messages.ExitOK
	case o.Status == host.StatusError && !messages.Code(o.Code).IsRunStop() && messages.Code(o.Code).Known():
		return messages.ExitRefused
	}
	return messages.ExitRunFailed
}
