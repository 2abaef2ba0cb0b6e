package replay

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
)

// The options an OptionError names.
const (
	// OptAllowWrite is an --allow-write token (options.allow_write).
	OptAllowWrite = "allow_write"
	// OptSupplyTools is a key of --supply tools (options.supply.tools).
	OptSupplyTools = "supply.tools"
	// OptSupplyCalls is a key of --supply calls (options.supply.calls).
	OptSupplyCalls = "supply.calls"
)

// OptionError is an --allow-write token or a --supply entry that names
// nothing the case run could make: invalid input, refused before the run
// starts (typos are errors, not silence). Callers word it in their own
// terms, the CLI with its flags, the worker with the message's options:
// Value followed by Problem reads as a sentence.
type OptionError struct {
	// Option is OptAllowWrite, OptSupplyTools or OptSupplyCalls.
	Option string
	// Index is the token's position in Options.AllowWrite; -1 for supply
	// entries.
	Index int
	// Value is the token, tool name or call key.
	Value string
	// Problem says what is wrong and what is valid, e.g. `names no tool or
	// step of support_agent (valid: tool:lookup_order, …)` or `is a call
	// key (stop_key); the allow token is step:reserve`.
	Problem string
}

// Error implements error, in the worker's terms.
func (e *OptionError) Error() string {
	if e.Option == OptAllowWrite {
		return fmt.Sprintf("options.%s[%d] %q %s", e.Option, e.Index, e.Value, e.Problem)
	}
	return fmt.Sprintf("options.%s[%q] %s", e.Option, e.Value, e.Problem)
}

// callKinds are the kinds a supplied calls key may have, in flow's order.
var callKinds = []host.CallKind{
	host.KindStep, host.KindModel, host.KindTool, host.KindSleep, host.KindNow,
	host.KindRandom, host.KindSignal, host.KindInterrupt, host.KindStream,
}

// The step ids of child runs, signal sends and gathers: "child:<n>",
// "sigsend:<n>", "gather:<id>" (flow's registration).
const (
	idChild   = "child"
	idSigSend = "sigsend"
	idGather  = "gather"
)

// maxListed bounds the valid names an OptionError lists.
const maxListed = 40

