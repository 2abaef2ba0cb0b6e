package replay

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/bundle/volatile"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/messages"
)

// RulesChange is a divergence's rules_changed: the volatile-field rules
// the recording holds for the call (under which it was verified) and the
// ones the code declares now.
type RulesChange struct {
	Recorded volatile.Spec `json:"recorded"`
	Current  volatile.Spec `json:"current"`
}

// DiffInputsVolatile is DiffInputs under a call's volatile-field rules:
// Added, Removed and Changed hold the differences that count, and the paths
// that differ only in what the rules remove are listed under Ignored. With
// nil rules it is DiffInputs. It returns nil when either input is not JSON.
func DiffInputsVolatile(recorded, actual json.RawMessage, rules *volatile.Rules) *InputDiff {
	d := DiffInputs(recorded, actual)
	if d == nil || rules == nil {
		return d
	}
	mr, err := rules.Mask(recorded)
	if err != nil {
		return d
	}
	ma, err := rules.Mask(actual)
	if err != nil {
		return d
	}
	m := DiffInputs(mr, ma)
	if m == nil {
		return d
	}
	counted := map[string]bool{}
	for _, p := range slices.Concat(m.Added, m.Removed, m.Changed) {
		counted[p] = true
	}
	for _, p := range slices.Concat(d.Added, d.Removed, d.Changed) {
		if !counted[p] {
			m.Ignored = append(m.Ignored, p)
		}
	}
	slices.Sort(m.Ignored)
	return m
}

// checkRecordedRules checks the rules a bundle recorded (bundle.Read has
// checked them already; a Bundle built in Go has not).
func checkRecordedRules(reg bundle.Registration) error {
	v := reg.Volatile
	if v == nil {
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(v.Steps)) {
		if err := volatile.CheckFields(v.Steps[name]); err != nil {
			return messages.Errorf(messages.BundleCorrupt, "manifest.registration.volatile.steps[%q]: %v", name, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(v.Tools)) {
		if err := volatile.CheckFields(v.Tools[name]); err != nil {
			return messages.Errorf(messages.BundleCorrupt, "manifest.registration.volatile.tools[%q]: %v", name, err)
		}
	}
	if err := volatile.CheckPrompt(v.Prompt); err != nil {
		return messages.Errorf(messages.BundleCorrupt, "manifest.registration.volatile.prompt: %v", err)
	}
	return nil
}

// recordedRules returns the rules the recording holds for c, compiled,
// and whether the code's rules for c differ from them.
func (e *engine) recordedRules(c host.Call) (*volatile.Rules, bool) {
	if !e.hasRules {
		return nil, false
	}
	rec := host.VolatileOf(e.p.Bundle.Manifest.Registration, c)
	cur := host.VolatileOf(e.target.Registration, c)
	return e.compile(rec), !rec.Equal(cur)
}

// rulesChange is the divergence's rules_changed for c: nil when the code
// declares the rules the recording holds.
func (e *engine) rulesChange(c host.Call) *RulesChange {
	if !e.hasRules {
		return nil
	}
	rec := host.VolatileOf(e.p.Bundle.Manifest.Registration, c)
	cur := host.VolatileOf(e.target.Registration, c)
	if rec.Equal(cur) {
		return nil
	}
	return &RulesChange{Recorded: rec.Normal(), Current: cur.Normal()}
}

// compile compiles recorded rules once per rule set.
func (e *engine) compile(s volatile.Spec) *volatile.Rules {
	if s.Empty() {
		return nil
	}
	key := strings.Join(s.Fields, "\x00") + "\x01" + strings.Join(s.Prompt, "\x00")
	if r, ok := e.compiled[key]; ok {
		return r
	}
	r, err := volatile.Compile(s)
	if err != nil {
		r = nil // checkRecordedRules refused the bundle before the run
	}
	if e.compiled == nil {
		e.compiled = map[string]*volatile.Rules{}
	}
	e.compiled[key] = r
	return r
}

// verifiedFingerprint is the fingerprint a recorded call is compared with:
// the call's own, or, when the code's rules for it differ from the
// recording's, the fingerprint of its input under the recorded rules.
func (e *engine) verifiedFingerprint(c host.Call) string {
	rules, changed := e.recordedRules(c)
	if !changed {
		return c.Fingerprint
	}
	_, fp, err := host.FingerprintRules(c.Input, rules)
	if err != nil {
		return c.Fingerprint
	}
	return fp
}

// diff is the field-level diff of c's input against the recorded one,
// under the recorded rules.
func (e *engine) diff(c host.Call, recorded json.RawMessage) *InputDiff {
	rules, _ := e.recordedRules(c)
	return DiffInputsVolatile(recorded, c.Input, rules)
}

// rulesText is what a divergence message adds when the rules changed.
func rulesText(rc *RulesChange) string {
	if rc == nil {
		return ""
	}
	return fmt.Sprintf("; the call's volatile-field rules changed since the recording (recorded %s, the code declares %s): "+
		"the recording is verified under its own rules; save the case again to record the new ones",
		specText(rc.Recorded), specText(rc.Current))
}

func specText(s volatile.Spec) string {
	switch {
	case s.Empty():
		return "none"
	case len(s.Prompt) == 0:
		return fmt.Sprintf("fields %q", s.Fields)
	case len(s.Fields) == 0:
		return fmt.Sprintf("prompt patterns %q", s.Prompt)
	}
	return fmt.Sprintf("fields %q and prompt patterns %q", s.Fields, s.Prompt)
}
