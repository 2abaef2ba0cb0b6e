// Command pyrula is the saved-case CLI: `pyrula case import|export|list|show|
// delete|gc|save`, `pyrula run`, `targets`, `events` and `db migrate`. It is a
// thin main over package cli, which a user's own binary can call too with its
// own targets; pyrula itself registers the example targets of flow/examples.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/pyrula/caseworker/cli"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/examples"
)

func main() {
	reg := flow.NewRegistry()
	if _, err := examples.Register(reg); err != nil {
		fmt.Fprintf(os.Stderr, "error: register the example targets: %v\n", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Options{Registry: reg}.Main(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
