package main_test

// Helpers of the process-level fault and load tests (faults_test.go,
// load_test.go): a private redis-server that can be killed and restarted,
// a fleet of worker processes, batched sends, and the checks every one of
// those tests makes: every message has its replies (identical ones), every
// run reached exactly one terminal event, and no call completed twice.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/internal/testwait"
)

// privateRedis is a redis-server of the test's own, on a free loopback port
// in a temporary directory, with an fsynced append-only file so that what
// it acknowledged survives a kill and a restart. Tests that kill or
// restart Redis use one: the shared server is never touched.
type privateRedis struct {
	t    *testing.T
	bin  string
	dir  string
	port string
	// extra are more redis-server arguments, after the defaults (a later
	// one wins).
	extra []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	out  strings.Builder
}

// startPrivateRedis starts a private redis-server and waits until it
// answers PING; it is killed at the end of the test.
func startPrivateRedis(t *testing.T) *privateRedis {
	t.Helper()
	r := newPrivateRedis(t, closedPort(t))
	r.start()
	return r
}

// newPrivateRedis is a private redis-server on port with the extra
// arguments, not started yet; it is killed at the end of the test.
func newPrivateRedis(t *testing.T, port string, extra ...string) *privateRedis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		bin = "/usr/bin/redis-server"
		if _, err := os.Stat(bin); err != nil {
			if testenv.Required() {
				t.Fatalf("redis-server not found: this test restarts a private Redis")
			}
			t.Skip("redis-server not found: skipping a test that restarts a private Redis")
		}
	}
	r := &privateRedis{t: t, bin: bin, dir: t.TempDir(), port: port, extra: extra}
	t.Cleanup(func() {
		r.kill()
		if t.Failed() {
			t.Logf("private redis-server output:\n%s", r.output())
		}
	})
	return r
}

// url is the private server's URL.
func (r *privateRedis) url() string { return "redis://127.0.0.1:" + r.port + "/0" }

func (r *privateRedis) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.String()
}

