package main_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/internal/testwait"
	"github.com/pyrula/caseworker/version"
	"github.com/pyrula/caseworker/worker"
)

// workerBin is the path of the binary built once for the tests, as it is
// shipped; demoBin the same built with the demo tag (`worker demo`);
// paidBin the worker of TestNoPaidCallTwice (internal/paidworker).
var workerBin, demoBin, paidBin string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "pyrula-worker-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "make temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if workerBin, err = testenv.BuildBinary(dir, "github.com/pyrula/caseworker/cmd/worker"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if demoBin, err = testenv.BuildBinary(dir, "github.com/pyrula/caseworker/cmd/worker", "demo"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if paidBin, err = testenv.BuildBinary(dir, "github.com/pyrula/caseworker/cmd/worker/internal/paidworker"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// baseEnv is the clean environment every run starts from (no PYRULA_*
// variables from the caller's environment).
func baseEnv(t *testing.T, env ...string) []string {
	e := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	e = append(e, testenv.BinaryEnv()...)
	return append(e, env...)
}

// result is what one run of the binary did.
type result struct {
	args   []string
	code   int
	stdout string
	stderr string
}

func (r result) String() string {
	return fmt.Sprintf("worker %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// run runs the binary to completion (at most timeout) in a clean
// environment plus env.
func run(t *testing.T, timeout time.Duration, env []string, args ...string) result {
	t.Helper()
	return runBinary(t, workerBin, timeout, env, args...)
}

// runDemo is run with the binary built with the demo tag.
func runDemo(t *testing.T, timeout time.Duration, env []string, args ...string) result {
	t.Helper()
	return runBinary(t, demoBin, timeout, env, args...)
}

// runBinary runs bin to completion (at most timeout) in a clean
// environment plus env.
func runBinary(t *testing.T, bin string, timeout time.Duration, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = baseEnv(t, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{args: args, stdout: stdout.String(), stderr: stderr.String()}
	if ctx.Err() != nil {
		t.Fatalf("worker %v did not exit within %v\n%s", args, timeout, r)
	}
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("run worker %v: %v", args, err)
		}
		r.code = ee.ExitCode()
	}
	return r
}

// lines splits s into its non-empty lines.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// configVars returns every variable of worker.Config (PYRULA_<envconfig
// tag>) with its default tag, by reflection, so that a field added to the
// struct is checked without touching this test.
func configVars(t *testing.T) map[string]string {
	t.Helper()
	vars := map[string]string{}
	typ := reflect.TypeFor[worker.Config]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("envconfig")
		if tag == "" || tag == "-" {
			t.Fatalf("worker.Config.%s has no envconfig tag: every field must be a PYRULA_ variable", f.Name)
		}
		vars[worker.EnvPrefix+"_"+tag] = f.Tag.Get("default")
	}
	if len(vars) < 10 {
		t.Fatalf("found only %d variables in worker.Config: %v", len(vars), vars)
	}
	return vars
}

func TestHelpListsEveryVariableWithItsDefault(t *testing.T) {
	for _, arg := range []string{"--help", "-h", "help"} {
		t.Run(arg, func(t *testing.T) {
			r := run(t, time.Minute, nil, arg)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("want exit 0 and empty stderr\n%s", r)
			}
			// envconfig's table: KEY TYPE DEFAULT REQUIRED DESCRIPTION, tab-separated.
			listed := map[string][]string{}
			for _, l := range lines(r.stdout) {
				cols := strings.Split(l, "\t")
				if strings.HasPrefix(cols[0], worker.EnvPrefix+"_") {
					listed[cols[0]] = cols
				}
			}
			for name, def := range configVars(t) {
				cols, ok := listed[name]
				if !ok {
					t.Errorf("%s is not listed by worker %s", name, arg)
					continue
				}
				if len(cols) < 5 {
					t.Errorf("%s: want KEY, TYPE, DEFAULT, REQUIRED, DESCRIPTION columns, got %q", name, cols)
					continue
				}
				if cols[2] != def {
					t.Errorf("%s: help shows default %q, the struct says %q", name, cols[2], def)
				}
				if strings.TrimSpace(cols[4]) == "" {
					t.Errorf("%s has no description", name)
				}
			}
			for _, cmd := range []string{"serve", "db migrate", "version"} {
				if !strings.Contains(r.stdout, cmd) {
					t.Errorf("help does not mention the %q command", cmd)
				}
			}
		})
	}
}

func TestVersion(t *testing.T) {
	r := run(t, time.Minute, nil, "version")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("want exit 0 and empty stderr\n%s", r)
	}
	if got := strings.TrimSpace(r.stdout); got != version.Version {
		t.Fatalf("worker version printed %q, want %q", got, version.Version)
	}
}

func TestUnknownCommand(t *testing.T) {
	r := run(t, time.Minute, nil, "frobnicate")
	if r.code == 0 || len(lines(r.stderr)) != 1 || !strings.Contains(r.stderr, "frobnicate") {
		t.Fatalf("want a non-zero exit and one line naming the command\n%s", r)
	}
}

// TestBadValueStopsStartUp: a bad value stops start-up, before anything
// is connected or logged, with exactly one line on stderr naming the
// variable.
func TestBadValueStopsStartUp(t *testing.T) {
	cases := []struct{ name, value string }{
		{"PYRULA_CONCURRENCY", "abc"},
		{"PYRULA_CONCURRENCY", "-1"},
		{"PYRULA_SHUTDOWN_GRACE", "forever"},
		{"PYRULA_SHUTDOWN_GRACE", "-5s"},
		{"PYRULA_CLAIM_IDLE", "10"},
		{"PYRULA_MAX_DELIVERIES", "1.5"},
		{"PYRULA_WAIT_REPLICAS", "-1"},
		{"PYRULA_LOG_LEVEL", "verbose"},
		{"PYRULA_LOG_FORMAT", "xml"},
		{"PYRULA_NAMESPACE", "has space"},
		{"PYRULA_REPLY_STREAM", "pyrula:case-messages"},
		{"OTEL_TRACES_EXPORTER", "zipkin"},
		// Validated when listening, still before anything else happens.
		{"PYRULA_HTTP_ADDR", "127.0.0.1:99999"},
	}
	for _, c := range cases {
		t.Run(c.name+"="+c.value, func(t *testing.T) {
			t.Parallel()
			// The Valkey URL points nowhere: a bad value must stop start-up
			// before any connection is tried.
			r := run(t, time.Minute, []string{c.name + "=" + c.value, "PYRULA_VALKEY_URL=redis://127.0.0.1:1/0"}, "serve")
			if r.code == 0 {
				t.Fatalf("want a non-zero exit\n%s", r)
			}
			ls := lines(r.stderr)
			if len(ls) != 1 {
				t.Fatalf("want exactly one line on stderr, got %d\n%s", len(ls), r)
			}
			if !strings.Contains(ls[0], c.name) {
				t.Fatalf("the line does not name %s\n%s", c.name, r)
			}
			if strings.Contains(c.value, "abc") && strings.Contains(ls[0], c.value) {
				t.Errorf("the line echoes the value (it could be a secret)\n%s", r)
			}
			if r.stdout != "" {
				t.Errorf("want nothing on stdout\n%s", r)
			}
		})
	}
}

// TestValkeyURLProblems documents what start-up does when Valkey cannot be
// used: it exits non-zero (Kubernetes restarts the pod) with a last line
// naming PYRULA_VALKEY_URL and without the URL's password. The HTTP
// listener is opened before Valkey is tried, so its "listening" log line
// comes first (observed).
func TestValkeyURLProblems(t *testing.T) {
	cases := []struct{ name, url string }{
		{"unreachable", "redis://user:s3cret@127.0.0.1:" + closedPort(t) + "/0"},
		{"not redis", "http://user:s3cret@127.0.0.1/"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := run(t, time.Minute, []string{"PYRULA_VALKEY_URL=" + c.url, "PYRULA_HTTP_ADDR=127.0.0.1:0"}, "serve")
			if r.code == 0 {
				t.Fatalf("want a non-zero exit\n%s", r)
			}
			ls := lines(r.stderr)
			if len(ls) == 0 || !strings.Contains(ls[len(ls)-1], "PYRULA_VALKEY_URL") {
				t.Fatalf("want a last line naming PYRULA_VALKEY_URL\n%s", r)
			}
			if strings.Contains(r.stderr, "s3cret") {
				t.Fatalf("stderr shows the password\n%s", r)
			}
			for _, l := range ls[:len(ls)-1] {
				if !strings.HasPrefix(l, "{") {
					t.Errorf("a line before the error is not a JSON log line: %q", l)
				}
			}
			t.Logf("observed: exit %d, %d stderr line(s), last: %s", r.code, len(ls), ls[len(ls)-1])
		})
	}
}

