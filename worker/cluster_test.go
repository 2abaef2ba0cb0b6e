package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap/zaptest"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/internal/testwait"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
	"github.com/pyrula/caseworker/store/memstore"
	"github.com/pyrula/caseworker/worker"
	"github.com/pyrula/caseworker/worker/client"
)

// clusterNodes maps each slot range of the cluster to its master, as the
// cluster itself answers CLUSTER SLOTS.
type clusterNodes []struct {
	from, to int64
	addr     string
}

func slotsOf(t *testing.T, c valkey.Client) clusterNodes {
	t.Helper()
	rows, err := c.Do(context.Background(), c.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		t.Fatalf("CLUSTER SLOTS: %v", err)
	}
	var out clusterNodes
	for _, r := range rows {
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			t.Fatalf("CLUSTER SLOTS row %v: %v", r, err)
		}
		from, _ := f[0].AsInt64()
		to, _ := f[1].AsInt64()
		master, _ := f[2].ToArray()
		host, _ := master[0].ToString()
		port, _ := master[1].AsInt64()
		out = append(out, struct {
			from, to int64
			addr     string
		}{from, to, fmt.Sprintf("%s:%d", host, port)})
	}
	return out
}

// nodeOf is the master that holds key, by the cluster's own CLUSTER KEYSLOT.
func (n clusterNodes) nodeOf(t *testing.T, c valkey.Client, key string) string {
	t.Helper()
	slot, err := c.Do(context.Background(), c.B().ClusterKeyslot().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT %s: %v", key, err)
	}
	for _, r := range n {
		if slot >= r.from && slot <= r.to {
			return r.addr
		}
	}
	t.Fatalf("slot %d of %s is served by no node", slot, key)
	return ""
}

// TestClusterWorkerAcrossNodes runs a worker on the Valkey Cluster in a
// namespace chosen so that its case stream, reply stream and runs stream
// are held by three different masters: every message type is answered,
// a resent message gets its recorded reply, runs submitted on one node
// execute with their journal on others, each run's keys share one node,
// and maintenance trims both streams there.
func TestClusterWorkerAcrossNodes(t *testing.T) {
	t.Parallel()
	c := testenv.ValkeyClusterClient(t)
	slots := slotsOf(t, c)
	var ns string
	for i := 0; ; i++ {
		if i == 1000 {
			t.Fatal("no namespace in 1000 puts its three streams on three masters")
		}
		ns = testenv.UniqueName(t, "wk")
		a, b, r := slots.nodeOf(t, c, ns+":case-messages"), slots.nodeOf(t, c, ns+":case-replies"), slots.nodeOf(t, c, ns+":runs")
		if a != b && b != r && a != r {
			break
		}
	}
	st := memstore.New(memstore.Options{})
	e := setupWith(t, c, st, func(cfg *worker.Config) {
		cfg.Namespace = ns
		cfg.MaintenanceInterval = 100 * time.Millisecond
	})
	hash := saveRecorded(t, st)
	src := e.record("checkout")
	start := map[string]any{"target_name": "checkout", "inputs": map[string]any{"qty": 2}}

	e.send("x-start", "start_run", start)
	started := runResult(t, e.waitReplies(1)[0])
	e.send("x-save", "save_case", map[string]any{"target_name": "checkout", "run_id": src, "fork_after_seq": 4})
	saved := e.waitReplies(2)[1]
	wantReply(t, saved, messages.StatusOK, "")
	var res messages.SaveCaseResult
	if err := json.Unmarshal(saved.Result, &res); err != nil || len(res.FixtureHash) != 64 {
		t.Fatalf("save_case result %s: %v", saved.Result, err)
	}
	e.send("x-case", "run_case", map[string]any{"target_name": "checkout",
		"source": map[string]any{"bundle": map[string]any{"fixture_hash": hash}}, "options": map[string]any{"replay_only": true}})
	cased := runResult(t, e.waitReplies(3)[2])
	for _, run := range []messages.RunResult{started, cased} {
		if kind, code := last(t, e.waitRun(run.RunID, 20*time.Second)); kind != runevent.RunComplete {
			t.Errorf("run %s ended %s %s", run.RunID, kind, code)
		}
	}
	e.send("x-delete", "delete_case_bundle", map[string]any{"fixture_hash": res.FixtureHash})
	deleted := e.waitReplies(4)[3]
	wantReply(t, deleted, messages.StatusOK, "")
	if string(deleted.Result) != `{"deleted":true}` {
		t.Errorf("delete_case_bundle result %s, want deleted", deleted.Result)
	}
	e.send("x-start", "start_run", start) // a resend: its recorded reply, no second run
	again := e.waitReplies(5)[4]
	if again.MessageID != "x-start" || string(again.Result) != string(e.replies()[0].Result) {
		t.Errorf("resent start_run answered %+v, want the first reply again", again)
	}

	for _, run := range []messages.RunResult{started, cased} {
		m, ev, rs := valkeyjournal.Keys(ns, run.RunID)
		if a, b, r := slots.nodeOf(t, c, m), slots.nodeOf(t, c, ev), slots.nodeOf(t, c, rs); a != b || b != r {
			t.Errorf("the keys of run %s are on %s, %s and %s; want one node", run.RunID, a, b, r)
		}
		if run.Events != ev {
			t.Errorf("reply names events %s, want %s", run.Events, ev)
		}
	}
	// Two runs submitted, both acked; maintenance trims each stream down
	// to its last delivered entry.
	testwait.Eventually(t, 10*time.Second, "both streams trimmed to their last entry", func() bool {
		return e.runsPending() == 0 && e.pending() == 0 &&
			len(e.streamIDs(ns+":runs")) == 1 && len(e.streamIDs(e.cfg.CaseStream)) == 1
	})
}

// TestClusterWorkerFromURL: a worker given only PYRULA_VALKEY_URL in the
// cluster form (every master, as the URL's host and addr parameters)
// connects to the cluster itself and answers.
func TestClusterWorkerFromURL(t *testing.T) {
	t.Parallel()
	c := testenv.ValkeyClusterClient(t)
	ns := testenv.UniqueName(t, "wk")
	t.Cleanup(func() {
		if err := testenv.DeleteNamespace(context.Background(), c, ns); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	cfg := worker.Config{ValkeyURL: testenv.ValkeyClusterURL(t), Namespace: ns, ConsumerName: "c1"}
	w, err := worker.New(cfg, worker.Params{Store: memstore.New(memstore.Options{}), Registerer: prometheus.NewRegistry(), Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	cl, err := client.New(c, client.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, r, err := cl.Request(ctx, client.Message{MessageID: "u1", Type: messages.DeleteCaseBundle, Body: json.RawMessage(`{"fixture_hash":"` + zeroHash + `"}`)})
	if err != nil {
		t.Fatal(err)
	}
	wantReply(t, r, messages.StatusOK, "")
}
