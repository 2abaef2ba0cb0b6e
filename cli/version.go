package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pyrula/caseworker/version"
)

// versionCmd is `version`: the software's version (package version), one
// line on stdout, as the worker's `version` prints it. `--version` on the
// root command prints the same.
func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  exactArgs(),
		RunE: a.run(func(context.Context, []string) error {
			_, err := fmt.Fprintln(a.stdout, version.Version)
			return err
		}),
	}
}

// addVersionFlag gives root --version, printing what `version` prints
// (without cobra's -v shorthand).
func addVersionFlag(root *cobra.Command) {
	root.Version = version.Version
	root.SetVersionTemplate("{{.Version}}\n")
	root.Flags().Bool("version", false, "print the version")
}
