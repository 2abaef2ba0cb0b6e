package core

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Deps is a dependency set: values a target's steps and tools read from
// their context with Dep instead of building the real thing, such as a
// fake payment client for CI or a sandbox API's client. A package
// registers sets by name (Registry.RegisterDeps); a run uses one when it is
// given one (RunParams.Deps, which a host picks by name),
// and its children use it too. Without one, Dep reports false and the code
// uses its own. A dependency set changes what live calls do, never a
// call's input or fingerprint: recorded calls replay the same.
type Deps []any

// depsKey is the context key of the run's dependency set.
type depsKey struct{}

// withDeps returns ctx carrying d (ctx itself for an empty set).
func withDeps(ctx context.Context, d Deps) context.Context {
	if len(d) == 0 {
		return ctx
	}
	return context.WithValue(ctx, depsKey{}, d)
}

// Dep returns the first value of the run's dependency set that is a T (a
// type or an interface), and whether there is one.
func Dep[T any](ctx context.Context) (T, bool) {
	d, _ := ctx.Value(depsKey{}).(Deps)
	for _, v := range d {
		if t, ok := v.(T); ok {
			return t, true
		}
	}
	var zero T
	return zero, false
}

// RegisterDeps registers the dependency set d as name, a lowercase
// identifier (as a model client's name), recording the package that
// registered it. Errors: ErrInvalidTarget for a bad or taken name or an
// empty set.
func (r *Registry) RegisterDeps(name string, d Deps) error {
	if !validClientName(name) {
		return fmt.Errorf("%w: dependency set name %q is not a lowercase identifier", ErrInvalidTarget, name)
	}
	if len(d) == 0 {
		return fmt.Errorf("%w: dependency set %s is empty", ErrInvalidTarget, name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.depSets == nil {
		r.depSets, r.depPkgs = map[string]Deps{}, map[string]string{}
	}
	if r.depSets[name] != nil {
		return fmt.Errorf("%w: dependency set %s registered twice", ErrInvalidTarget, name)
	}
	r.depSets[name] = slices.Clone(d)
	r.depPkgs[name] = callerPackage()
	return nil
}

// DepSet returns the dependency set registered as ref, or named
// "<package>:<name>": the set registered as name by the Go package with
// that import path.
func (r *Registry) DepSet(ref string) (Deps, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return byRef(r.depSets, r.depPkgs, ref)
}

// byRef looks ref up in m: a key, or "<package>:<key>" for a key that
// package registered (pkgs holds each key's package).
func byRef[T any](m map[string]T, pkgs map[string]string, ref string) (T, bool) {
	if v, ok := m[ref]; ok {
		return v, true
	}
	var zero T
	i := strings.LastIndexByte(ref, ':')
	if i <= 0 {
		return zero, false
	}
	v, ok := m[ref[i+1:]]
	if !ok || pkgs[ref[i+1:]] != ref[:i] {
		return zero, false
	}
	return v, true
}

// DepSetNames returns the names of the registered dependency sets, sorted.
func (r *Registry) DepSetNames() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.depSets))
}