// CheckOptions checks that o names only what a case run of the target
// could make, and returns an *OptionError for the first option that does
// not (AllowWrite in order, then Supply.Tools, then Supply.Calls, by key):
//
//   - an AllowWrite token must be tool:<name> for a tool of the target
//     (info.Registration.Tools), or step:<x> for x a step name or id of the
//     target's registration or of the bundle manifest's (a case recorded
//     by older code), a step name that the bundle's recorded calls hold
//     (step keys "<name>:<n>": steps called inline without a
//     declaration), a recorded child run, signal send or gather id, or
//     child:<n> / sigsend:<n> for any n when the target declares (or the
//     case recorded) a child run / signal send: a loop starts more than
//     were declared. A call key pasted as a token (step:reserve:0, the
//     stop_key, for step:reserve, the stop_token; tool:<tool-use id> of a
//     recorded tool call for tool:<name>) says which token was meant;
//   - a Supply.Tools key must name a tool of the target;
//   - a Supply.Calls key must be <kind>:<key> of a flow call kind, with
//     the key's shape for that kind: <n> for model, sleep, now and random;
//     <name>:<n> for step, signal, interrupt and stream (or gather:<id>
//     for a step); a tool-use id for tool.
//
// Decision: tool tokens and Supply.Tools are checked against the target's
// own tools only: a tool call the run makes names a tool of the target (a
// tool that only older code offered can only come from a reused model
// answer, and an unrecorded call of it is answered by calls["tool:<id>"]).
//
// b may be nil when the case is not known yet (the worker at submission):
// then step tokens that a bundle could make valid (step:<name>,
// step:child:<n>, step:sigsend:<n>, step:gather:<id>) pass, and the check
// is repeated with the bundle before the run starts.
func CheckOptions(o Options, info host.TargetInfo, b *bundle.Bundle) error {
	v := newVocab(info, b)
	for i, tok := range o.AllowWrite {
		if p := v.checkToken(tok); p != "" {
			return &OptionError{Option: OptAllowWrite, Index: i, Value: tok, Problem: p}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(o.Supply.Tools)) {
		if !v.tools[name] {
			return &OptionError{Option: OptSupplyTools, Index: -1, Value: name, Problem: v.noTool()}
		}
	}
	for _, key := range slices.Sorted(maps.Keys(o.Supply.Calls)) {
		if p := v.checkCallKey(key); p != "" {
			return &OptionError{Option: OptSupplyCalls, Index: -1, Value: key, Problem: p}
		}
	}
	return nil
}

// vocab is what the options of a case run of one target may name.
type vocab struct {
	target  string
	tools   map[string]bool   // tool names of the target
	steps   map[string]bool   // x of every valid token step:x
	counted map[string]bool   // child, sigsend: step:<kind>:<n> is valid for every n
	toolUse map[string]string // recorded tool-use id → tool name
	partial bool              // no bundle: what it could add is not known
}

func newVocab(info host.TargetInfo, b *bundle.Bundle) *vocab {
	v := &vocab{target: info.Name, tools: map[string]bool{}, steps: map[string]bool{},
		counted: map[string]bool{}, toolUse: map[string]string{}, partial: b == nil}
	for _, t := range info.Registration.Tools {
		v.tools[t.Name] = true
	}
	regSteps := slices.Clone(info.Registration.Steps)
	if b != nil {
		regSteps = append(regSteps, b.Manifest.Registration.Steps...)
	}
	for _, s := range regSteps {
		v.addStepID(s.ID)
		if s.Name != "" {
			v.steps[s.Name] = true
		}
	}
	if b == nil {
		return v
	}
	for _, r := range b.Results {
		switch host.CallKind(r.Kind) {
		case host.KindStep:
			if head, _, _ := strings.Cut(r.Key, ":"); head == idChild || head == idSigSend || head == idGather {
				v.addStepID(r.Key)
			} else if i := strings.LastIndexByte(r.Key, ':'); i > 0 {
				v.steps[r.Key[:i]] = true
			}
		case host.KindModel:
			var resp flow.ModelResponse
			if json.Unmarshal(r.Result, &resp) == nil {
				for _, use := range resp.ToolUses() {
					v.toolUse[use.ID] = use.Name
				}
			}
		}
	}
	return v
}

// addStepID adds the token step:<id> of a registered or recorded step id.
func (v *vocab) addStepID(id string) {
	if id == "" {
		return
	}
	v.steps[id] = true
	if head, _, ok := strings.Cut(id, ":"); ok && (head == idChild || head == idSigSend) {
		v.counted[head] = true
	}
}

// checkToken returns what is wrong with an --allow-write token, or "".
func (v *vocab) checkToken(tok string) string {
	kind, name, _ := strings.Cut(tok, ":")
	switch {
	case kind == "tool" && v.tools[name]:
		return ""
	case kind == "tool":
		if tool, ok := v.toolUse[name]; ok && v.tools[tool] {
			return fmt.Sprintf("is a call key (stop_key); the allow token is tool:%s", tool)
		}
	case kind == "step" && v.steps[name]:
		return ""
	case kind == "step" && name != "":
		head, rest, colon := strings.Cut(name, ":")
		reserved := head == idChild || head == idSigSend || head == idGather
		switch {
		case colon && (head == idChild || head == idSigSend) && isCount(rest) && (v.counted[head] || v.partial):
			return ""
		case v.partial && (!colon || head == idGather && rest != ""):
			return "" // a bundle may make it valid: checked again with the bundle
		}
		if i := strings.LastIndexByte(name, ':'); i > 0 && !reserved && isCount(name[i+1:]) {
			base := name[:i]
			if !strings.Contains(base, ":") && (v.steps[base] || v.partial) {
				return fmt.Sprintf("is a call key (stop_key); the allow token is step:%s", base)
			}
		}
	}
	p := fmt.Sprintf("names no tool or step of %s (valid: %s)", v.target, listed(v.tokens()))
	if kind == "step" && name != "" && !strings.Contains(name, ":") {
		// It may be the stop_token of a step called inline without a
		// declaration, which no recorded call of the case names.
		p += "; a step called inline without a declaration is allowed by name once the case recorded a call of it, else declare it (flow.DeclareStep)"
	}
	return p
}

// tokens are the valid tokens, sorted.
func (v *vocab) tokens() []string {
	var out []string
	for name := range v.tools {
		out = append(out, "tool:"+name)
	}
	for x := range v.steps {
		out = append(out, "step:"+x)
	}
	slices.Sort(out)
	return out
}

// noTool is the problem of a supplied tools key that names no tool.
func (v *vocab) noTool() string {
	if len(v.tools) == 0 {
		return fmt.Sprintf("names no tool of %s: it has no tools (answer a call by its key in calls)", v.target)
	}
	return fmt.Sprintf("names no tool of %s (valid: %s)", v.target, listed(slices.Sorted(maps.Keys(v.tools))))
}

// checkCallKey returns what is wrong with a supplied calls key, or "".
func (v *vocab) checkCallKey(id string) string {
	kind, key, ok := strings.Cut(id, ":")
	if !ok || !slices.Contains(callKinds, host.CallKind(kind)) {
		kinds := make([]string, len(callKinds))
		for i, k := range callKinds {
			kinds[i] = string(k)
		}
		return fmt.Sprintf("is not <kind>:<key> with a call kind (%s)", strings.Join(kinds, ", "))
	}
	switch host.CallKind(kind) {
	case host.KindModel, host.KindSleep, host.KindNow, host.KindRandom:
		if !isCount(key) {
			return fmt.Sprintf("is not %s:<n>: the key of a %s call is its number, e.g. %s:0", kind, kind, kind)
		}
	case host.KindStep:
		if head, rest, _ := strings.Cut(key, ":"); head == idGather && rest != "" {
			return ""
		}
		if i := strings.LastIndexByte(key, ':'); i <= 0 || strings.Contains(key[:i], ":") || !isCount(key[i+1:]) {
			return "is not step:<name>:<n> (e.g. step:quote:0), step:child:<n>, step:sigsend:<n> or step:gather:<id>"
		}
	case host.KindSignal, host.KindInterrupt, host.KindStream:
		if i := strings.LastIndexByte(key, ':'); i <= 0 || !isCount(key[i+1:]) {
			return fmt.Sprintf("is not %s:<name>:<n>, e.g. %s:approval:0", kind, kind)
		}
	case host.KindTool:
		switch {
		case key == "":
			return "is not tool:<tool-use id>"
		case v.tools[key] && v.toolUse[key] == "":
			return fmt.Sprintf("names a tool, not a tool call: a calls key is tool:<tool-use id>; answer every call of %s with tools[%q]", key, key)
		}
	}
	return ""
}

// isCount reports whether s is a call counter as flow writes it: a
// decimal number without leading zeros.
func isCount(s string) bool {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// listed joins names for a message, at most maxListed of them.
func listed(names []string) string {
	switch {
	case len(names) == 0:
		return "none"
	case len(names) > maxListed:
		return fmt.Sprintf("%s, … %d more", strings.Join(names[:maxListed], ", "), len(names)-maxListed)
	}
	return strings.Join(names, ", ")
}
