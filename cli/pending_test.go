package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/internal/testwait"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
	"github.com/pyrula/caseworker/runevent"
	"github.com/pyrula/caseworker/store/memstore"
	"github.com/pyrula/caseworker/worker"
	"github.com/pyrula/caseworker/worker/client"
)

// pendingSecret is in the bodies and inputs of the test's messages and
// runs: pending must never print it.
const pendingSecret = "s3cr3t-4242"

// pendingLine is a line of pending.
type pendingLine struct {
	EntryID    string   `json:"entry_id"`
	Consumer   string   `json:"consumer"`
	Idle       *float64 `json:"idle"`
	IdleSince  string   `json:"idle_since"`
	Deliveries int64    `json:"deliveries"`
	MessageID  string   `json:"message_id"`
	Type       string   `json:"type"`
	RunID      string   `json:"run_id"`
	Status     string   `json:"status"`
	LastSeq    *int64   `json:"last_seq"`
	Lease      string   `json:"lease"`
	LeaseOwner string   `json:"lease_owner"`
	LeaseUntil string   `json:"lease_until"`
	Problem    string   `json:"problem"`
}

// pendingEnv is a namespace of its own on the Valkey at url, whose streams
// the test fills as workers would leave them.
type pendingEnv struct {
	t   *testing.T
	c   valkey.Client
	ns  string
	env []string
}

func newPendingEnv(t *testing.T, url string) *pendingEnv {
	t.Helper()
	ns := testenv.UniqueName(t, "pend")
	c := testenv.ValkeyClientAt(t, url, ns)
	return &pendingEnv{t: t, c: c, ns: ns, env: []string{"PYRULA_VALKEY_URL=" + url, "PYRULA_NAMESPACE=" + ns}}
}

// pending runs `pyrula pending ARGS…` with the environment and env.
func (e *pendingEnv) pending(env []string, args ...string) result {
	e.t.Helper()
	r := run(e.t, invocation{args: append([]string{"pending"}, args...), env: append(append([]string{}, e.env...), env...)})
	if strings.Contains(r.stdout, pendingSecret) || strings.Contains(r.stderr, pendingSecret) {
		e.t.Fatalf("pending printed a body or inputs\n%s", r)
	}
	return r
}

func (e *pendingEnv) do(cmd valkey.Completed) valkey.ValkeyResult {
	e.t.Helper()
	r := e.c.Do(context.Background(), cmd)
	if err := r.Error(); err != nil {
		e.t.Fatal(err)
	}
	return r
}

// add adds an entry with one field to stream and returns its id.
func (e *pendingEnv) add(stream, field, value string) string {
	e.t.Helper()
	id, err := e.do(e.c.B().Xadd().Key(stream).Id("*").FieldValue().FieldValue(field, value).Build()).ToString()
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

// message adds a message of id and type, whose body holds the secret.
func (e *pendingEnv) message(stream, id, typ string) string {
	e.t.Helper()
	return e.add(stream, "message", `{"message_id":"`+id+`","type":"`+typ+`","body":{"inputs":{"card":"`+pendingSecret+`"}}}`)
}

// read delivers the next n entries of stream to consumer of group.
func (e *pendingEnv) read(stream, group, consumer string, n int64) {
	e.t.Helper()
	res, err := e.do(e.c.B().Xreadgroup().Group(group, consumer).Count(n).Streams().Key(stream).Id(">").Build()).AsXRead()
	if err != nil || int64(len(res[stream])) != n {
		e.t.Fatalf("read %d entries of %s (%v), want %d", len(res[stream]), stream, err, n)
	}
}

// claim makes entry id pending to consumer, idle for idle, delivered n times.
func (e *pendingEnv) claim(stream, group, consumer, id string, idle time.Duration, n int64) {
	e.t.Helper()
	e.do(e.c.B().Xclaim().Key(stream).Group(group).Consumer(consumer).MinIdleTime("0").Id(id).
		Idle(idle.Milliseconds()).Retrycount(n).Justid().Build())
}

// tableRows are a table's lines, each cut into its cells (which hold no
// spaces here).
func tableRows(t *testing.T, r result) [][]string {
	t.Helper()
	var rows [][]string
	for _, l := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		if l != strings.TrimRight(l, " ") {
			t.Fatalf("a table row ends with spaces\n%s", r)
		}
		rows = append(rows, strings.Fields(l))
	}
	return rows
}

