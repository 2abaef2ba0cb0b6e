// Command worker is the starter's case worker daemon: `worker serve` (the
// default) consumes the case message stream in Valkey and runs the
// starter's targets; `worker demo` (built with -tags demo), `worker db migrate`, `worker version`
// and `worker --help` (every PYRULA_ variable with its default) come with
// the same call.
package main

import (
	"os"

	"github.com/pyrula/caseworker/daemon"

	"example.com/starter/flows"
)

func main() { os.Exit(daemon.Options{Register: flows.Register}.Run()) }
