package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/resolve"
)

// caseCmd is `case`, the group of saved-case commands.
func (a *app) caseCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "case",
		Short: "Save, run, test, diff, compare, import, export, list, show, delete and garbage-collect saved cases",
		Long: `Commands on saved cases in a fixture store: save captures a recorded run
as a case, run runs one (from the store or from a bundle file), test
replays a suite of them (for CI), diff compares two, compare runs one on
several models or prompts, and import, export, list, show, delete and gc
manage the stored bundles.

The store is --fixture-store, else PYRULA_FIXTURE_STORE, else
PYRULA_POSTGRES_DSN; with none set every command that uses it refuses with
no_fixture_store (case run of a bundle file needs none). A store is
"memory:", "file:///abs/path" or a bare path (a directory, created if
missing), "postgres://…" or "s3://bucket/prefix".`,
		Args: groupArgs,
		RunE: groupRun,
	}
	c.PersistentFlags().StringVar(&a.fixtureStore, "fixture-store", "",
		"fixture store URL (default $PYRULA_FIXTURE_STORE, then $PYRULA_POSTGRES_DSN)")
	c.AddCommand(
		a.importCmd(),
		a.exportCmd(),
		a.listCmd(),
		a.showCmd(),
		a.deleteCmd(),
		a.gcCmd(),
		a.saveCmd(),
		a.caseRunCmd(),
		a.caseTestCmd(),
		a.caseDiffCmd(),
		a.caseCompareCmd(),
	)
	return c
}

// withStore resolves and opens the fixture store, calls f with it and closes
// it. No store configured is the no_fixture_store refusal.
func (a *app) withStore(ctx context.Context, f func(store.Store) error) (err error) {
	u, err := resolve.URL(a.fixtureStore, a.getenv)
	if err != nil {
		return err
	}
	s, err := resolve.Open(ctx, u)
	if err != nil {
		return fmt.Errorf("open fixture store: %w", err)
	}
	defer func() {
		if cerr := s.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close fixture store %s: %w", s.Identity(), cerr)
		}
	}()
	return f(s)
}

// parseHash checks a fixture hash argument (invalid_fixture_hash).
func parseHash(s string) (bundle.Hash, error) {
	h, err := bundle.ParseHash(s)
	if err != nil {
		if _, ok := messages.CodeOf(err); !ok {
			err = messages.Errorf(messages.InvalidFixtureHash, "%w", err)
		}
		return "", err
	}
	return h, nil
}
