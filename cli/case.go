package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"

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
		Short: "Save, run, import, export, list, show, delete and garbage-collect saved cases",
		Long: `Commands on saved cases in a fixture store: save captures a recorded run
as a case, run runs one (from the store or from a bundle file), and import,
export, list, show, delete and gc manage the stored bundles.

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

// readVerified reads the bundle named h from s, verifying it, and returns it
// in canonical form. A verification failure (bundle_corrupt) wins over any
// other error that reading the bytes before the failure caused, so damaged
// bytes are always reported as bundle_corrupt.
func readVerified(ctx context.Context, s store.Store, h bundle.Hash) (*bundle.Canonical, error) {
	rc, err := store.Get(ctx, s, h)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", h, err)
	}
	c, readErr := bundle.Read(rc, bundle.Options{})
	// Verification ends at the end of the stream: read it to the end even
	// when Read stopped early, and let its verdict win.
	_, drainErr := io.Copy(io.Discard, rc)
	closeErr := rc.Close()
	if err := cmp.Or(drainErr, closeErr); err != nil {
		return nil, fmt.Errorf("read %s: %w", h, err)
	}
	if readErr != nil {
		return nil, fmt.Errorf("read %s: %w", h, readErr)
	}
	if c.Hash() != h {
		return nil, fmt.Errorf("read %s: %w", h, messages.Errorf(messages.BundleCorrupt,
			"stored bundle %s reads back as %s", h, c.Hash()))
	}
	return c, nil
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
