package cli_test

import (
	"context"
	"fmt"
	"os"

	"github.com/pyrula/caseworker/cli"
)

// A binary runs the command tree with its own arguments and environment;
// here a memory store (one per run) takes an import of a sample case.
func ExampleMain() {
	getenv := func(name string) string {
		if name == "PYRULA_FIXTURE_STORE" {
			return "memory:"
		}
		return ""
	}
	code := cli.Main(context.Background(), []string{"case", "import", "testdata/checkout.json"},
		getenv, nil, os.Stdout, os.Stderr)
	fmt.Println("exit", code)

	code = cli.Main(context.Background(), []string{"case", "show", "not-a-hash"},
		getenv, nil, os.Stdout, os.Stderr)
	fmt.Println("exit", code)
	// Output:
	// {"fixture_hash":"c0e6f11369da79b15d5ac4c038b075a5088e25e02e7cfefbb21382a881e24178","fixture_store":"memory:","manifest_summary":{"format":1,"kind":"workflow","target_name":"checkout","fork_after_seq":10,"capture":{"complete":true,"missing":[]},"result_count":8,"history_count":10}}
	// exit 0
	// {"code":"invalid_fixture_hash","message":"fixture hash \"not-a-hash\" is not 64 lowercase hex characters"}
	// exit 2
}
