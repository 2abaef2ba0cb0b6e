package replay_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow/examples"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/replay"
)

// recordOnModel records the support agent live with every model call on
// model, as record does.
func recordOnModel(t *testing.T, model string) recording {
	t.Helper()
	return recordRun(t, host.RunParams{Target: examples.SupportAgent, Model: model})
}

// askedFor puts first in b's history the run:submitted event of a run a
// worker's run_case asked to use model (its request keeps options.model);
// a MemLog recording has no run:submitted of its own.
func askedFor(b *bundle.Bundle, model string) *bundle.Bundle {
	ev := json.RawMessage(`{"kind":"run:submitted","request":{"options":{"model":"` + model + `"}},"run_seq":1}`)
	b.History = append([]json.RawMessage{ev}, b.History...)
	return b
}

// TestRecordedModelReplays: a case recorded on another model than the
// agent's own because the run asked for it (recorded_config.model, the
// request's options.model) replays with that model unless --model says
// otherwise: replay-only passes, before and after the fork and from the
// start, and the model is no changed axis. An explicit --model still
// changes it; a recorded_config.model that the recorded calls did not use
// changes nothing; and a model the code chose (no request asked for it)
// is not carried over, so that a change of the agent's default diverges.
func TestRecordedModelReplays(t *testing.T) {
	const other = "local-support-2"
	rec := recordOnModel(t, other)
	b := askedFor(rec.bundleAt(rec.seqAfter(t, "model:0")), other)
	b.Manifest.RecordedConfig = json.RawMessage(`{"model":"` + other + `"}`)
	b.Manifest.CodeVersion = examples.CodeVersion // no code change: no changed axis at all

	for _, opts := range []replay.Options{{ReplayOnly: true}, {ReplayOnly: true, FromStart: true}, {ReplayOnly: true, Model: other}} {
		rep, _ := runCase(t, b, opts)
		o := rep.Outcome
		if o.Status != host.StatusComplete || rep.ExitStatus() != 0 || len(o.ChangedAxes) != 0 || o.Provenance[replay.ProvReused] == 0 {
			t.Fatalf("%+v: outcome %+v (divergence %+v)", opts, o, o.Divergence)
		}
	}

	// --model of another model is a change: the post-fork model calls run
	// live as changed, and the axis says so.
	rep, _ := runCase(t, b, replay.Options{Model: "local-support-3", AllowWrite: []string{"tool:refund"}})
	if o := rep.Outcome; o.Status != host.StatusComplete || !slices.Contains(o.ChangedAxes, replay.AxisModel) || o.Provenance[replay.ProvChanged] == 0 {
		t.Fatalf("--model local-support-3: outcome %+v", o)
	}

	// A recorded_config.model that the recorded model calls did not use
	// (they ran on the agent's own) leaves each call's model as it is.
	def := record(t, examples.SupportAgent, nil)
	b = def.bundleAt(def.seqAfter(t, "model:0"))
	b.Manifest.RecordedConfig = json.RawMessage(`{"model":"` + other + `"}`)
	rep, _ = runCase(t, b, replay.Options{ReplayOnly: true})
	if o := rep.Outcome; o.Status != host.StatusComplete || rep.ExitStatus() != 0 {
		t.Fatalf("recorded_config.model unused by the calls: outcome %+v (divergence %+v)", o, o.Divergence)
	}

	// The code's default was other when the case was recorded and is the
	// agent's own now: the change shows, at $.model.
	coded := recordOnModel(t, other)
	b = coded.bundleAt(coded.seqAfter(t, "model:0"))
	b.Manifest.RecordedConfig = json.RawMessage(`{"model":"` + other + `"}`)
	rep, _ = runCase(t, b, replay.Options{ReplayOnly: true})
	if o := rep.Outcome; o.Code != "prefix_diverged" || o.Divergence == nil || o.Divergence.Model == nil ||
		!slices.Equal(o.Divergence.Model.Parts, []string{"model"}) {
		t.Fatalf("a default model changed in code: outcome %+v (divergence %+v)", o, o.Divergence)
	}
}
