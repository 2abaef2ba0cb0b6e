package daemon_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/daemon"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/version"
)

// TestRegisterFailureStopsStartUp checks that a bad registration stops
// serve and demo before anything starts, with one error line naming the
// target, while version and --help need no targets.
func TestRegisterFailureStopsStartUp(t *testing.T) {
	t.Parallel()
	bad := daemon.Options{Name: "shop-worker", Register: func(reg *flow.Registry) error {
		return flow.RegisterWorkflow(reg, flow.Workflow[struct{}, int]{Name: "orders", CodeVersion: "v1",
			Steps: []flow.Decl{flow.DeclareChild("receipts")},
			Run:   func(context.Context, struct{}) (int, error) { return 0, nil }})
	}}
	for _, args := range [][]string{{"serve"}, {"demo"}, nil} {
		var stdout, stderr bytes.Buffer
		code := bad.Main(context.Background(), args, &stdout, &stderr)
		want := `error: register targets: flow: invalid target: orders: declared child target "receipts" is not registered` + "\n"
		if code != 1 || stdout.Len() != 0 || stderr.String() != want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 and %q", args, code, stdout.String(), stderr.String(), want)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := bad.Main(context.Background(), []string{"version"}, &stdout, &stderr); code != 0 || stdout.String() != version.Version+"\n" {
		t.Errorf("version: exit %d, %q %q", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	if code := bad.Main(context.Background(), []string{"--help"}, &stdout, &stderr); code != 0 ||
		!strings.Contains(stdout.String(), "Usage: shop-worker [serve") || !strings.Contains(stdout.String(), "PYRULA_VALKEY_URL") {
		t.Errorf("--help: exit %d\n%s", code, stdout.String())
	}
}
