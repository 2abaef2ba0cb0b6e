// Command pyrula is the saved-case CLI: `pyrula case import|export|list|show|
// delete|gc`. It is a thin main over package cli, which a user's own binary
// can call too.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/pyrula/caseworker/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
