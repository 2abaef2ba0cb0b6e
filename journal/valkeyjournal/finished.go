package valkeyjournal

import (
	"context"
	"fmt"
	"strings"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/internal/wire"
)

var _ journal.Lister = (*Journal)(nil)

// Finished implements journal.Lister: the finished runs of q's target whose
// keys are still in Valkey (found with SCAN on every node, so on a Valkey
// Cluster too: the cost grows with the namespace's keys), with the runs of
// the archive when there is one.
func (j *Journal) Finished(ctx context.Context, q journal.FinishedQuery) ([]journal.RunRef, error) {
	prefix := j.opts.Namespace + ":{"
	var metaKeys []string
	seen := map[string]bool{}
	for addr, node := range j.c.Nodes() {
		var cursor uint64
		for {
			se, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(prefix+"*}:meta").Count(1000).Build()).AsScanEntry()
			if err != nil {
				return nil, j.wrap(ctx, "list finished runs", "", fmt.Errorf("SCAN on %s: %w", addr, err))
			}
			for _, k := range se.Elements {
				if !seen[k] {
					seen[k] = true
					metaKeys = append(metaKeys, k)
				}
			}
			if cursor = se.Cursor; cursor == 0 {
				break
			}
		}
	}
	var live []journal.RunRef
	for start := 0; start < len(metaKeys); start += 500 {
		batch := metaKeys[start:min(start+500, len(metaKeys))]
		cmds := make(valkey.Commands, len(batch))
		for i, k := range batch {
			cmds[i] = j.c.B().Hmget().Key(k).Field("target_name", "status", "finished_at").Build()
		}
		for i, r := range j.c.DoMulti(ctx, cmds...) {
			f, err := r.ToArray()
			if err != nil || len(f) != 3 {
				return nil, j.wrap(ctx, "list finished runs", "", fmt.Errorf("HMGET %s: %v", batch[i], err))
			}
			target, _ := f[0].ToString()
			status, _ := f[1].ToString()
			finished, _ := f[2].ToString()
			m := journal.Meta{TargetName: target, Status: journal.Status(status)}
			if finished != "" {
				if m.FinishedAt, err = wire.ParseTime(finished); err != nil {
					return nil, fmt.Errorf("valkeyjournal: %s finished_at: %w", batch[i], err)
				}
			}
			if q.Matches(m) {
				runID := strings.TrimSuffix(strings.TrimPrefix(batch[i], prefix), "}:meta")
				live = append(live, journal.RunRef{RunID: runID, FinishedAt: m.FinishedAt})
			}
		}
	}
	var archived []journal.RunRef
	if al, ok := j.opts.Archive.(journal.ArchiveLister); ok {
		var err error
		if archived, err = al.Finished(ctx, j.opts.Namespace, q); err != nil {
			return nil, fmt.Errorf("valkeyjournal: list the archive's finished runs: %w", err)
		}
	}
	return journal.MergeRuns(live, archived), nil
}
