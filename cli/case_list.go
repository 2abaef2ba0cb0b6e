package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/store"
)

// listLine is one line of `case list`.
type listLine struct {
	FixtureHash bundle.Hash `json:"fixture_hash"`
	SizeBytes   int64       `json:"size_bytes"`
	UpdatedAt   string      `json:"updated_at"`
}

// listCmd is `case list`.
func (a *app) listCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List stored bundles (JSON lines, sorted by hash)",
		Long: `Prints one JSON line per stored bundle, sorted by hash:
{"fixture_hash", "size_bytes", "updated_at"}. size_bytes is the stored
(compressed) size; updated_at (RFC 3339, UTC) is when the bundle was last
saved or imported.

Refusals: no_fixture_store.`,
		Args: exactArgs(),
		RunE: a.run(func(ctx context.Context, _ []string) error {
			return a.withStore(ctx, func(s store.Store) error {
				return a.list(ctx, s)
			})
		}),
	}
}

func (a *app) list(ctx context.Context, s store.Store) error {
	var infos []store.Info
	for info, err := range s.List(ctx) {
		if err != nil {
			return fmt.Errorf("list %s: %w", s.Identity(), err)
		}
		infos = append(infos, info)
	}
	slices.SortFunc(infos, func(x, y store.Info) int { return strings.Compare(string(x.Hash), string(y.Hash)) })
	for _, info := range infos {
		if err := a.emit(listLine{FixtureHash: info.Hash, SizeBytes: info.Size, UpdatedAt: timestamp(info.UpdatedAt)}); err != nil {
			return err
		}
	}
	return nil
}

// timestamp formats t as RFC 3339 in UTC, with as many fractional digits as
// it has.
func timestamp(t time.Time) string {
	return t.UTC().Format(time.RFC3339Nano)
}