// start starts the server (again) on the same port and directory, and
// waits up to 20 s for it to answer PING (after loading its AOF).
func (r *privateRedis) start() {
	r.t.Helper()
	args := append([]string{"--port", r.port, "--bind", "127.0.0.1", "--dir", r.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--daemonize", "no", "--protected-mode", "yes", "--loglevel", "warning"}, r.extra...)
	cmd := exec.Command(r.bin, args...)
	pr, err := cmd.StdoutPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("start redis-server: %v", err)
	}
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			r.mu.Lock()
			r.out.WriteString(sc.Text() + "\n")
			r.mu.Unlock()
		}
		cmd.Wait()
		close(done)
	}()
	r.mu.Lock()
	r.cmd, r.done = cmd, done
	r.mu.Unlock()
	deadline := time.Now().Add(20 * time.Second)
	for !r.pong() {
		select {
		case <-done:
			r.t.Fatalf("redis-server exited at start:\n%s", r.output())
		default:
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("redis-server did not answer PING within 20s:\n%s", r.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pong reports whether the server answers PING with PONG (not LOADING).
func (r *privateRedis) pong() bool {
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+r.port, time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}

// kill SIGKILLs the server and waits for it to exit; a server already
// gone is fine.
func (r *privateRedis) kill() {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	<-done
}

// workerEnv is the environment of one worker process of a test: its
// Valkey, namespace and consumer name, a free HTTP port, then extra.
func workerEnv(url, ns, consumer string, extra ...string) []string {
	return append([]string{
		"PYRULA_VALKEY_URL=" + url,
		"PYRULA_NAMESPACE=" + ns,
		"PYRULA_CONSUMER_NAME=" + consumer,
		"PYRULA_HTTP_ADDR=127.0.0.1:0",
	}, extra...)
}

// startReady starts a worker process with env and waits until its /readyz
// answers 200.
func startReady(t *testing.T, env ...string) *daemon {
	t.Helper()
	return startReadyOf(t, workerBin, env...)
}

// startReadyOf is startReady of the binary bin.
func startReadyOf(t *testing.T, bin string, env ...string) *daemon {
	t.Helper()
	d := startDaemonOf(t, bin, env...)
	testwait.Eventually(t, 30*time.Second, "/readyz 200", func() bool {
		code, _, err := d.get("/readyz")
		return err == nil && code == http.StatusOK
	})
	return d
}

// sigkill kills the worker process at once and waits for it to be gone.
func (d *daemon) sigkill() {
	d.t.Helper()
	if err := d.cmd.Process.Kill(); err != nil {
		d.t.Fatalf("SIGKILL the worker: %v", err)
	}
	<-d.done
}

// inFlight reads pyrula_worker_messages_in_flight from the worker's
// /metrics (-1 when it cannot be read).
func (d *daemon) inFlight() int {
	_, body, err := d.get("/metrics")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, "pyrula_worker_messages_in_flight "); ok {
			var n float64
			if _, err := fmt.Sscan(v, &n); err == nil {
				return int(n)
			}
		}
	}
	return -1
}

// envelope is a message as the tests send it.
type envelope struct {
	MessageID string `json:"message_id"`
	Type      string `json:"type"`
	Body      any    `json:"body"`
}

// sendAll XADDs every message to stream in pipelined batches, in order.
func sendAll(t *testing.T, c valkey.Client, stream string, msgs []any) {
	t.Helper()
	const batch = 200
	for i := 0; i < len(msgs); i += batch {
		var cmds valkey.Commands
		for _, m := range msgs[i:min(i+batch, len(msgs))] {
			var raw string
			if s, ok := m.(string); ok {
				raw = s // sent as is: a malformed envelope
			} else {
				b, err := json.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				raw = string(b)
			}
			cmds = append(cmds, c.B().Xadd().Key(stream).Id("*").FieldValue().FieldValue("message", raw).Build())
		}
		for _, r := range c.DoMulti(context.Background(), cmds...) {
			if err := r.Error(); err != nil {
				t.Fatalf("XADD %s: %v", stream, err)
			}
		}
	}
}

// streamLen is XLEN of stream (0 when it cannot be read).
func streamLen(c valkey.Client, stream string) int64 {
	n, _ := c.Do(context.Background(), c.B().Xlen().Key(stream).Build()).AsInt64()
	return n
}

// waitLen waits until stream has at least n entries.
func waitLen(t *testing.T, c valkey.Client, stream string, n int64, within time.Duration) {
	t.Helper()
	testwait.Eventually(t, within, fmt.Sprintf("%d entries on %s (have %d)", n, stream, streamLen(c, stream)), func() bool {
		return streamLen(c, stream) >= n
	})
}

// replySet is every reply of a reply stream, raw, by message id.
type replySet map[string][]string

// allReplies reads the whole reply stream.
func allReplies(t *testing.T, c valkey.Client, stream string) replySet {
	t.Helper()
	out := replySet{}
	after := "-"
	for {
		entries, err := c.Do(context.Background(), c.B().Xrange().Key(stream).Start(after).End("+").Count(1000).Build()).AsXRange()
		if err != nil {
			t.Fatalf("XRANGE %s: %v", stream, err)
		}
		for _, e := range entries {
			raw := e.FieldValues["reply"]
			var r reply
			if err := json.Unmarshal([]byte(raw), &r); err != nil {
				t.Fatalf("reply entry %s: %v: %q", e.ID, err, raw)
			}
			out[r.MessageID] = append(out[r.MessageID], raw)
		}
		if len(entries) < 1000 {
			return out
		}
		after = "(" + entries[len(entries)-1].ID
	}
}

// check asserts that every message id of sent (with the number of times
// it was sent) has replies, all byte-identical; exactly as many as sends
// when exact, at least one otherwise (a crash may publish a reply again).
// No reply may answer a message that was not sent. It returns the one
// reply of each message id, decoded.
func (rs replySet) check(t *testing.T, sent map[string]int, exact bool) map[string]reply {
	t.Helper()
	out := map[string]reply{}
	for id, n := range sent {
		got := rs[id]
		switch {
		case len(got) == 0:
			t.Errorf("message %s: no reply", id)
			continue
		case exact && len(got) != n:
			t.Errorf("message %s sent %d time(s): %d replies", id, n, len(got))
		case len(got) < n:
			t.Errorf("message %s sent %d time(s): only %d replies", id, n, len(got))
		}
		for _, r := range got[1:] {
			if r != got[0] {
				t.Errorf("message %s: replies differ:\n%s\n%s", id, got[0], r)
			}
		}
		var r reply
		if err := json.Unmarshal([]byte(got[0]), &r); err != nil {
			t.Fatal(err)
		}
		out[id] = r
	}
	for id := range rs {
		if _, ok := sent[id]; !ok {
			t.Errorf("a reply to message %q, which was not sent: %v", id, rs[id])
		}
	}
	return out
}

// runResultID is the run id of an ok start_run or run_case reply ("" for
// other replies).
// seedCase runs checkout once through the worker (seedRun) and saves it
// (save_case "save", forked after its sixth event); it returns the run, the
// saved case's fixture hash and the last reply's entry id.
func seedCase(t *testing.T, client valkey.Client, ns string) (runID, hash, last string) {
	t.Helper()
	runID, last = seedRun(t, client, ns)
	sendAll(t, client, ns+":case-messages", []any{saveMsg("save", runID, 6)})
	got, last := readReplies(t, client, ns+":case-replies", last, 1, 30*time.Second)
	if hash = fixtureHashOf(got[0]); hash == "" {
		t.Fatalf("save_case: %+v", got[0])
	}
	return runID, hash, last
}

// byMessageID is replies by message id (the last of each).
func byMessageID(rs []reply) map[string]reply {
	out := map[string]reply{}
	for _, r := range rs {
		out[r.MessageID] = r
	}
	return out
}

// fixtureHashOf is the fixture_hash of an ok save_case reply, "" for any
// other.
func fixtureHashOf(r reply) string {
	var res struct {
		FixtureHash string `json:"fixture_hash"`
	}
	if r.Status != "ok" || json.Unmarshal(r.Result, &res) != nil {
		return ""
	}
	return res.FixtureHash
}

func runResultID(r reply) string {
	if r.Status != "ok" || (r.Type != "start_run" && r.Type != "run_case") {
		return ""
	}
	var res struct {
		RunID string `json:"run_id"`
	}
	json.Unmarshal(r.Result, &res)
	return res.RunID
}

// runEvent is what the checks read of one journal event.
type runEvent struct {
	Seq  int64  `json:"run_seq"`
	Kind string `json:"kind"`
	Call *struct {
		Kind   string `json:"kind"`
		Key    string `json:"key"`
		Effect string `json:"effect"`
	} `json:"call"`
	Code   string          `json:"code"`
	Result json.RawMessage `json:"result"`
	// CostUSD is a case:outcome's cost.
	CostUSD float64 `json:"cost_usd"`
}

// runJournal is one run's events, as the checks see them.
type runJournal struct {
	runID  string
	events []runEvent
}

// String lists the run's events, one a line, with their calls.
func (j runJournal) String() string {
	var b strings.Builder
	for _, e := range j.events {
		fmt.Fprintf(&b, "  %d %s", e.Seq, e.Kind)
		if e.Call != nil {
			fmt.Fprintf(&b, " %s:%s", e.Call.Kind, e.Call.Key)
		}
		if e.Code != "" {
			fmt.Fprintf(&b, " %s", e.Code)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// terminal returns the run's terminal events.
func (j runJournal) terminal() []runEvent {
	var out []runEvent
	for _, e := range j.events {
		switch e.Kind {
		case "run:complete", "run:error", "run:cancelled":
			out = append(out, e)
		}
	}
	return out
}

// count is how many events of kind the run has.
func (j runJournal) count(kind string) int {
	n := 0
	for _, e := range j.events {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// callsDone counts the call:done events of each call (kind:key).
func (j runJournal) callsDone() map[string]int {
	out := map[string]int{}
	for _, e := range j.events {
		if e.Kind == "call:done" && e.Call != nil {
			out[e.Call.Kind+":"+e.Call.Key]++
		}
	}
	return out
}

// readJournal reads run runID's events stream in namespace ns.
func readJournal(t *testing.T, c valkey.Client, ns, runID string) runJournal {
	t.Helper()
	key := ns + ":{" + runID + "}:events"
	entries, err := c.Do(context.Background(), c.B().Xrange().Key(key).Start("-").End("+").Build()).AsXRange()
	if err != nil {
		t.Fatalf("XRANGE %s: %v", key, err)
	}
	j := runJournal{runID: runID}
	for _, e := range entries {
		var ev runEvent
		if err := json.Unmarshal([]byte(e.FieldValues["event"]), &ev); err != nil {
			t.Fatalf("event %s of %s: %v", e.ID, key, err)
		}
		j.events = append(j.events, ev)
	}
	return j
}

// runIDs lists the ids of every run with an events stream in namespace ns
// (child runs included), sorted; on a cluster, from every node.
func runIDs(t *testing.T, c valkey.Client, ns string) []string {
	t.Helper()
	keys, err := testenv.ScanKeys(context.Background(), c, ns+":{*}:events") // every node of a cluster
	if err != nil {
		t.Fatalf("list the runs of %s: %v", ns, err)
	}
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, strings.TrimSuffix(strings.TrimPrefix(k, ns+":{"), "}:events"))
	}
	sort.Strings(out)
	return out
}

// waitRunsFinished waits until every run of want has a terminal event; if
// some do not within the time, it fails showing their last events.
func waitRunsFinished(t *testing.T, c valkey.Client, ns string, want []string, within time.Duration) {
	t.Helper()
	if left := unfinishedRuns(t, c, ns, want, within); len(left) > 0 {
		t.Fatalf("%d of %d runs have no terminal event after %v", len(left), len(want), within)
	}
}

// unfinishedRuns waits up to within for every run of want to have its
// terminal event, and returns those that have none then (logging the first
// few).
func unfinishedRuns(t *testing.T, c valkey.Client, ns string, want []string, within time.Duration) []string {
	t.Helper()
	left := append([]string(nil), want...)
	deadline := time.Now().Add(within)
	for {
		var still []string
		for _, id := range left {
			if len(readJournal(t, c, ns, id).terminal()) == 0 {
				still = append(still, id)
			}
		}
		if left = still; len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // reading every journal is not free
	}
	for _, id := range left[:min(len(left), 5)] {
		j := readJournal(t, c, ns, id)
		last := runEvent{}
		if len(j.events) > 0 {
			last = j.events[len(j.events)-1]
		}
		meta, _ := c.Do(context.Background(), c.B().Hgetall().Key(ns+":{"+id+"}:meta").Build()).AsStrMap()
		t.Logf("unfinished run %s: %d events, the last %+v (call %+v); meta %v", id, len(j.events), last, last.Call, meta)
	}
	return left
}

// checkRuns checks every run of namespace ns (child runs included): one
// run:submitted, exactly one terminal event, no call completed twice; and
// that the top-level runs (ids without "/") are exactly want. It returns
// the journals by run id.
func checkRuns(t *testing.T, c valkey.Client, ns string, want []string) map[string]runJournal {
	t.Helper()
	return checkRunsExcept(t, c, ns, want, nil)
}

// checkRunsExcept is checkRuns leaving out the runs of skip (runs a
// trial without PYRULA_WAIT_REPLICAS counts as lost).
func checkRunsExcept(t *testing.T, c valkey.Client, ns string, want []string, skip map[string]bool) map[string]runJournal {
	t.Helper()
	out := map[string]runJournal{}
	wantSet := map[string]bool{}
	for _, id := range want {
		wantSet[id] = true
	}
	for _, id := range runIDs(t, c, ns) {
		if skip[id] {
			continue
		}
		j := readJournal(t, c, ns, id)
		out[id] = j
		if !strings.Contains(id, "/") && !wantSet[id] {
			t.Errorf("run %s exists but no reply names it", id)
		}
		if n := j.count("run:submitted"); n != 1 {
			t.Errorf("run %s: %d run:submitted events, want 1", id, n)
		}
		if term := j.terminal(); len(term) != 1 {
			t.Errorf("run %s: %d terminal events, want exactly 1: %+v", id, len(term), term)
		}
		for call, n := range j.callsDone() {
			if n > 1 {
				t.Errorf("run %s: call %s completed %d times (executed twice); its journal:\n%s", id, call, n, j)
			}
		}
		for i, e := range j.events {
			if e.Seq != int64(i+1) {
				t.Errorf("run %s: event %d has run_seq %d", id, i+1, e.Seq)
				break
			}
		}
	}
	for id := range wantSet {
		if _, ok := out[id]; !ok {
			t.Errorf("run %s, named by a reply, has no journal", id)
		}
	}
	return out
}

// pendingCount is how many entries of stream are pending in group.
func pendingCount(t *testing.T, c valkey.Client, stream, group string) int64 {
	t.Helper()
	res, err := c.Do(context.Background(), c.B().Xpending().Key(stream).Group(group).Build()).ToArray()
	if err != nil {
		t.Fatalf("XPENDING %s %s: %v", stream, group, err)
	}
	n, _ := res[0].AsInt64()
	return n
}

// waitNothingPending waits until neither the message stream nor the runs
// stream of ns has a pending entry: every message and every run entry was
// acked.
func waitNothingPending(t *testing.T, c valkey.Client, ns string, within time.Duration) {
	t.Helper()
	testwait.Eventually(t, within, "nothing pending on the message and runs streams", func() bool {
		return pendingCount(t, c, ns+":case-messages", "case-workers") == 0 &&
			pendingCount(t, c, ns+":runs", "run-workers") == 0
	})
}

// storeFiles lists the bundle files of a directory fixture store.
func storeFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*", "*.case"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}
