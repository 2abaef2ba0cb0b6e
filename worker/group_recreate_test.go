package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pyrula/caseworker/internal/testwait"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store/memstore"
	"github.com/pyrula/caseworker/worker"
)

// withObservedLogs replaces e's worker by one whose metrics go to a
// registry and whose logs also go to an observer, both read by the test.
func (e *env) withObservedLogs() (*prometheus.Registry, *observer.ObservedLogs) {
	e.t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	log := zap.New(zapcore.NewTee(zaptest.NewLogger(e.t).Core(), core))
	reg := prometheus.NewRegistry()
	e.restart(worker.Params{Store: memstore.New(memstore.Options{}), Registerer: reg, Logger: log})
	return reg, logs
}

// recreations returns the at_id of each "consumer group missing" line
// logged for stream.
func recreations(logs *observer.ObservedLogs, stream string) []string {
	var out []string
	for _, l := range logs.All() {
		m := l.ContextMap()
		if m["stream"] == stream && m["at_id"] != nil && l.Level == zap.WarnLevel {
			out = append(out, m["at_id"].(string))
		}
	}
	return out
}

// lastEntryID is the id of the newest entry of stream.
func (e *env) lastEntryID(stream string) string {
	e.t.Helper()
	entries, err := e.client.Do(context.Background(), e.client.B().Xrevrange().Key(stream).End("+").Start("-").Count(1).Build()).AsXRange()
	if err != nil || len(entries) != 1 {
		e.t.Fatalf("XREVRANGE %s: %v %v", stream, entries, err)
	}
	return entries[0].ID
}

// TestGroupRecreatedAfterDeletion: the consumer group of the message
// stream or of the runs stream is destroyed (XGROUP DESTROY), or the stream
// deleted (DEL), under a running worker. The worker creates what is missing
// at once, after the last entry it knows delivered: the entries added since
// are handled, the ones acked before are not delivered again. It says so in
// one log line and in pyrula_worker_group_recreated_total{stream}.
func TestGroupRecreatedAfterDeletion(t *testing.T) {
	t.Parallel()
	type deletion struct {
		name string
		del  func(e *env, stream, group string) error
	}
	deletions := []deletion{
		{"group destroyed", func(e *env, stream, group string) error {
			return e.client.Do(context.Background(), e.client.B().XgroupDestroy().Key(stream).Group(group).Build()).Error()
		}},
		{"stream deleted", func(e *env, stream, _ string) error {
			return e.client.Do(context.Background(), e.client.B().Del().Key(stream).Build()).Error()
		}},
	}
	// The stream metrics do not scrape the embedded server (its client
	// takes it for a cluster): the counter is read on the others.
	onServers := func(t *testing.T, scenario func(t *testing.T, e *env, scrape bool)) {
		for _, b := range backends {
			t.Run(b.name, func(t *testing.T) {
				t.Parallel()
				scenario(t, setupWith(t, b.connect(t), nil, nil), b.name != "embedded")
			})
		}
	}
	for _, d := range deletions {
		t.Run("messages/"+d.name, func(t *testing.T) {
			onServers(t, func(t *testing.T, e *env, scrape bool) {
				reg, logs := e.withObservedLogs()
				for i := range 3 {
					e.send("before-"+string(rune('a'+i)), "delete_case_bundle", map[string]any{"fixture_hash": hashOf(i)})
				}
				e.waitReplies(3)
				lastID := e.lastEntryID(e.cfg.CaseStream)
				if err := d.del(e, e.cfg.CaseStream, e.cfg.ConsumerGroup); err != nil {
					t.Fatal(err)
				}
				for i := range 3 {
					e.send("after-"+string(rune('a'+i)), "delete_case_bundle", map[string]any{"fixture_hash": hashOf(i)})
				}
				got := e.waitReplies(6)
				// Nothing acked before is delivered again: the count stays.
				time.Sleep(time.Second)
				if n := len(e.replies()); n != 6 {
					t.Fatalf("%d replies after the group was recreated, want 6: acked entries were delivered again", n)
				}
				seen := map[string]bool{}
				for _, r := range got {
					wantReply(t, r, messages.StatusOK, "")
					if seen[r.MessageID] {
						t.Errorf("message %s answered twice", r.MessageID)
					}
					seen[r.MessageID] = true
				}
				if at := recreations(logs, e.cfg.CaseStream); len(at) != 1 || at[0] != lastID {
					t.Errorf("recreation log lines at ids %v, want one at %s (the last entry delivered)", at, lastID)
				}
				if scrape {
					wantValue(t, reg, 1, "pyrula_worker_group_recreated_total", "stream", "case")
					wantValue(t, reg, 0, "pyrula_worker_group_recreated_total", "stream", "runs")
				}
				if !e.w.Ready() {
					t.Error("the worker is not ready after recreating the group")
				}
			})
		})
		t.Run("runs/"+d.name, func(t *testing.T) {
			onServers(t, func(t *testing.T, e *env, scrape bool) {
				reg, logs := e.withObservedLogs()
				runs := e.cfg.Namespace + ":runs"
				e.send("run-before", "start_run", map[string]any{"target_name": "checkout", "inputs": map[string]any{"delay_ms": 0}})
				first := runResult(t, e.waitReplies(1)[0]).RunID
				if kind, _ := last(t, e.waitRun(first, 20*time.Second)); kind != "run:complete" {
					t.Fatalf("the first run ended %s", kind)
				}
				testwait.Eventually(t, 10*time.Second, "the first runs entry acked", func() bool {
					res, err := e.client.Do(context.Background(), e.client.B().Xpending().Key(runs).Group("run-workers").Build()).ToArray()
					n, _ := res[0].AsInt64()
					return err == nil && n == 0
				})
				lastID := e.lastEntryID(runs)
				if err := d.del(e, runs, "run-workers"); err != nil {
					t.Fatal(err)
				}
				e.send("run-after", "start_run", map[string]any{"target_name": "checkout", "inputs": map[string]any{"delay_ms": 0}})
				second := runResult(t, e.waitReplies(2)[1]).RunID
				if kind, _ := last(t, e.waitRun(second, 20*time.Second)); kind != "run:complete" {
					t.Fatalf("the run submitted after the deletion ended %s", kind)
				}
				if at := recreations(logs, runs); len(at) != 1 || at[0] != lastID {
					t.Errorf("recreation log lines at ids %v, want one at %s (the last runs entry delivered)", at, lastID)
				}
				if scrape {
					wantValue(t, reg, 1, "pyrula_worker_group_recreated_total", "stream", "runs")
					wantValue(t, reg, 0, "pyrula_worker_group_recreated_total", "stream", "case")
				}
			})
		})
	}
}
