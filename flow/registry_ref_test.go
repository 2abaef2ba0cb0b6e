package flow_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/examples"
	"github.com/pyrula/caseworker/flow/host"
)

// Targets and model clients record the package that registered them, and
// resolve by their name or by "<package>:<name>".
func TestResolvePackageQualified(t *testing.T) {
	t.Parallel()
	reg := flow.NewRegistry()
	if _, err := examples.Register(reg); err != nil {
		t.Fatal(err)
	}
	const pkg = "github.com/pyrula/caseworker/flow/examples"
	for _, ref := range []string{examples.Checkout, pkg + ":" + examples.Checkout} {
		info, err := reg.Resolve(ref)
		if err != nil || info.Name != examples.Checkout || info.Package != pkg {
			t.Errorf("Resolve(%q) = %+v, %v", ref, info, err)
		}
	}
	for ref, want := range map[string]string{
		"nope":                         `"nope"`,
		pkg + ":nope":                  "registers no target",
		"example.com/other:checkout":   "registered by package " + pkg + ", not example.com/other",
		":checkout":                    `":checkout"`,
		"my_app.workflows:" + "orders": "registers no target",
	} {
		_, err := reg.Resolve(ref)
		if !errors.Is(err, host.ErrUnknownTarget) || !strings.Contains(err.Error(), want) {
			t.Errorf("Resolve(%q) = %v, want ErrUnknownTarget with %q", ref, err, want)
		}
	}

	// A model client registered here is this test package's.
	if err := reg.RegisterModelClient("echo", flow.ModelClientFunc(nil)); err != nil {
		t.Fatal(err)
	}
	if _, ok := reg.ModelClient("github.com/pyrula/caseworker/flow_test:echo"); !ok {
		t.Error("the client by its package and name was not found")
	}
	if _, ok := reg.ModelClient("github.com/pyrula/caseworker/flow:echo"); ok {
		t.Error("the client was found under another package")
	}
}

// A dependency set is registered under a lowercase name and found by name
// or PACKAGE:NAME (how a run's steps read it with Dep is tested through
// the CLI: cli.TestDepsRef).
func TestDepSets(t *testing.T) {
	t.Parallel()
	reg := flow.NewRegistry()
	type clock struct{ at string }
	if err := reg.RegisterDeps("fakes", flow.Deps{clock{"noon"}, strings.NewReader("x")}); err != nil {
		t.Fatal(err)
	}
	for name, d := range map[string]flow.Deps{"fakes": {1}, "Bad Name": {1}, "empty": nil} {
		if err := reg.RegisterDeps(name, d); !errors.Is(err, flow.ErrInvalidTarget) {
			t.Errorf("RegisterDeps(%q) = %v, want ErrInvalidTarget", name, err)
		}
	}
	for _, ref := range []string{"fakes", "github.com/pyrula/caseworker/flow_test:fakes"} {
		if _, ok := reg.DepSet(ref); !ok {
			t.Errorf("DepSet(%q) not found", ref)
		}
	}
	if _, ok := reg.DepSet("example.com/other:fakes"); ok {
		t.Error("DepSet found the set under another package")
	}
	if got := reg.DepSetNames(); len(got) != 1 || got[0] != "fakes" {
		t.Errorf("DepSetNames = %v", got)
	}
}
