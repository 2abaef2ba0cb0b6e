package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
)

// Case is a case run as its callers (`pyrula case run`, the worker's
// run_case) know it before it starts.
type Case struct {
	// Canonical is the case, read and verified (bundle.Read or a store).
	Canonical *bundle.Canonical
	// Params are the run's parameters. RunCase fills in Bundle, Canonical
	// and FixtureHash from Canonical, Target (when empty) from its manifest,
	// and Models from ModelClient.
	Params Params
	// ModelClient returns the model client Params.LLMRef names; with
	// replayOnly it may only check the name and return nil (a replay-only
	// run sends no model call). Nil, or an empty LLMRef: each agent's own
	// client.
	ModelClient func(ref string, replayOnly bool) (flow.ModelClient, error)
}

// The stages of a case run a CaseError names.
const (
	StageDecode  = "decode"  // the case does not decode
	StageTarget  = "target"  // no such target, or inputs it refuses
	StageOptions = "options" // options the target or the case refuses
	StageModel   = "model"   // the model client cannot be had
)

// CaseError is a case run refused before it started: the stage, the reason
// code and the cause (an *OptionError for StageOptions).
type CaseError struct {
	Stage string
	Code  messages.Code
	Err   error
}

// Error is the cause's message.
func (e *CaseError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *CaseError) Unwrap() error { return e.Err }

// refused is a CaseError of err, with err's own reason code when it has
// one, else code.
func refused(stage string, code messages.Code, err error) *CaseError {
	if me := messages.AsError(err); me != nil {
		code = me.Code
	}
	return &CaseError{Stage: stage, Code: code, Err: err}
}

// RunCase prepares and runs a case, the one entry of every case run: it
// decodes the case, looks up the target, checks the options against the
// target's registration and the case, gets the model client and runs. A
// refusal is a *CaseError (bundle_corrupt, invalid_overrides, or the model
// client's code); other errors are operational (the journal).
func RunCase(ctx context.Context, c Case) (Report, error) {
	p := c.Params
	bd, err := c.Canonical.Decode()
	if err != nil {
		return Report{}, refused(StageDecode, messages.BundleCorrupt, err)
	}
	p.Bundle, p.Canonical, p.FixtureHash = bd, true, string(c.Canonical.Hash())
	if p.Target == "" {
		p.Target = bd.Manifest.TargetName
	}
	if p.Registry == nil {
		return Report{}, errors.New("replay: Registry is required")
	}
	info, ok := p.Registry.Lookup(p.Target)
	if !ok {
		return Report{}, refused(StageTarget, messages.InvalidOverrides, fmt.Errorf("%w: %q", host.ErrUnknownTarget, p.Target))
	}
	if err := CheckOptions(p.Options, info, bd); err != nil {
		return Report{}, refused(StageOptions, messages.InvalidOverrides, err)
	}
	if p.LLMRef != "" && c.ModelClient != nil {
		if p.Models, err = c.ModelClient(p.LLMRef, p.ReplayOnly); err != nil {
			return Report{}, refused(StageModel, messages.InvalidOverrides, err)
		}
	}
	rep, err := Run(ctx, p)
	if me := messages.AsError(err); me != nil {
		return Report{}, refused(StageTarget, me.Code, err)
	}
	if errors.Is(err, host.ErrUnknownTarget) || errors.Is(err, host.ErrInvalidInputs) {
		return Report{}, refused(StageTarget, messages.InvalidOverrides, err)
	}
	return rep, err
}

// Refusal is the outcome line of a case run that ended before its engine
// ran (the case could not be had or was refused) or that its worker gave
// up: the case:outcome event written before its run:error.
type Refusal struct {
	RunID   string
	Target  string
	Code    messages.Code
	Message string
	// FixtureHash is the case's hash; nil when the refusal is not about a
	// case (omitted from the line).
	FixtureHash *string
	// Reason, when set, says more than the code (omitted when empty).
	Reason string
}

// Event is the refusal's case:outcome event at at: {"type":"outcome",
// "run_id", "target", "status":"error", "code", "message"[, "fixture_hash"][,
// "reason"]}.
func (r Refusal) Event(at time.Time) (host.Event, error) {
	line := struct {
		Type        string        `json:"type"`
		RunID       string        `json:"run_id"`
		Target      string        `json:"target"`
		Status      host.Status   `json:"status"`
		Code        messages.Code `json:"code"`
		Message     string        `json:"message"`
		FixtureHash *string       `json:"fixture_hash,omitempty"`
		Reason      string        `json:"reason,omitempty"`
	}{"outcome", r.RunID, r.Target, host.StatusError, r.Code, r.Message, r.FixtureHash, r.Reason}
	extra, err := extraOf(line)
	if err != nil {
		return host.Event{}, fmt.Errorf("encode case:outcome: %w", err)
	}
	return host.Event{Kind: runevent.CaseOutcome, At: at, Extra: extra}, nil
}

// extraOf is v's JSON object as an event's members.
func extraOf(v any) (map[string]json.RawMessage, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	return m, json.Unmarshal(raw, &m)
}
