package worker_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/replay"
	"github.com/pyrula/caseworker/store/memstore"
	"github.com/pyrula/caseworker/worker"
)

// TestMetricsExportedAtZero: a worker that has handled nothing already
// exports every labelled counter and histogram the alerts and the
// dashboard use, at 0, for every label value known in advance (so a new
// pod shows series, not "no data"): messages received, answered (type ×
// outcome), their duration and transient failures by type, runs by kind and
// end status with code "", case calls by provenance, store operations of
// its backend by op, bundle sizes by op, stream stats errors and consumer
// groups recreated by stream.
func TestMetricsExportedAtZero(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	if err := e.w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	w, err := worker.New(e.cfg, worker.Params{Client: e.client, Store: memstore.New(memstore.Options{}), Registry: e.reg, Registerer: reg, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	// The message and run series exist as soon as the worker is created.
	types := []string{string(messages.SaveCase), string(messages.RunCase), string(messages.DeleteCaseBundle), string(messages.StartRun), string(messages.RunSuite), "unknown"}
	want := func(name string, labels ...string) {
		t.Helper()
		v, found := value(t, reg, name, labels...)
		if !found {
			t.Errorf("%s%v: no series", name, labels)
		} else if v != 0 {
			t.Errorf("%s%v = %v, want 0", name, labels, v)
		}
	}
	check := func() {
		t.Helper()
		for _, typ := range types {
			want("pyrula_worker_messages_received_total", "type", typ)
			for _, out := range []messages.ReplyStatus{messages.StatusOK, messages.StatusRefused, messages.StatusError} {
				want("pyrula_worker_messages_total", "type", typ, "outcome", string(out))
			}
			want("pyrula_worker_message_duration_seconds", "type", typ)
			want("pyrula_worker_transient_failures_total", "type", typ)
		}
		want("pyrula_worker_transient_failures_total", "type", "run")
		for _, v := range []string{"pass", "fail", "error", "skipped"} {
			want("pyrula_worker_suite_children_total", "verdict", v)
		}
		for _, kind := range []string{"live", "case", "suite"} {
			for _, st := range []host.Status{host.StatusComplete, host.StatusError, host.StatusCancelled, host.StatusSuspended} {
				want("pyrula_worker_runs_total", "kind", kind, "status", string(st), "code", "")
			}
		}
		for _, p := range []string{replay.ProvReused, replay.ProvSimulated, replay.ProvLive, replay.ProvChanged, "prefix"} {
			want("pyrula_worker_case_calls_total", "provenance", p)
		}
		for _, op := range []string{"put", "open"} {
			want("pyrula_worker_bundle_bytes", "op", op)
		}
		for _, s := range []string{"case", "runs"} {
			want("pyrula_worker_stream_stats_errors_total", "stream", s)
			want("pyrula_worker_group_recreated_total", "stream", s)
		}
		for _, c := range []string{"pyrula_worker_dead_letters_total", "pyrula_worker_redeliveries_total", "pyrula_worker_duplicates_total", "pyrula_worker_live_cost_usd_total"} {
			want(c)
		}
	}
	check()
	if t.Failed() {
		return
	}
	// The store's series come with the store, at Start; nothing is read
	// from the stream before the scrape below.
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	check()
	for _, op := range []string{"put", "open", "stat", "list", "delete", "delete_before"} {
		want("pyrula_worker_store_operation_duration_seconds", "backend", "memory", "op", op)
		want("pyrula_worker_store_errors_total", "backend", "memory", "op", op)
	}
}
