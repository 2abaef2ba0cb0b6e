package cli

import (
	"fmt"
	"strings"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
)

// lookupTarget resolves a target named on the command line: its
// registered name ("order"), or "<package>:<name>"
// ("example.com/shop/flows:order"), a target that the Go package with that
// import path registered (flow.Registry.Resolve). verb ("case run") starts
// the error, which says what to look at.
func (a *app) lookupTarget(verb, ref string) (host.TargetInfo, error) {
	info, err := a.registry().Resolve(ref)
	if err == nil {
		return info, nil
	}
	if !strings.Contains(ref, ":") {
		return info, fmt.Errorf("%s: no target %q is registered (see %s targets)", verb, ref, a.name())
	}
	why := strings.TrimPrefix(err.Error(), host.ErrUnknownTarget.Error()+": ")
	return info, fmt.Errorf("%s: no target %s (see %s targets: a target is named NAME or PACKAGE:NAME, PACKAGE the import path of the Go package that registered it)", verb, why, a.name())
}

// targetName is the registered name a command-line target reference
// names: ref itself when it is a registered name or no
// "<package>:<name>" reference resolves, so that the command's own check
// reports it.
func (a *app) targetName(ref string) string {
	if info, err := a.registry().Resolve(ref); err == nil {
		return info.Name
	}
	return ref
}

// depSet returns the dependency set --deps-ref names (a registered name,
// or PACKAGE:NAME), nil for ""; verb ("case run") starts its error, which
// lists the registered sets.
func (a *app) depSet(verb, ref string) (flow.Deps, error) {
	if ref == "" {
		return nil, nil
	}
	if d, ok := a.registry().DepSet(ref); ok {
		return d, nil
	}
	have := a.registry().DepSetNames()
	if len(have) == 0 {
		return nil, fmt.Errorf("%s: --deps-ref %s: this binary registers no dependency set (flow.Registry.RegisterDeps)", verb, ref)
	}
	return nil, fmt.Errorf("%s: --deps-ref %s names no dependency set this binary registered (have %s)", verb, ref, strings.Join(have, ", "))
}