// closedPort returns a local TCP port nothing listens on (one just closed).
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	return port
}

func TestDBMigrateTwice(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	for i := range 2 {
		r := run(t, 2*time.Minute, []string{"PYRULA_POSTGRES_DSN=" + dsn}, "db", "migrate")
		if r.code != 0 {
			t.Fatalf("run %d: want exit 0\n%s", i+1, r)
		}
		if !strings.HasPrefix(r.stdout, "applied ") {
			t.Fatalf("run %d: want an 'applied N migrations' line\n%s", i+1, r)
		}
		t.Logf("run %d: %s", i+1, strings.TrimSpace(r.stdout))
	}
}

func TestDBMigrateWithoutDSN(t *testing.T) {
	r := run(t, time.Minute, nil, "db", "migrate")
	if r.code == 0 || len(lines(r.stderr)) != 1 || !strings.Contains(r.stderr, "PYRULA_POSTGRES_DSN") {
		t.Fatalf("want a non-zero exit and one line naming PYRULA_POSTGRES_DSN\n%s", r)
	}
}

// daemon is a running `worker serve`.
type daemon struct {
	t    *testing.T
	cmd  *exec.Cmd
	addr string // the HTTP listener, from the "listening" log line
	done chan struct{}
	err  error // cmd.Wait's, once done is closed

	mu     sync.Mutex
	stderr bytes.Buffer
}

