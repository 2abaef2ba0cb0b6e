//go:build !demo

package daemon

import (
	"context"
	"fmt"
	"io"

	"github.com/pyrula/caseworker/flow"
)

// demoBuilt says whether this build has `worker demo`: only a build with
// the demo tag links the demo and its embedded server (memvalkey), so that
// the worker that is shipped does not.
const demoBuilt = false

// demo refuses: this build has no demo.
func demo(_ context.Context, prog string, _ *flow.Registry, _ []string, _, _ io.Writer) error {
	return fmt.Errorf("%s demo: this build has no demo: it is built with the demo tag only (go run -tags demo ./cmd/worker demo), so that the shipped worker does not link its embedded server", prog)
}
