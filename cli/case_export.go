package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/store"
)

// Export formats.
const (
	formatZstd = "zstd"
	formatJSON = "json"
)

// exportPerm is the mode of a file export writes.
const exportPerm = 0o644

// exportOutput is what `case export` prints when it wrote a file.
type exportOutput struct {
	FixtureHash bundle.Hash `json:"fixture_hash"`
	Out         string      `json:"out"`
	Format      string      `json:"format"`
	Bytes       int64       `json:"bytes"`
}

// exportCmd is `case export HASH --out F [--json]`.
func (a *app) exportCmd() *cobra.Command {
	var out string
	var asJSON bool
	c := &cobra.Command{
		Use:   "export HASH --out FILE [--json]",
		Short: "Write a stored bundle to a file (zstd blob, or readable JSON with --json)",
		Long: `Reads the bundle HASH from the fixture store, verifies it, and writes it to
FILE ("-" for standard output): the compressed zstd blob by default, or with
--json the readable form (indented, sorted keys) that diffs well and imports
back to the same hash. The file is written atomically: a failed export never
leaves a partial file. Prints {"fixture_hash", "out", "format", "bytes"}
unless writing to standard output. Warns on stderr: bundles hold unredacted
inputs and outputs.

Refusals: no_fixture_store, invalid_fixture_hash, bundle_missing,
bundle_corrupt.`,
		Args: exactArgs("HASH"),
		RunE: a.run(func(ctx context.Context, args []string) error {
			h, err := parseHash(args[0])
			if err != nil {
				return err
			}
			if out == "" {
				return errors.New("export: --out must name a file, or - for standard output")
			}
			format := formatZstd
			if asJSON {
				format = formatJSON
			}
			return a.withStore(ctx, func(s store.Store) error {
				return a.export(ctx, s, h, out, format)
			})
		}),
	}
	c.Flags().StringVar(&out, "out", "", `file to write ("-" for standard output) (required)`)
	c.Flags().BoolVar(&asJSON, "json", false, "write the readable indented JSON instead of the zstd blob")
	_ = c.MarkFlagRequired("out")
	return c
}

func (a *app) export(ctx context.Context, s store.Store, h bundle.Hash, out, format string) error {
	c, err := store.Load(ctx, s, h)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	write := func(w io.Writer) error {
		var err error
		if format == formatJSON {
			err = c.WriteIndented(w)
		} else {
			err = c.WriteBlob(w)
		}
		if err != nil {
			return fmt.Errorf("export %s: write %s: %w", h, format, err)
		}
		return nil
	}

	if out == "-" {
		a.warnUnredacted("the exported bundle")
		return write(a.stdout)
	}
	a.warnUnredacted(out)
	n, err := writeFileAtomic(out, exportPerm, write)
	if err != nil {
		return fmt.Errorf("export %s: %w", h, err)
	}
	return a.emit(exportOutput{FixtureHash: h, Out: out, Format: format, Bytes: n})
}
