package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/store"
)

// deleteOutput is what `case delete` prints.
type deleteOutput struct {
	FixtureHash bundle.Hash `json:"fixture_hash"`
	Deleted     bool        `json:"deleted"`
}

// deleteCmd is `case delete HASH`.
func (a *app) deleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delete HASH",
		Short: "Delete a stored bundle",
		Long: `Deletes the bundle HASH from the fixture store. Prints
{"fixture_hash", "deleted"}; deleted is false when the bundle was not stored
(still exit 0: deleting is idempotent).

Refusals: no_fixture_store, invalid_fixture_hash.`,
		Args: exactArgs("HASH"),
		RunE: a.run(func(ctx context.Context, args []string) error {
			h, err := parseHash(args[0])
			if err != nil {
				return err
			}
			return a.withStore(ctx, func(s store.Store) error {
				deleted, err := s.Delete(ctx, h)
				if err != nil {
					return fmt.Errorf("delete %s: %w", h, err)
				}
				return a.emit(deleteOutput{FixtureHash: h, Deleted: deleted})
			})
		}),
	}
}
