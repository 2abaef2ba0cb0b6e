package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store"
)

// gcLine is one line of `case gc`.
type gcLine struct {
	FixtureHash bundle.Hash `json:"fixture_hash"`
	SizeBytes   int64       `json:"size_bytes"`
	Action      string      `json:"action"`
}

// gcCmd is `case gc [--keep H]… [--keep-file F] [--yes]`.
func (a *app) gcCmd() *cobra.Command {
	var keep []string
	var keepFile string
	var yes bool
	c := &cobra.Command{
		Use:   "gc [--keep HASH]... [--keep-file FILE] [--yes]",
		Short: "List (with --yes, delete) every bundle not kept",
		Long: `Every stored bundle that is not kept is a candidate; without --keep or
--keep-file every bundle is one. Without --yes gc only lists; with --yes it
deletes the candidates. A bundle saved or imported after gc started is never
deleted (action "skipped_new").

--keep is repeatable. --keep-file names a file ("-" for standard input) with
one hash per line; blank lines and everything from a "#" to the end of a line
are ignored. Prints one JSON line per bundle considered, sorted by hash:
{"fixture_hash", "size_bytes", "action"} with action "candidate",
"deleted" or "skipped_new". Kept bundles are not printed.

Refusals: no_fixture_store, invalid_keep_hash.`,
		Args: exactArgs(),
		RunE: a.run(func(ctx context.Context, _ []string) error {
			kept, err := a.keepSet(keep, keepFile)
			if err != nil {
				return err
			}
			return a.withStore(ctx, func(s store.Store) error {
				return a.gc(ctx, s, kept, yes)
			})
		}),
	}
	c.Flags().StringArrayVar(&keep, "keep", nil, "hash of a bundle to keep (repeatable)")
	c.Flags().StringVar(&keepFile, "keep-file", "", `file of hashes to keep, one per line ("-" for standard input)`)
	c.Flags().BoolVar(&yes, "yes", false, "delete the candidates (without it gc only lists them)")
	return c
}

// keepSet parses the --keep entries and the --keep-file into a set.
func (a *app) keepSet(keep []string, keepFile string) (map[bundle.Hash]bool, error) {
	set := make(map[bundle.Hash]bool, len(keep))
	for _, k := range keep {
		if !bundle.ValidHash(k) {
			return nil, messages.Errorf(messages.InvalidKeepHash,
				"keep entry %q (--keep) is not 64 lowercase hex characters", clip(k))
		}
		set[bundle.Hash(k)] = true
	}
	if keepFile == "" {
		return set, nil
	}
	var r io.Reader = a.stdin
	if keepFile != "-" {
		f, err := os.Open(keepFile)
		if err != nil {
			return nil, fmt.Errorf("gc: read keep file: %w", err)
		}
		defer f.Close()
		r = f
	}
	if err := readKeepFile(r, keepFile, set); err != nil {
		return nil, err
	}
	return set, nil
}

// readKeepFile adds the hashes listed in r to set: one per line, surrounding
// whitespace trimmed, blank lines and "#" comments (to the end of the line)
// ignored. An entry that is not a hash is invalid_keep_hash, naming the file
// and line.
func readKeepFile(r io.Reader, name string, set map[bundle.Hash]bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for line := 1; sc.Scan(); line++ {
		entry := sc.Text()
		if line == 1 {
			entry = strings.TrimPrefix(entry, "\ufeff")
		}
		if i := strings.IndexByte(entry, '#'); i >= 0 {
			entry = entry[:i]
		}
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		if !bundle.ValidHash(entry) {
			return messages.Errorf(messages.InvalidKeepHash,
				"keep entry %q (%s:%d) is not 64 lowercase hex characters", clip(entry), name, line)
		}
		set[bundle.Hash(entry)] = true
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("gc: read keep file %s: %w", name, err)
	}
	return nil
}

func (a *app) gc(ctx context.Context, s store.Store, keep map[bundle.Hash]bool, sweep bool) error {
	var items []store.GCItem
	err := store.GC(ctx, s, store.GCParams{Keep: keep, Sweep: sweep, Now: a.now()}, func(it store.GCItem) error {
		if it.Action != store.ActionKept {
			items = append(items, it)
		}
		return nil
	})
	// Print what gc did even when it stopped early: deletions happened.
	slices.SortFunc(items, func(x, y store.GCItem) int { return strings.Compare(string(x.Info.Hash), string(y.Info.Hash)) })
	for _, it := range items {
		if werr := a.emit(gcLine{FixtureHash: it.Info.Hash, SizeBytes: it.Info.Size, Action: it.Action}); werr != nil {
			return werr
		}
	}
	if err != nil {
		return fmt.Errorf("gc %s: %w", s.Identity(), err)
	}
	return nil
}

// clip shortens an entry quoted in a message.
func clip(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}
