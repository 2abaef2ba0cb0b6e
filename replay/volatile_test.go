package replay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/bundle/volatile"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/replay"
)

func TestDiffInputsVolatile(t *testing.T) {
	t.Parallel()
	rec := json.RawMessage(`{"items":[{"sku":"a","trace":"t1"}],"meta":{"ts":"1","who":"x"},"request_id":"r1","sku":"A"}`)
	act := json.RawMessage(`{"items":[{"sku":"a","trace":"t2"}],"meta":{"ts":"2","who":"x"},"sku":"B","zone":"eu"}`)
	rules, err := volatile.Compile(volatile.Spec{Fields: []string{"items[].trace", "meta.ts", "request_id"}})
	if err != nil {
		t.Fatal(err)
	}
	d := replay.DiffInputsVolatile(rec, act, rules)
	if got := fmt.Sprint(d.Added, d.Removed, d.Changed, d.Ignored); got != "[$.zone] [] [$.sku] [$.items[0].trace $.meta.ts $.request_id]" {
		t.Errorf("diff %s", got)
	}
	// Without rules it is DiffInputs, with no ignored list in its JSON.
	plain := replay.DiffInputsVolatile(rec, act, nil)
	raw, _ := json.Marshal(plain)
	if want := `{"added":["$.zone"],"removed":["$.request_id"],"changed":["$.items[0].trace","$.meta.ts","$.sku"]}`; string(raw) != want {
		t.Errorf("diff without rules %s, want %s", raw, want)
	}
	// Only volatile differences: nothing counts.
	d = replay.DiffInputsVolatile(rec, json.RawMessage(`{"items":[{"sku":"a"}],"meta":{"who":"x"},"sku":"A"}`), rules)
	if got := fmt.Sprint(d.Added, d.Removed, d.Changed, d.Ignored); got != "[] [] [] [$.items[0].trace $.meta.ts $.request_id]" {
		t.Errorf("diff %s", got)
	}
	if replay.DiffInputsVolatile(json.RawMessage(`{`), act, rules) != nil {
		t.Error("a diff of text that is not JSON")
	}
}

// A Bundle built in Go whose recorded rules replay could not apply is
// refused before the run starts.
func TestRecordedRulesChecked(t *testing.T) {
	t.Parallel()
	b := record(t, "checkout", nil).bundleAt(0)
	b.Manifest.Registration.Volatile = &bundle.Volatile{Steps: map[string][]string{"quote": {"a..b"}}}
	_, err := replay.Run(context.Background(), replay.Params{Bundle: b, RunID: "case", Registry: newRegistry(t),
		Log: host.NewMemLog(), FixtureHash: "h"})
	if code, _ := messages.CodeOf(err); code != messages.BundleCorrupt || !strings.Contains(err.Error(), `volatile.steps["quote"]: volatile path "a..b"`) {
		t.Fatalf("want bundle_corrupt naming the rule, got %v", err)
	}
}

// A post-fork call made with its recorded input under rules the code no
// longer declares is reused (verified under the recorded rules), and its
// call:start carries the fingerprint under the code's rules, not the
// recorded one: a recorded fingerprint is taken without hashing only when
// both the input and the rules are the recording's.
func TestRecordedFingerprintUnderChangedRules(t *testing.T) {
	t.Parallel()
	rec := record(t, "checkout", nil)
	b := rec.bundleAt(1) // every call after the fork
	b.Manifest.Registration.Volatile = &bundle.Volatile{Steps: map[string][]string{"quote": {"qty"}}}
	rules, err := volatile.Compile(volatile.Spec{Fields: []string{"qty"}})
	if err != nil {
		t.Fatal(err)
	}
	var input json.RawMessage // as a capture keeps it, from the call's call:start
	for _, raw := range rec.events {
		var ev struct {
			Call  *host.CallRef   `json:"call"`
			Input json.RawMessage `json:"input"`
		}
		if json.Unmarshal(raw, &ev) == nil && ev.Call != nil && ev.Call.ID() == "step:quote:0" && ev.Input != nil {
			input = ev.Input
		}
	}
	for i := range b.Results {
		if r := &b.Results[i]; r.Kind == "step" && r.Key == "quote:0" && input != nil {
			// As a recording under the rule fingerprints it.
			r.Input = input
			_, masked, err := host.FingerprintRules(input, rules)
			if err != nil {
				t.Fatal(err)
			}
			r.Fingerprint = masked
		}
	}
	if input == nil {
		t.Fatal("the recording has no input for step:quote:0")
	}
	_, current, err := host.Fingerprint(input)
	if err != nil {
		t.Fatal(err)
	}
	rep, log := runCase(t, b, replay.Options{ReplayOnly: true})
	if o := rep.Outcome; o.Status != host.StatusComplete || o.LiveCalls != 0 {
		t.Fatalf("outcome %+v", o)
	}
	found := false
	for _, ev := range log.Events("case") {
		if ev.Kind == host.EventKind("call:start") && ev.Call.ID() == "step:quote:0" {
			found = true
			if ev.Call.Fingerprint != current {
				t.Errorf("call:start of step:quote:0 has fingerprint %s, want %s (the code's, without rules)", ev.Call.Fingerprint, current)
			}
		}
	}
	if !found {
		t.Fatal("no call:start of step:quote:0")
	}
}