// TestPending lists the message stream's and the runs stream's pending
// entries through the binary, as JSON lines and tables, with --min-idle
// and PYRULA_CONSUMER_GROUP, on Redis and on the cluster.
func TestPending(t *testing.T) {
	t.Parallel()
	t.Run("redis", func(t *testing.T) { t.Parallel(); pendingCLI(t, testenv.ValkeyURL(t)) })
	t.Run("cluster", func(t *testing.T) { t.Parallel(); pendingCLI(t, testenv.ValkeyClusterURL(t)) })
}

func pendingCLI(t *testing.T, url string) {
	e := newPendingEnv(t, url)
	ctx := context.Background()
	stream, runs := e.ns+":case-messages", e.ns+":runs"

	// Errors: no group yet (no worker started), bad flags.
	wantError(t, e.pending(nil), "no such consumer group case-workers on "+stream)
	wantError(t, e.pending(nil, "--runs"), "no such consumer group run-workers on "+runs)
	wantError(t, e.pending(nil, "--format", "yaml"), "want json or table")
	wantError(t, e.pending(nil, "--min-idle", "-1s"), "--min-idle must not be negative")
	wantError(t, e.pending(nil, "--min-idle", "soon"), "invalid argument")
	wantError(t, e.pending(nil, "x"), `unexpected argument "x"`)

	e.do(e.c.B().XgroupCreate().Key(stream).Group("case-workers").Id("0").Mkstream().Build())
	r := e.pending(nil)
	wantOK(t, r)
	if r.stdout != "" {
		t.Fatalf("pending of nothing\n%s", r)
	}
	r = e.pending(nil, "--format", "table")
	wantOK(t, r)
	if rows := tableRows(t, r); len(rows) != 2 || strings.Join(rows[1], " ") != "(no pending entry)" {
		t.Fatalf("table of nothing\n%s", r)
	}

	// m1 waits for its fourth delivery, pod-b holds m2, and garbled is not
	// a message; m3 was acked and m4 not delivered.
	m1 := e.message(stream, "m1", "run_case")
	m2 := e.message(stream, "m2", "save_case")
	garbled := e.add(stream, "message", "not json "+pendingSecret)
	m3 := e.message(stream, "m3", "delete_case_bundle")
	e.message(stream, "m4", "start_run")
	e.read(stream, "case-workers", "pod-b", 4)
	e.do(e.c.B().Xack().Key(stream).Group("case-workers").Id(m3).Build())
	e.claim(stream, "case-workers", "pod-a", m1, 2*time.Hour, 3)

	r = e.pending(nil)
	wantOK(t, r)
	lines := decodeLines[pendingLine](t, r)
	if len(lines) != 3 || lines[0].EntryID != m1 || lines[1].EntryID != m2 || lines[2].EntryID != garbled {
		t.Fatalf("want m1, m2 and garbled, oldest first\n%s", r)
	}
	l := lines[0]
	since, err := time.Parse(time.RFC3339Nano, l.IdleSince)
	if l.Consumer != "pod-a" || l.Deliveries != 3 || l.MessageID != "m1" || l.Type != "run_case" || l.Idle == nil ||
		*l.Idle < 7200 || *l.Idle > 7260 || err != nil || (time.Since(since)-2*time.Hour).Abs() > time.Minute || l.Problem != "" {
		t.Fatalf("m1 %+v\n%s", l, r)
	}
	if l := lines[1]; l.Consumer != "pod-b" || l.Deliveries != 1 || l.MessageID != "m2" || l.Type != "save_case" || l.Idle == nil || *l.Idle > 60 {
		t.Fatalf("m2 %+v\n%s", l, r)
	}
	if l := lines[2]; l.Consumer != "pod-b" || l.MessageID != "" || l.Problem != "its message is not a JSON envelope" {
		t.Fatalf("garbled %+v\n%s", l, r)
	}
	if strings.Contains(r.stdout, `"run_id"`) || strings.Contains(r.stdout, `"lease`) || !strings.Contains(r.stdout, `"idle":72`) {
		t.Fatalf("a message's line has a run's fields, or idle is not a number of seconds\n%s", r)
	}

	r = e.pending(nil, "--min-idle", "1h")
	wantOK(t, r)
	if lines := decodeLines[pendingLine](t, r); len(lines) != 1 || lines[0].EntryID != m1 {
		t.Fatalf("--min-idle 1h: want m1 only\n%s", r)
	}

	r = e.pending(nil, "--format", "table")
	wantOK(t, r)
	rows := tableRows(t, r)
	if len(rows) != 4 || strings.Join(rows[0], " ") != "ENTRY CONSUMER IDLE DELIVERIES MESSAGE TYPE PROBLEM" {
		t.Fatalf("table\n%s", r)
	}
	if row := rows[1]; len(row) != 7 || row[0] != m1 || row[1] != "pod-a" || !strings.HasPrefix(row[2], "2h0m") ||
		strings.Join(row[3:], " ") != "3 m1 run_case -" {
		t.Fatalf("table row of m1 %q\n%s", row, r)
	}
	if row := rows[3]; row[0] != garbled || row[1] != "pod-b" || strings.Join(row[3:], " ") != "1 - - its message is not a JSON envelope" {
		t.Fatalf("table row of garbled %q\n%s", row, r)
	}
	r = e.pending(nil, "--format", "table", "--min-idle", "3h")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "(no pending entry)") {
		t.Fatalf("table of nothing idle 3h\n%s", r)
	}

	// PYRULA_CONSUMER_GROUP names the group; PYRULA_CASE_STREAM the stream.
	e.do(e.c.B().XgroupCreate().Key(stream).Group("other").Id("$").Build())
	m5 := e.message(stream, "m5", "start_run")
	e.read(stream, "other", "pod-c", 1)
	r = e.pending([]string{"PYRULA_CONSUMER_GROUP=other"})
	wantOK(t, r)
	if lines := decodeLines[pendingLine](t, r); len(lines) != 1 || lines[0].EntryID != m5 || lines[0].Consumer != "pod-c" {
		t.Fatalf("PYRULA_CONSUMER_GROUP=other: want m5 only\n%s", r)
	}
	wantError(t, e.pending([]string{"PYRULA_CASE_STREAM=" + e.ns + ":elsewhere"}), "no such consumer group case-workers on "+e.ns+":elsewhere")

	// Runs: one held by a live worker, one whose worker died (its lease
	// lapsed), one finished, one gone from the journal.
	j, err := valkeyjournal.New(e.c, valkeyjournal.Options{Namespace: e.ns})
	if err != nil {
		t.Fatal(err)
	}
	create := func(runID, owner string, ttl time.Duration) journal.Lease {
		lease, err := j.Create(ctx, journal.CreateParams{RunID: runID, TargetName: "checkout", Owner: owner, LeaseTTL: ttl,
			Inputs: json.RawMessage(`{"card":"` + pendingSecret + `"}`)})
		if err != nil {
			t.Fatal(err)
		}
		return lease
	}
	create("run_live", "pod-a/1a2b3c", time.Hour)
	create("run_dead", "pod-b/4d5e6f", 50*time.Millisecond)
	done := create("run_done", "pod-a/1a2b3c", time.Hour)
	ev, err := journal.NewEvent(runevent.RunError, map[string]any{"code": "runtime_error", "message": "failed"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Finish(ctx, done, journal.Batch{Events: []journal.Event{ev}}); err != nil {
		t.Fatal(err)
	}
	e.do(e.c.B().XgroupCreate().Key(runs).Group("run-workers").Id("0").Mkstream().Build())
	entries := map[string]string{}
	for _, id := range []string{"run_live", "run_dead", "run_done", "run_gone"} {
		entries[id] = e.add(runs, "run_id", id)
	}
	e.read(runs, "run-workers", "pod-a", 4)
	e.claim(runs, "run-workers", "pod-b", entries["run_dead"], 10*time.Minute, 2)
	time.Sleep(100 * time.Millisecond) // run_dead's lease lapses

	r = e.pending(nil, "--runs")
	wantOK(t, r)
	lines = decodeLines[pendingLine](t, r)
	if len(lines) != 4 || lines[0].RunID != "run_live" || lines[1].RunID != "run_dead" || lines[2].RunID != "run_done" || lines[3].RunID != "run_gone" {
		t.Fatalf("want the four runs, oldest first\n%s", r)
	}
	live, dead := lines[0], lines[1]
	until, err := time.Parse(time.RFC3339Nano, live.LeaseUntil)
	if live.Consumer != "pod-a" || live.Status != "running" || live.Lease != "held" || live.LeaseOwner != "pod-a/1a2b3c" || err != nil ||
		(time.Until(until)-time.Hour).Abs() > time.Minute || live.LastSeq == nil || *live.LastSeq != 1 || live.EntryID != entries["run_live"] {
		t.Fatalf("run_live %+v\n%s", live, r)
	}
	until, err = time.Parse(time.RFC3339Nano, dead.LeaseUntil)
	if dead.Consumer != "pod-b" || dead.Deliveries != 2 || dead.Status != "running" || dead.Lease != "lapsed" || dead.LeaseOwner != "pod-b/4d5e6f" ||
		err != nil || !until.Before(time.Now()) || dead.Idle == nil || *dead.Idle < 600 {
		t.Fatalf("run_dead %+v\n%s", dead, r)
	}
	if l := lines[2]; l.Status != "error" || l.Lease != "none" || l.LeaseOwner != "" || l.LeaseUntil != "" || l.LastSeq == nil || *l.LastSeq != 2 {
		t.Fatalf("run_done %+v\n%s", l, r)
	}
	if l := lines[3]; l.Status != "" || l.Lease != "" || !strings.Contains(l.Problem, "neither Valkey nor the archive") {
		t.Fatalf("run_gone %+v\n%s", l, r)
	}
	if strings.Contains(r.stdout, `"message_id"`) {
		t.Fatalf("a run's line has a message id\n%s", r)
	}
	r = e.pending(nil, "--runs", "--min-idle", "5m")
	wantOK(t, r)
	if lines := decodeLines[pendingLine](t, r); len(lines) != 1 || lines[0].RunID != "run_dead" {
		t.Fatalf("--runs --min-idle 5m: want run_dead only\n%s", r)
	}

	r = e.pending(nil, "--runs", "--format", "table")
	wantOK(t, r)
	rows = tableRows(t, r)
	if len(rows) != 5 || strings.Join(rows[0], " ") != "ENTRY CONSUMER IDLE DELIVERIES RUN STATUS LAST_SEQ LEASE OWNER UNTIL PROBLEM" {
		t.Fatalf("runs table\n%s", r)
	}
	if row := rows[1]; len(row) != 11 || row[0] != live.EntryID || strings.Join(row[3:9], " ") != "1 run_live running 1 held pod-a/1a2b3c" || row[10] != "-" {
		t.Fatalf("runs table row of run_live %q\n%s", row, r)
	}
	if row := rows[2]; len(row) != 11 || strings.Join(row[3:9], " ") != "2 run_dead running 1 lapsed pod-b/4d5e6f" || !strings.HasPrefix(row[2], "10m") {
		t.Fatalf("runs table row of run_dead %q\n%s", row, r)
	}
	if row := rows[3]; strings.Join(row[3:], " ") != "1 run_done error 2 none - - -" {
		t.Fatalf("runs table row of run_done %q\n%s", row, r)
	}
	if row := rows[4]; strings.Join(row[3:9], " ") != "1 run_gone - - - -" || !strings.HasSuffix(r.stdout, "the run is in neither Valkey nor the archive\n") {
		t.Fatalf("runs table row of run_gone %q\n%s", row, r)
	}
}

// TestPendingWorker lists what a real worker leaves pending: a message
// that failed transiently and waits for its retry, pending to the worker
// in the worker's default group; the runs stream's group is the worker's
// too (nothing pending there).
func TestPendingWorker(t *testing.T) {
	t.Parallel()
	t.Run("redis", func(t *testing.T) { t.Parallel(); pendingWorker(t, testenv.ValkeyURL(t)) })
	t.Run("cluster", func(t *testing.T) { t.Parallel(); pendingWorker(t, testenv.ValkeyClusterURL(t)) })
}

func pendingWorker(t *testing.T, url string) {
	if client.DefaultConsumerGroup != worker.DefaultConsumerGroup {
		t.Fatalf("client.DefaultConsumerGroup %q, the worker's %q", client.DefaultConsumerGroup, worker.DefaultConsumerGroup)
	}
	st := &outageStore{Store: memstore.New(memstore.Options{})}
	st.down.Store(true)
	e := startWorkerAt(t, url, st, func(c *worker.Config) { c.ClaimIdle = time.Hour })
	r := e.run("delete_case_bundle", "--body", `{"fixture_hash":"`+zeroHash+`"}`, "--message-id", "stuck-1")
	wantOK(t, r)
	pending := func(args ...string) result {
		return run(t, invocation{args: append([]string{"pending"}, args...), env: e.env})
	}
	var lines []pendingLine
	testwait.Eventually(t, 30*time.Second, "stuck-1 pending after its failed delivery", func() bool {
		r = pending()
		if r.code != 0 {
			t.Fatalf("pending\n%s", r)
		}
		lines = decodeLines[pendingLine](t, r)
		return len(lines) == 1
	})
	if l := lines[0]; l.MessageID != "stuck-1" || l.Type != "delete_case_bundle" || l.Consumer != "enqueue-test" || l.Deliveries != 1 || l.Problem != "" {
		t.Fatalf("stuck-1 %+v\n%s", l, r)
	}
	r = pending("--runs")
	wantOK(t, r)
	if r.stdout != "" {
		t.Fatalf("pending runs of an idle executor\n%s", r)
	}
}
