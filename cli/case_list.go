package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/internal/redact"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store"
)

// listLine is one line of `case list`.
type listLine struct {
	FixtureHash bundle.Hash `json:"fixture_hash"`
	SizeBytes   int64       `json:"size_bytes"`
	UpdatedAt   string      `json:"updated_at"`
	// Target, Kind and ForkAfterSeq are the manifest's target_name, kind
	// and fork_after_seq (null when the case keeps only its inputs); all
	// three are null when the bundle could not be read.
	Target       *string      `json:"target"`
	Kind         *bundle.Kind `json:"kind"`
	ForkAfterSeq *int64       `json:"fork_after_seq"`
	// Error, only on a bundle that could not be read, is why:
	// "<reason code>: <message>".
	Error string `json:"error,omitempty"`
}

// listCmd is `case list [--format json|table]`.
func (a *app) listCmd() *cobra.Command {
	var format string
	c := &cobra.Command{
		Use:   "list",
		Short: "List stored bundles (JSON lines, sorted by hash)",
		Long: `Prints one JSON line per stored bundle, sorted by hash:
{"fixture_hash", "size_bytes", "updated_at", "target", "kind",
"fork_after_seq"}. size_bytes is the stored (compressed) size; updated_at
(RFC 3339, UTC) is when the bundle was last saved or imported; target, kind
and fork_after_seq (null when only the inputs are kept) are read from the
bundle's manifest. Every bundle is read and verified: one that cannot be
has "error": "<reason code>: <message>" on its line (and null target, kind
and fork_after_seq) instead of failing the list. --format table prints the
same for people.

Refusals: no_fixture_store.`,
		Args: exactArgs(),
		RunE: a.run(func(ctx context.Context, _ []string) error {
			if err := checkFormat("case list", format); err != nil {
				return err
			}
			return a.withStore(ctx, func(s store.Store) error {
				return a.list(ctx, s, format == formatTable)
			})
		}),
	}
	c.Flags().StringVar(&format, "format", formatJSON, "json (JSON lines) or table")
	return c
}

func (a *app) list(ctx context.Context, s store.Store, table bool) error {
	var infos []store.Info
	for info, err := range s.List(ctx) {
		if err != nil {
			return fmt.Errorf("list %s: %w", s.Identity(), err)
		}
		infos = append(infos, info)
	}
	slices.SortFunc(infos, func(x, y store.Info) int { return strings.Compare(string(x.Hash), string(y.Hash)) })
	lines := make([]listLine, 0, len(infos))
	for _, info := range infos {
		line, err := listOne(ctx, s, info)
		if err != nil {
			return err
		}
		if table {
			lines = append(lines, line)
		} else if err := a.emit(line); err != nil {
			return err
		}
	}
	if table {
		if err := writeListTable(a.stdout, lines); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
	}
	return nil
}

// listOne is the line of one stored bundle: its manifest's target, kind
// and fork read from the bundle (verified). A bundle that cannot be read
// for a reason code (bundle_corrupt, bundle_missing when it went away
// meanwhile, format_unsupported, …) has the code and message on its line;
// any other error (the store failing) fails the list.
func listOne(ctx context.Context, s store.Store, info store.Info) (listLine, error) {
	line := listLine{FixtureHash: info.Hash, SizeBytes: info.Size, UpdatedAt: timestamp(info.UpdatedAt)}
	cb, err := store.Load(ctx, s, info.Hash)
	if err != nil {
		e := messages.AsError(err)
		if e == nil || ctx.Err() != nil {
			return line, fmt.Errorf("list %s: %w", s.Identity(), err)
		}
		line.Error = string(e.Code) + ": " + redact.Secrets(oneLine(cmp.Or(e.Message, err.Error())))
		return line, nil
	}
	m := cb.Manifest()
	line.Target, line.Kind, line.ForkAfterSeq = &m.TargetName, &m.Kind, m.ForkAfterSeq
	return line, nil
}

// writeListTable writes case list's lines as a table for people: HASH (the
// first 12 characters), TARGET, KIND, FORK ("-" when only the inputs are
// kept), SIZE in bytes, UPDATED (to the second), and ERROR when a bundle
// could not be read.
func writeListTable(w io.Writer, lines []listLine) error {
	t := newTable()
	head := []string{"HASH", "TARGET", "KIND", "FORK", "SIZE", "UPDATED"}
	errs := slices.ContainsFunc(lines, func(l listLine) bool { return l.Error != "" })
	if errs {
		head = append(head, "ERROR")
	}
	t.row(head...)
	for _, l := range lines {
		h := string(l.FixtureHash)
		updated := l.UpdatedAt
		if at, err := time.Parse(time.RFC3339Nano, l.UpdatedAt); err == nil {
			updated = at.UTC().Format(time.RFC3339)
		}
		fork := "-"
		if l.ForkAfterSeq != nil {
			fork = strconv.FormatInt(*l.ForkAfterSeq, 10)
		}
		row := []string{short(&h), cell(deref(l.Target)), cell(string(deref(l.Kind))), fork, strconv.FormatInt(l.SizeBytes, 10), updated}
		if errs {
			row = append(row, cellReplacer.Replace(l.Error))
		}
		t.row(row...)
	}
	if len(lines) == 0 {
		t.row("(no bundle stored)")
	}
	return t.writeTo(w)
}

// timestamp formats t as RFC 3339 in UTC, with as many fractional digits as
// it has.
func timestamp(t time.Time) string {
	return t.UTC().Format(time.RFC3339Nano)
}
