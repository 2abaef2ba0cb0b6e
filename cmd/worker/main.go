// Command worker is the case worker daemon over the example targets of
// flow/examples: `worker serve` (the default), `worker demo`, `worker db
// migrate`, `worker version` and `worker --help`. It is the same one call a
// user's own worker binary makes (package daemon).
package main

import (
	"os"

	"github.com/pyrula/caseworker/daemon"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/examples"
)

func main() {
	os.Exit(daemon.Options{Register: register}.Run())
}

// register registers the example targets.
func register(reg *flow.Registry) error {
	_, err := examples.Register(reg)
	return err
}
