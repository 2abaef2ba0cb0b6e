// Command pyrula is the saved-case CLI over the example targets of
// flow/examples: `pyrula case …`, `dev`, `run`, `targets`, `events`,
// `enqueue` and `db migrate`. It is the same one call a user's own CLI
// binary makes (package cli).
package main

import (
	"os"

	"github.com/pyrula/caseworker/cli"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/examples"
)

func main() {
	os.Exit(cli.Options{Register: register}.Run())
}

// register registers the example targets.
func register(reg *flow.Registry) error {
	_, err := examples.Register(reg)
	return err
}
