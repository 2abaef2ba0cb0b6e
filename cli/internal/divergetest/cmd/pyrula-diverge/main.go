// Command pyrula-diverge is the pyrula CLI over the divergence tests'
// targets (package divergetest).
package main

import (
	"os"

	"github.com/pyrula/caseworker/cli"
	"github.com/pyrula/caseworker/cli/internal/divergetest"
)

func main() { os.Exit(cli.Options{Register: divergetest.Register}.Run()) }