func (d *daemon) logs() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stderr.String()
}

// startDaemon starts `worker serve` with env and waits (bounded) for its
// "listening" log line. The process is killed at the end of the test if
// it is still running.
func startDaemon(t *testing.T, env ...string) *daemon {
	t.Helper()
	return startDaemonOf(t, workerBin, env...)
}

// startDaemonOf is startDaemon of the binary bin.
func startDaemonOf(t *testing.T, bin string, env ...string) *daemon {
	t.Helper()
	d := &daemon{t: t, done: make(chan struct{})}
	d.cmd = exec.Command(bin, "serve")
	d.cmd.Env = baseEnv(t, env...)
	pr, err := d.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	d.cmd.Stdout = io.Discard
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			d.mu.Lock()
			d.stderr.WriteString(line + "\n")
			d.mu.Unlock()
			var entry struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "listening" {
				select {
				case addr <- entry.Addr:
				default:
				}
			}
		}
	}()
	go func() {
		<-scanned // Wait closes the pipe: read it all first
		d.err = d.cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			d.cmd.Process.Kill()
			<-d.done
		}
		if t.Failed() {
			t.Logf("worker stderr:\n%s", d.logs())
		}
	})
	select {
	case d.addr = <-addr:
	case <-d.done:
		t.Fatalf("worker exited before listening: %v\n%s", d.err, d.logs())
	case <-time.After(30 * time.Second):
		t.Fatalf("worker did not log 'listening' within 30s\n%s", d.logs())
	}
	return d
}

