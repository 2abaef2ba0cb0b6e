package core

import (
	"encoding/json"
	"strings"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/bundle/volatile"
)

// FingerprintRules is Fingerprint under a call's volatile-field rules: the
// canonical JSON of input (the real values, what call:start records) and
// the lowercase hex SHA-256 of that JSON with the rules applied (the
// volatile fields removed, the prompt patterns' matches removed from the
// prompt text). With nil rules it is Fingerprint.
func FingerprintRules(input any, rules *volatile.Rules) (canonicalInput json.RawMessage, fingerprint string, err error) {
	in := writeInput(input)
	defer in.release()
	return in.keep(rules)
}

// VolatileOf returns the volatile-field rules that reg (a target's
// registration, or the one a bundle recorded) gives the call c: a declared
// step's fields (by the step's name; child runs, signal sends and gathers
// have none), a tool's fields or, for a model call, the prompt patterns.
// Other calls have none.
func VolatileOf(reg bundle.Registration, c Call) volatile.Spec {
	v := reg.Volatile
	if v == nil {
		return volatile.Spec{}
	}
	switch c.Kind {
	case KindStep:
		if c.Name != "" && strings.HasPrefix(c.Key, c.Name+":") && !isReservedStepID(c.Key) {
			return volatile.Spec{Fields: v.Steps[c.Name]}
		}
	case KindTool:
		return volatile.Spec{Fields: v.Tools[c.Name]}
	case KindModel:
		return volatile.Spec{Prompt: v.Prompt}
	}
	return volatile.Spec{}
}

// HasVolatile reports whether reg declares any volatile-field rule.
func HasVolatile(reg bundle.Registration) bool {
	v := reg.Volatile
	return v != nil && (len(v.Steps) > 0 || len(v.Tools) > 0 || len(v.Prompt) > 0)
}
