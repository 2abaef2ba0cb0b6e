package cli_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pyrula/caseworker/cli"
	"github.com/pyrula/caseworker/flow"
)

// mainIn runs Options.Main in this process with a file store.
func mainIn(t *testing.T, o cli.Options, dir string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	getenv := func(name string) string {
		if name == "PYRULA_FIXTURE_STORE" {
			return dir
		}
		return ""
	}
	var out, errOut bytes.Buffer
	code = o.Main(context.Background(), args, getenv, nil, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestOptionsName(t *testing.T) {
	t.Parallel()
	o := cli.Options{Name: "shop-worker"}
	code, stdout, _ := mainIn(t, o, t.TempDir(), "case", "--help")
	if code != 0 || !strings.Contains(stdout, "shop-worker case [command]") {
		t.Fatalf("exit %d, help:\n%s", code, stdout)
	}
	code, _, stderr := mainIn(t, o, t.TempDir(), "case", "show")
	if code != 1 || !strings.Contains(stderr, `see "shop-worker case show --help"`) {
		t.Fatalf("exit %d, stderr: %s", code, stderr)
	}
}

func TestOptionsNow(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "cases")
	if code, stdout, stderr := mainIn(t, cli.Options{}, dir, "case", "import", checkoutFile); code != 0 {
		t.Fatalf("import: exit %d\n%s%s", code, stdout, stderr)
	}
	// With the clock an hour behind, the bundle just imported is new; with
	// the clock an hour ahead it is old enough to sweep.
	earlier := cli.Options{Now: func() time.Time { return time.Now().Add(-time.Hour) }}
	code, stdout, stderr := mainIn(t, earlier, dir, "case", "gc", "--yes")
	if want := `{"fixture_hash":"` + checkoutHash + `","size_bytes":`; code != 0 || !strings.HasPrefix(stdout, want) || !strings.HasSuffix(stdout, `"action":"skipped_new"}`+"\n") {
		t.Fatalf("gc an hour earlier: exit %d\n%s%s", code, stdout, stderr)
	}
	later := cli.Options{Now: func() time.Time { return time.Now().Add(time.Hour) }}
	code, stdout, stderr = mainIn(t, later, dir, "case", "gc", "--yes")
	if code != 0 || !strings.HasSuffix(stdout, `"action":"deleted"}`+"\n") {
		t.Fatalf("gc an hour later: exit %d\n%s%s", code, stdout, stderr)
	}
}

// TestOptionsRegister checks that Register's targets are what the commands
// see, and that a failed or bad registration stops every command with one
// error line naming the target.
func TestOptionsRegister(t *testing.T) {
	t.Parallel()
	run := func(context.Context, struct{}) (int, error) { return 1, nil }
	good := func(reg *flow.Registry) error {
		return flow.RegisterWorkflow(reg, flow.Workflow[struct{}, int]{Name: "mine", CodeVersion: "v1", Run: run})
	}
	code, stdout, stderr := mainIn(t, cli.Options{Register: good}, t.TempDir(), "targets")
	if code != 0 || !strings.Contains(stdout, `"name":"mine"`) || stderr != "" {
		t.Fatalf("targets: exit %d\n%s%s", code, stdout, stderr)
	}
	bad := map[string]func(*flow.Registry) error{
		"mine: CodeVersion is required": func(reg *flow.Registry) error {
			return flow.RegisterWorkflow(reg, flow.Workflow[struct{}, int]{Name: "mine", Run: run})
		},
		"target already registered: mine": func(reg *flow.Registry) error {
			return errors.Join(good(reg), good(reg))
		},
		`mine: declared child target "gone" is not registered`: func(reg *flow.Registry) error {
			return flow.RegisterWorkflow(reg, flow.Workflow[struct{}, int]{Name: "mine", CodeVersion: "v1", Run: run,
				Steps: []flow.Decl{flow.DeclareChild("gone")}})
		},
	}
	for want, register := range bad {
		code, stdout, stderr := mainIn(t, cli.Options{Register: register}, t.TempDir(), "case", "list")
		if code != 1 || stdout != "" || !strings.HasPrefix(stderr, "error: register targets: ") ||
			!strings.Contains(stderr, want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("exit %d, stdout %q, stderr %q; want one error line with %q", code, stdout, stderr, want)
		}
	}
}
