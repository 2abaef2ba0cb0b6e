package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/store"
)

// importOutput is what `case import` prints: the shape of the save output.
type importOutput struct {
	FixtureHash     bundle.Hash    `json:"fixture_hash"`
	FixtureStore    string         `json:"fixture_store"`
	ManifestSummary bundle.Summary `json:"manifest_summary"`
}

// importCmd is `case import FILE`.
func (a *app) importCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "import FILE",
		Short: "Store a bundle file (zstd blob, gzip or JSON; - for stdin)",
		Long: `Reads a bundle from FILE ("-" for standard input) in any form export
writes (the zstd blob, the readable JSON, or gzip-compressed JSON), validates
it, and stores it under its hash. Importing the same bundle twice keeps one
copy. Prints {"fixture_hash", "fixture_store", "manifest_summary"}.

Refusals: no_fixture_store, bundle_corrupt, format_unsupported,
bundle_too_large.`,
		Args: exactArgs("FILE"),
		RunE: a.run(func(ctx context.Context, args []string) error {
			return a.withStore(ctx, func(s store.Store) error {
				return a.importFile(ctx, s, args[0])
			})
		}),
	}
}

// bundleGCPercent is the garbage collector's target while a save or an
// import holds a whole bundle: the heap may pass what is live by 3 % (Go's
// default lets it double). A canonical bundle is one buffer without
// pointers, so collections are cheap (an import of a 130 MB bundle takes
// no longer at 3 than at 10), and the process's peak RSS stays near the
// canonical size instead of twice it (docs/performance.md).
const bundleGCPercent = 3

// lowerGC sets the garbage collector's target to bundleGCPercent unless
// GOGC is set, and returns a function that restores the previous target.
func (a *app) lowerGC() (restore func()) {
	if a.getenv("GOGC") != "" {
		return func() {}
	}
	old := debug.SetGCPercent(bundleGCPercent)
	return func() { debug.SetGCPercent(old) }
}

// returnGarbageFrom is the canonical size from which a save or an import
// hands the memory it freed while reading back to the operating system
// before compressing and storing (returnGarbage).
const returnGarbageFrom = 16 << 20

// returnGarbage collects what reading c left behind (tokens, the reader's
// buffers, a compression pipeline stopped when the input turned out of
// order) and returns that memory to the operating system before the bundle
// is compressed into the store: otherwise the freed pages stay in the
// process beside the encoder's windows and count in its peak RSS. A
// collection costs little here (the live heap is mostly c's one buffer,
// which holds no pointers); small bundles skip it.
func returnGarbage(c *bundle.Canonical) {
	if c.Size() >= returnGarbageFrom {
		debug.FreeOSMemory()
	}
}

func (a *app) importFile(ctx context.Context, s store.Store, name string) error {
	defer a.lowerGC()()
	var r io.Reader = a.stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return fmt.Errorf("import: %w", err)
		}
		defer f.Close()
		r = f
	}
	c, err := bundle.Read(r, bundle.Options{Compress: true, SpillDir: os.TempDir()})
	if err != nil {
		return fmt.Errorf("import %s: %w", name, err)
	}
	returnGarbage(c)
	if _, err := store.Save(ctx, s, c); err != nil {
		return fmt.Errorf("import %s: save %s: %w", name, c.Hash(), err)
	}
	sum := c.Summary()
	if sum.Capture.Missing == nil {
		sum.Capture.Missing = []json.RawMessage{}
	}
	return a.emit(importOutput{FixtureHash: c.Hash(), FixtureStore: s.Identity(), ManifestSummary: sum})
}
