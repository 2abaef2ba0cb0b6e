package cli

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/capture"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/version"
)

// saveCmd is `case save TARGET RUN_ID [--fork-after-seq N] [--kind K]`.
func (a *app) saveCmd() *cobra.Command {
	var fork int64
	var kind string
	c := &cobra.Command{
		Use:   "save TARGET RUN_ID",
		Short: "Save a recorded run as a case, frozen at a fork point",
		Long: `Reads run RUN_ID of TARGET from Valkey (--namespace) or else the PostgreSQL
archive, captures it at --fork-after-seq (a run_seq; see pyrula events), and
writes the bundle to the fixture store. Without --fork-after-seq only the
inputs are kept. Prints {"fixture_hash", "fixture_store", "manifest_summary"};
saving the same run at the same fork twice gives the same hash and one copy.

--kind is detected from the run's model and tool calls; --kind workflow on a
run with model or tool calls, or --kind agent on a run with none, refuses
with kind_mismatch.

Refusals: no_fixture_store, capture_incomplete (a call in flight at the fork,
or a result missing; the message lists them), kind_mismatch,
bundle_too_large.`,
		Args: exactArgs("TARGET", "RUN_ID"),
	}
	c.RunE = a.run(func(ctx context.Context, args []string) error {
		p := capture.Params{Kind: bundle.Kind(kind), PyrulaVersion: version.Version}
		if kind != "" && p.Kind != bundle.KindWorkflow && p.Kind != bundle.KindAgent {
			return fmt.Errorf("case save: --kind %q is not workflow or agent", kind)
		}
		if c.Flags().Changed("fork-after-seq") {
			if fork < 0 {
				return fmt.Errorf("case save: --fork-after-seq %d is negative", fork)
			}
			p.ForkAfterSeq = &fork
		}
		return a.withStore(ctx, func(s store.Store) error {
			return a.withJournal(ctx, func(j journal.Journal) error {
				return a.save(ctx, s, j, a.targetName(args[0]), args[1], p)
			})
		})
	})
	c.Flags().Int64Var(&fork, "fork-after-seq", 0, "the run_seq to fork after (default: keep only the inputs)")
	c.Flags().StringVar(&kind, "kind", "", "workflow or agent (default: detected)")
	a.journalFlags(c)
	return c
}

func (a *app) save(ctx context.Context, s store.Store, j journal.Journal, target, runID string, p capture.Params) error {
	defer a.lowerGC()()
	c, err := capture.FromJournal(ctx, j, capture.FromJournalParams{
		Target: target, RunID: runID, Params: p, SpillDir: os.TempDir(),
		Registration: func(target string) (bundle.Registration, error) {
			info, ok := a.registry().Lookup(target)
			if !ok {
				return bundle.Registration{}, fmt.Errorf("no target %q is registered in this binary (see %s targets)", target, a.name())
			}
			return info.Registration, nil
		},
	})
	if err != nil {
		if _, coded := messages.CodeOf(err); coded {
			return err
		}
		return fmt.Errorf("case save: %w", err)
	}
	returnGarbage(c)
	if _, err := store.Save(ctx, s, c); err != nil {
		return fmt.Errorf("case save: %w", err)
	}
	return a.emit(importOutput{FixtureHash: c.Hash(), FixtureStore: s.Identity(), ManifestSummary: c.Summary()})
}