// get fetches path from the daemon's listener: the status code and body,
// or an error when the request fails (for example the listener is closed).
func (d *daemon) get(path string) (int, string, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + d.addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// xadd adds a message envelope to stream and returns the entry id.
func xadd(t *testing.T, c valkey.Client, stream string, msg any) string {
	t.Helper()
	b, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.Do(context.Background(), c.B().Xadd().Key(stream).Id("*").FieldValue().FieldValue("message", string(b)).Build()).ToString()
	if err != nil {
		t.Fatalf("XADD %s: %v", stream, err)
	}
	return id
}

// reply is one entry of a reply stream.
type reply struct {
	MessageID string          `json:"message_id"`
	Type      string          `json:"type"`
	Status    string          `json:"status"`
	Code      string          `json:"code"`
	Message   string          `json:"message"`
	Result    json.RawMessage `json:"result"`
}

// readReplies reads stream after id, blocking up to within for at least
// one entry, and returns the replies and the last id read.
func readReplies(t *testing.T, c valkey.Client, stream, after string, want int, within time.Duration) ([]reply, string) {
	t.Helper()
	var out []reply
	deadline := time.Now().Add(within)
	for len(out) < want {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("%d of %d replies on %s within %v: %+v", len(out), want, stream, within, out)
		}
		res, err := c.Do(context.Background(), c.B().Xread().Count(100).Block(max(left.Milliseconds(), 1)).Streams().Key(stream).Id(after).Build()).AsXRead()
		if valkey.IsValkeyNil(err) {
			continue
		}
		if err != nil {
			t.Fatalf("XREAD %s: %v", stream, err)
		}
		for _, e := range res[stream] {
			after = e.ID
			var r reply
			if err := json.Unmarshal([]byte(e.FieldValues["reply"]), &r); err != nil {
				t.Fatalf("reply entry %s: %v: %q", e.ID, err, e.FieldValues)
			}
			out = append(out, r)
		}
	}
	return out, after
}

