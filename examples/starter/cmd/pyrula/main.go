// Command pyrula is the saved-case CLI over the starter's targets: `pyrula
// targets`, `dev`, `run`, `events`, `case …` and `enqueue` (pyrula --help
// lists them).
package main

import (
	"os"

	"github.com/pyrula/caseworker/cli"

	"example.com/starter/flows"
)

func main() { os.Exit(cli.Options{Name: "pyrula", Register: flows.Register}.Run()) }
