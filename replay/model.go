package replay

import (
	"encoding/json"
	"strconv"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/runevent"
)

// llmRef is the outcome's llm_ref.
func (e *engine) llmRef() *string {
	if e.p.LLMRef == "" {
		return nil
	}
	ref := e.p.LLMRef
	return &ref
}

// runModel is the model id the run's model calls use; "" leaves each
// call's own (the agent's default, or what the request names). It is
// Options.Model when set. Else a case replays with what it recorded when
// the model was chosen for the recorded run, not by the code: when the
// recording's run:submitted request asked for a model (a case run's
// options.model, then saved) and the manifest's recorded_config.model is
// that model, the run's model calls use it too, as --model would make
// them, without counting the model as a changed axis. Decision: a model
// the code chose (the agent's default) is not carried over, so that a
// change of the default in code still shows as a divergence at $.model;
// and a recording whose kept model calls used several models keeps each
// call's own, since one override would change the others.
func (e *engine) runModel() string {
	if e.p.Model != "" {
		return e.p.Model
	}
	var rc struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(e.p.Bundle.Manifest.RecordedConfig, &rc)
	if e.target.Kind != bundle.KindAgent || rc.Model == "" || rc.Model == e.target.Model || e.requestedModel() != rc.Model {
		return ""
	}
	for _, c := range e.prefix {
		if c.ref.Kind == host.KindModel && c.input != nil && modelOf(c.input) != rc.Model {
			return ""
		}
	}
	for _, r := range e.p.Bundle.Results {
		if host.CallKind(r.Kind) == host.KindModel && len(r.Input) > 0 && modelOf(r.Input) != rc.Model {
			return ""
		}
	}
	return rc.Model
}

// requestedModel is the model the recorded run was asked to use: the
// options.model of the request its run:submitted event keeps (a worker's
// run_case body), "" when none.
func (e *engine) requestedModel() string {
	for _, raw := range e.p.Bundle.History {
		var ev struct {
			Kind    string `json:"kind"`
			Request struct {
				Options struct {
					Model string `json:"model"`
				} `json:"options"`
			} `json:"request"`
		}
		if json.Unmarshal(raw, &ev) == nil && ev.Kind == string(runevent.RunSubmitted) {
			return ev.Request.Options.Model
		}
	}
	return ""
}

// recordedInput is the recorded input of call k: its call:start's in the
// history, else the one its result keeps (a call after the fork), else nil.
func (e *engine) recordedInput(k callKey) json.RawMessage {
	if in, ok := e.inputs.Get(string(k.kind), k.key); ok {
		return in
	}
	if i, ok := e.index.lookup(k); ok {
		return e.p.Bundle.Results[i].Input
	}
	return nil
}

// recordedInputAt is recordedInput of call k, whose result is at position
// i of the bundle's results.
func (e *engine) recordedInputAt(k callKey, i int) json.RawMessage {
	if in, ok := e.inputs.Get(string(k.kind), k.key); ok {
		return in
	}
	return e.p.Bundle.Results[i].Input
}

// recordedSystem is the system prompt of the recording's first model call
// (model:0, else the lowest key) whose input it keeps.
func (e *engine) recordedSystem() (string, bool) {
	first := -1
	var input json.RawMessage
	for i, r := range e.p.Bundle.Results {
		if r.Kind != string(host.KindModel) {
			continue
		}
		n, err := strconv.Atoi(r.Key)
		if in := e.recordedInputAt(callKey{host.KindModel, r.Key}, i); err == nil && in != nil && (first < 0 || n < first) {
			first, input = n, in
		}
	}
	var req struct {
		System *string `json:"system"`
	}
	if first < 0 || json.Unmarshal(input, &req) != nil || req.System == nil {
		return "", false
	}
	return *req.System, true
}

// maxTokensOf is a model call's answer bound.
func maxTokensOf(c host.Call) int64 {
	if c.Model != nil && c.Model.MaxTokens > 0 {
		return c.Model.MaxTokens
	}
	return flow.DefaultMaxTokens
}

func modelOf(input json.RawMessage) string {
	var in struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(input, &in)
	return in.Model
}