func TestServeHandlesMessagesAndStopsOnSIGTERM(t *testing.T) {
	url := testenv.ValkeyURL(t)
	ns := testenv.UniqueName(t, "wtest")
	client := testenv.ValkeyClientAt(t, url, ns)
	const grace = 5 * time.Second
	caseStream, replyStream := ns+":case-messages", ns+":case-replies"
	d := startDaemon(t,
		"PYRULA_VALKEY_URL="+url,
		"PYRULA_NAMESPACE="+ns,
		"PYRULA_CONSUMER_NAME=test-consumer",
		"PYRULA_HTTP_ADDR=127.0.0.1:0",
		"PYRULA_FIXTURE_STORE=memory:",
		"PYRULA_SHUTDOWN_GRACE="+grace.String(),
	)

	// Health, then readiness.
	testwait.Eventually(t, 10*time.Second, "/healthz 200", func() bool {
		code, _, err := d.get("/healthz")
		return err == nil && code == http.StatusOK
	})
	testwait.Eventually(t, 30*time.Second, "/readyz 200", func() bool {
		code, _, err := d.get("/readyz")
		return err == nil && code == http.StatusOK
	})

	// A delete_case_bundle of a bundle the store does not hold, sent
	// twice with the same id: the same reply twice, the second one a
	// duplicate answered from the idempotency record.
	hash := strings.Repeat("0", 64)
	msg := map[string]any{
		"message_id": "del-1",
		"type":       "delete_case_bundle",
		"body":       map[string]any{"fixture_hash": hash},
	}
	xadd(t, client, caseStream, msg)
	got, last := readReplies(t, client, replyStream, "0", 1, 15*time.Second)
	want := reply{MessageID: "del-1", Type: "delete_case_bundle", Status: "ok", Result: json.RawMessage(`{"deleted":false}`)}
	if !reflect.DeepEqual(got[0], want) {
		t.Fatalf("reply %+v (result %s), want %+v (result %s)", got[0], got[0].Result, want, want.Result)
	}
	xadd(t, client, caseStream, msg)
	got, last = readReplies(t, client, replyStream, last, 1, 15*time.Second)
	if !reflect.DeepEqual(got[0], want) {
		t.Fatalf("duplicate's reply %+v (result %s), want the first one's", got[0], got[0].Result)
	}
	// A malformed one: refused at once.
	xadd(t, client, caseStream, map[string]any{"message_id": "bad-1", "type": "no_such_type", "body": map[string]any{}})
	got, _ = readReplies(t, client, replyStream, last, 1, 15*time.Second)
	if got[0].MessageID != "bad-1" || got[0].Status != "refused" || got[0].Code != "invalid_overrides" {
		t.Fatalf("reply to an unknown type: %+v", got[0])
	}

	// Metrics.
	var metrics string
	testwait.Eventually(t, 10*time.Second, "metrics counting the three messages", func() bool {
		code, body, err := d.get("/metrics")
		metrics = body
		return err == nil && code == http.StatusOK &&
			strings.Contains(body, `pyrula_worker_messages_total{outcome="ok",type="delete_case_bundle"} 2`) &&
			strings.Contains(body, `pyrula_worker_messages_total{outcome="refused",type="unknown"} 1`) &&
			// A message is counted when answered, and leaves the in-flight
			// gauge when its slot is released, just after.
			strings.Contains(body, "pyrula_worker_messages_in_flight 0")
	})
	for _, name := range []string{
		`pyrula_worker_build_info{version="` + version.Version + `"} 1`,
		"pyrula_worker_duplicates_total 1",
		"pyrula_worker_message_duration_seconds_bucket",
		"pyrula_worker_dead_letters_total 0",
		"go_goroutines",
		"process_start_time_seconds",
	} {
		if !strings.Contains(metrics, name) {
			t.Errorf("/metrics has no %q", name)
		}
	}

	// SIGTERM: /readyz goes non-200 (or the listener closes) promptly, and
	// the process exits 0 within the grace.
	term := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Second, "/readyz not 200 after SIGTERM", func() bool {
		code, _, err := d.get("/readyz")
		return err != nil || code != http.StatusOK
	})
	t.Logf("/readyz not ready %v after SIGTERM", time.Since(term).Round(time.Millisecond))
	// No new reads a second after SIGTERM: a message added then is never
	// delivered to this worker (it is left for another one).
	select {
	case <-d.done:
	case <-time.After(time.Until(term.Add(time.Second))):
	}
	lateID := xadd(t, client, caseStream, map[string]any{"message_id": "late-1", "type": "delete_case_bundle", "body": map[string]any{"fixture_hash": hash}})
	select {
	case <-d.done:
	case <-time.After(grace + 5*time.Second):
		t.Fatalf("worker did not exit within the grace (%v) + 5s after SIGTERM", grace)
	}
	t.Logf("exited %v after SIGTERM", time.Since(term).Round(time.Millisecond))
	if d.err != nil {
		t.Fatalf("worker exit after SIGTERM: %v (want exit 0)", d.err)
	}
	logs := d.logs()
	for _, want := range []string{`"msg":"shutting down"`, `"msg":"stopped"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs have no %s", want)
		}
	}
	ctx := context.Background()
	pending, err := client.Do(ctx, client.B().Xpending().Key(caseStream).Group("case-workers").Build()).ToArray()
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := pending[0].AsInt64(); n != 0 {
		t.Errorf("%d entries left pending after a clean shutdown with nothing in flight", n)
	}
	groups, err := client.Do(ctx, client.B().XinfoGroups().Key(caseStream).Build()).ToArray()
	if err != nil || len(groups) != 1 {
		t.Fatalf("XINFO GROUPS: %v %v", groups, err)
	}
	info, err := groups[0].AsMap() // a RESP3 map or a RESP2 array of pairs
	if err != nil {
		t.Fatal(err)
	}
	ld := info["last-delivered-id"]
	delivered, _ := ld.ToString()
	if delivered == "" || !idLess(delivered, lateID) {
		t.Errorf("the message added a second after SIGTERM (%s) was read (last delivered %s)", lateID, delivered)
	}
}

// idLess reports whether stream id a is before b.
func idLess(a, b string) bool {
	var am, as, bm, bs uint64
	fmt.Sscanf(a, "%d-%d", &am, &as)
	fmt.Sscanf(b, "%d-%d", &bm, &bs)
	return am < bm || am == bm && as < bs
}

// lockedBundle inserts a bundle row of its own into the PostgreSQL fixture
// store and holds a row lock on it in an open transaction, so that a
// worker's DELETE of it blocks until release is called: a message that
// stays in flight for as long as the test wants.
func lockedBundle(t *testing.T, dsn string) (hash string, release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	hash = hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, `INSERT INTO archive.case_bundles (hash, blob, size) VALUES ($1, 'x', 1)`, hash); err != nil {
		t.Fatalf("insert a bundle row: %v", err)
	}
	t.Cleanup(func() {
		conn.Exec(context.Background(), `DELETE FROM archive.case_bundles WHERE hash = $1`, hash)
	})
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM archive.case_bundles WHERE hash = $1 FOR UPDATE`, hash); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if err := tx.Rollback(context.Background()); err != nil {
				t.Errorf("release the row lock: %v", err)
			}
		})
	}
	t.Cleanup(release)
	return hash, release
}

