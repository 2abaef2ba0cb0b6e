package cli_test

import (
	"fmt"
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/store/memstore"
)

// TestCluster drives the binary against the Valkey Cluster, with
// PYRULA_VALKEY_URL naming its nodes: `run` records a live run, `events`
// reads it, `case save` captures it, and `enqueue` sends messages to a
// worker on the same cluster and follows a what-if run of that journal run
// to its end.
func TestCluster(t *testing.T) {
	t.Parallel()
	url := testenv.ValkeyClusterURL(t)
	w := startWorkerAt(t, url, memstore.New(memstore.Options{}), nil)
	if w.c.Mode() != valkey.ClientModeCluster {
		t.Fatalf("%s is not a cluster", testenv.EnvValkeyClusterURL)
	}
	e := &journalEnv{fixture: setup(t), ns: w.ns, env: w.env}

	co := e.record("checkout")
	r := e.run("events", co.RunID)
	wantOK(t, r)
	events := decodeLines[event](t, r)
	if int64(len(events)) != co.LastSeq || events[0].Kind != "run:submitted" || events[len(events)-1].Kind != "run:complete" {
		t.Fatalf("events: %d, last_seq %d\n%s", len(events), co.LastSeq, r)
	}
	r = e.run("case", "save", "checkout", co.RunID, "--fork-after-seq", fmt.Sprint(co.LastSeq))
	wantOK(t, r)
	var saved saveOut
	decodeOne(t, r, &saved)
	if len(saved.FixtureHash) != 64 || !saved.ManifestSummary.Capture.Complete {
		t.Fatalf("case save: %+v", saved)
	}

	r = w.run("start_run", "--body", `{"target_name":"checkout","inputs":{"qty":3}}`, "--follow", "--timeout", "30s")
	wantOK(t, r)
	lines := decodeLines[map[string]any](t, r)
	if lines[0]["status"] != "ok" || lines[len(lines)-1]["kind"] != "run:complete" {
		t.Fatalf("start_run: want an ok reply, then events to run:complete\n%s", r)
	}
	body := fmt.Sprintf(`{"target_name":"checkout","source":{"journal":{"run_id":%q,"fork_after_seq":%d}},"options":{"replay_only":true}}`, co.RunID, co.LastSeq)
	r = w.run("run_case", "--body", body, "--follow", "--timeout", "30s")
	wantOK(t, r)
	lines = decodeLines[map[string]any](t, r)
	if lines[0]["status"] != "ok" || lines[len(lines)-1]["kind"] != "run:complete" {
		t.Fatalf("run_case from the journal: want an ok reply, then events to run:complete\n%s", r)
	}
	r = w.run("delete_case_bundle", "--body", `{"fixture_hash":"`+zeroHash+`"}`, "--wait", "--message-id", "c1", "--timeout", "20s")
	wantOK(t, r)
	r2 := w.run("delete_case_bundle", "--body", `{"fixture_hash":"`+zeroHash+`"}`, "--wait", "--message-id", "c1", "--timeout", "20s")
	wantOK(t, r2)
	if r2.stdout != r.stdout {
		t.Errorf("resend printed %s, want %s", r2.stdout, r.stdout)
	}
}