// TestSIGTERMWithAMessageInFlight: SIGTERM while a delete_case_bundle is
// blocked in the store. /readyz turns 503 at once (the listener stays up
// while draining), nothing new is read, and then either the message
// finishes within PYRULA_SHUTDOWN_GRACE (its reply is published and it is
// acked) or the grace ends first (the message is handed back: left
// pending with no reply, to be redelivered). Both exit 0.
func TestSIGTERMWithAMessageInFlight(t *testing.T) {
	url := testenv.ValkeyURL(t)
	dsn := testenv.PostgresDSN(t)
	if r := run(t, 2*time.Minute, []string{"PYRULA_POSTGRES_DSN=" + dsn}, "db", "migrate"); r.code != 0 {
		t.Fatalf("migrate\n%s", r)
	}
	for _, finish := range []bool{true, false} {
		name := "finishes within the grace"
		if !finish {
			name = "handed back after the grace"
		}
		t.Run(name, func(t *testing.T) {
			ns := testenv.UniqueName(t, "wtest")
			client := testenv.ValkeyClientAt(t, url, ns)
			hash, release := lockedBundle(t, dsn)
			const grace = 3 * time.Second
			caseStream, replyStream := ns+":case-messages", ns+":case-replies"
			d := startDaemon(t,
				"PYRULA_VALKEY_URL="+url,
				"PYRULA_NAMESPACE="+ns,
				"PYRULA_CONSUMER_NAME=test-consumer",
				"PYRULA_HTTP_ADDR=127.0.0.1:0",
				"PYRULA_FIXTURE_STORE="+dsn,
				"PYRULA_SHUTDOWN_GRACE="+grace.String(),
			)
			testwait.Eventually(t, 30*time.Second, "/readyz 200", func() bool {
				code, _, err := d.get("/readyz")
				return err == nil && code == http.StatusOK
			})
			xadd(t, client, caseStream, map[string]any{
				"message_id": "slow-1", "type": "delete_case_bundle",
				"body": map[string]any{"fixture_hash": hash},
			})
			testwait.Eventually(t, 10*time.Second, "the message in flight", func() bool {
				_, body, err := d.get("/metrics")
				return err == nil && strings.Contains(body, "pyrula_worker_messages_in_flight 1")
			})

			term := time.Now()
			if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			testwait.Eventually(t, time.Second, "/readyz 503 while draining", func() bool {
				code, _, err := d.get("/readyz")
				return err == nil && code == http.StatusServiceUnavailable
			})
			// Still draining a second after SIGTERM: nothing added now is read.
			select {
			case <-d.done:
				t.Fatalf("worker exited while a message was in flight: %v", d.err)
			case <-time.After(time.Until(term.Add(time.Second))):
			}
			lateID := xadd(t, client, caseStream, map[string]any{
				"message_id": "late-1", "type": "delete_case_bundle",
				"body": map[string]any{"fixture_hash": strings.Repeat("0", 64)},
			})
			if finish {
				release()
			}
			select {
			case <-d.done:
			case <-time.After(grace + 5*time.Second):
				t.Fatalf("worker did not exit within the grace (%v) + 5s after SIGTERM", grace)
			}
			took := time.Since(term)
			t.Logf("exited %v after SIGTERM", took.Round(time.Millisecond))
			if d.err != nil {
				t.Fatalf("worker exit after SIGTERM: %v (want exit 0)", d.err)
			}
			if !finish && took < grace {
				t.Errorf("exited after %v, before the grace (%v) ended, with the message still blocked", took, grace)
			}

			ctx := context.Background()
			replies, err := client.Do(ctx, client.B().Xrange().Key(replyStream).Start("-").End("+").Build()).AsXRange()
			if err != nil {
				t.Fatal(err)
			}
			pending, err := client.Do(ctx, client.B().Xpending().Key(caseStream).Group("case-workers").Build()).ToArray()
			if err != nil {
				t.Fatal(err)
			}
			npending, _ := pending[0].AsInt64()
			if finish {
				if len(replies) != 1 {
					t.Fatalf("want exactly the in-flight message's reply, got %d: %v", len(replies), replies)
				}
				var r reply
				if err := json.Unmarshal([]byte(replies[0].FieldValues["reply"]), &r); err != nil {
					t.Fatal(err)
				}
				if r.MessageID != "slow-1" || r.Status != "ok" || string(r.Result) != `{"deleted":true}` {
					t.Fatalf("reply %+v (result %s), want slow-1 ok {\"deleted\":true}", r, r.Result)
				}
				if npending != 0 {
					t.Errorf("%d entries pending after the in-flight message finished", npending)
				}
			} else {
				// Handed back: no reply, still pending, redelivered later.
				if len(replies) != 0 {
					t.Fatalf("want no reply for a message cut off by the grace, got %v", replies)
				}
				if npending != 1 {
					t.Errorf("want the cut-off message pending (handed back), got %d pending", npending)
				}
			}
			groups, err := client.Do(ctx, client.B().XinfoGroups().Key(caseStream).Build()).ToArray()
			if err != nil || len(groups) != 1 {
				t.Fatalf("XINFO GROUPS: %v %v", groups, err)
			}
			info, err := groups[0].AsMap()
			if err != nil {
				t.Fatal(err)
			}
			ld := info["last-delivered-id"]
			delivered, _ := ld.ToString()
			if delivered == "" || !idLess(delivered, lateID) {
				t.Errorf("the message added a second after SIGTERM (%s) was read (last delivered %s)", lateID, delivered)
			}
		})
	}
}

// TestShippedBuildHasNoDemo: the worker as shipped does not link the
// demo's embedded server (memvalkey) and says how to get the demo; the
// build with the demo tag links it (so the check can fail).
func TestShippedBuildHasNoDemo(t *testing.T) {
	t.Parallel()
	const pkg, server = "github.com/pyrula/caseworker/cmd/worker", "github.com/pyrula/caseworker/memvalkey"
	deps := func(tags ...string) []string {
		args := append([]string{"list", "-deps"}, tags...)
		out, err := exec.Command("go", append(args, pkg)...).Output()
		if err != nil {
			t.Fatalf("go %v: %v", args, err)
		}
		return strings.Fields(string(out))
	}
	if slices.Contains(deps(), server) {
		t.Errorf("the shipped worker links %s", server)
	}
	if !slices.Contains(deps("-tags", "demo"), server) {
		t.Errorf("the demo build does not link %s: the check above proves nothing", server)
	}
	r := run(t, time.Minute, nil, "demo")
	if r.code != 1 || !strings.Contains(r.stderr, "this build has no demo") || !strings.Contains(r.stderr, "go run -tags demo ./cmd/worker demo") {
		t.Errorf("want exit 1 saying how to build the demo\n%s", r)
	}
	if r := run(t, time.Minute, nil, "--help"); !strings.Contains(r.stdout, "in a build with the demo tag") {
		t.Errorf("--help does not say the demo needs the demo tag\n%s", r)
	}
}
