package starter_test

// The starter's two binaries end to end against a real Valkey: the worker
// serves the starter's targets, and the CLI's enqueue command plays the
// platform: start a run, save it as a case, run the case replay-only.
//
// Needs PYRULA_TEST_VALKEY_URL (e.g. redis://127.0.0.1:6379/0); without it
// the test skips, unless PYRULA_TEST_REQUIRE_SERVICES=1 or CI=true, where it
// fails.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"
)

const testVersion = "0.0.0-starter-e2e"

func TestWorkerEndToEnd(t *testing.T) {
	url := valkeyURL(t)
	dir := t.TempDir()
	worker, pyrula := build(t, dir)

	if out, code := run(t, nil, worker, "version"); code != 0 || strings.TrimSpace(out) != testVersion {
		t.Fatalf("worker version: exit %d, %q; want 0, %q", code, out, testVersion)
	}

	ns := fmt.Sprintf("starter-e2e-%d-%d", os.Getpid(), time.Now().UnixNano())
	deleteNamespaceAtEnd(t, url, ns)
	env := []string{"PYRULA_VALKEY_URL=" + url, "PYRULA_NAMESPACE=" + ns}
	cases := filepath.Join(dir, "cases")
	addr := freeAddr(t)
	w := startWorker(t, worker, append(env,
		"PYRULA_FIXTURE_STORE="+cases, "PYRULA_HTTP_ADDR="+addr, "PYRULA_SHUTDOWN_GRACE=5s"))
	w.waitHealthy(t, "http://"+addr+"/healthz")

	// start_run: a live run of order, followed to its end.
	reply, events := enqueue(t, pyrula, env, 0, "start_run", `{"target_name":"order"}`, "--follow")
	var started struct {
		RunID string `json:"run_id"`
	}
	reply.decode(t, &started)
	lastKind(t, "start_run", events, "run:complete")

	// The fork point: right after the price read is done, so the case's
	// recorded prefix holds one call and the rest resolves from its results.
	fork := int64(-1)
	out, code := run(t, env, pyrula, "events", started.RunID, "--fork-points")
	for _, l := range lines(t, out, code) {
		var fp struct {
			RunSeq    int64  `json:"run_seq"`
			Kind      string `json:"kind"`
			Call      string `json:"call"`
			ForkPoint bool   `json:"fork_point"`
		}
		mustUnmarshal(t, l, &fp)
		if fp.Kind == "call:done" && fp.Call == "step:price:0" && fp.ForkPoint {
			fork = fp.RunSeq
		}
	}
	if fork < 0 {
		t.Fatalf("events %s --fork-points: no fork point after step:price:0", started.RunID)
	}

	// save_case: the run as a case in the worker's fixture store.
	reply, _ = enqueue(t, pyrula, env, 0, "save_case",
		fmt.Sprintf(`{"target_name":"order","run_id":%q,"fork_after_seq":%d}`, started.RunID, fork), "--wait")
	var saved struct {
		FixtureHash string `json:"fixture_hash"`
	}
	reply.decode(t, &saved)
	if len(saved.FixtureHash) != 64 {
		t.Fatalf("save_case: fixture_hash %q", saved.FixtureHash)
	}
	if _, err := os.Stat(filepath.Join(cases, saved.FixtureHash[:2], saved.FixtureHash+".case")); err != nil {
		t.Errorf("save_case: the bundle is not in the store: %v", err)
	}

	// run_case replay-only: the same code makes the same calls.
	source := fmt.Sprintf(`"source":{"bundle":{"fixture_hash":%q}}`, saved.FixtureHash)
	_, events = enqueue(t, pyrula, env, 0, "run_case",
		`{"target_name":"order",`+source+`,"options":{"replay_only":true}}`, "--follow")
	lastKind(t, "run_case", events, "run:complete")
	reused := 0
	for _, e := range events {
		switch {
		case e.Kind == "call:done" && e.Provenance == "reused":
			reused++
		case e.Kind == "call:done" && e.Provenance != nil:
			t.Errorf("run_case replay-only: call %s:%s provenance %v, want reused", e.Call.Kind, e.Call.Key, e.Provenance)
		case e.Kind == "case:outcome" && (e.Status != "complete" || e.PrefixCalls != 1):
			t.Errorf("run_case replay-only: case:outcome status %q, prefix_calls %d; want complete, 1", e.Status, e.PrefixCalls)
		}
	}
	if reused != 3 { // the price read (the prefix), the sleep and the charge
		t.Errorf("run_case replay-only: %d calls reused, want 3", reused)
	}

	// run_case with a changed input: the recorded prefix (the price read of
	// SKU-42) no longer matches, so the run ends run:error prefix_diverged
	// (enqueue --follow exits 3; `pyrula case run` refuses it with exit 2).
	_, events = enqueue(t, pyrula, env, 3, "run_case",
		`{"target_name":"order",`+source+`,"options":{"replay_only":true,"inputs":{"sku":"SKU-7"}}}`, "--follow")
	if last := lastKind(t, "run_case --input sku", events, "run:error"); last.Code != "prefix_diverged" {
		t.Errorf("run_case with a changed sku: code %q, want prefix_diverged", last.Code)
	}

	// The agent runs on the worker too, with its scripted model.
	_, events = enqueue(t, pyrula, env, 0, "start_run", `{"target_name":"helpdesk"}`, "--follow")
	lastKind(t, "start_run helpdesk", events, "run:complete")

	w.stop(t)
}

// valkeyURL returns PYRULA_TEST_VALKEY_URL, or skips (fails when services
// are required) when it is unset.
func valkeyURL(t *testing.T) string {
	url := os.Getenv("PYRULA_TEST_VALKEY_URL")
	if url != "" {
		return url
	}
	required := os.Getenv("CI")
	if v := os.Getenv("PYRULA_TEST_REQUIRE_SERVICES"); v != "" {
		required = v
	}
	if required == "1" || strings.EqualFold(required, "true") {
		t.Fatal("PYRULA_TEST_VALKEY_URL is not set (a Valkey server, e.g. redis://127.0.0.1:6379/0) and services are required")
	}
	t.Skip("PYRULA_TEST_VALKEY_URL is not set (a Valkey server, e.g. redis://127.0.0.1:6379/0)")
	return ""
}

// build builds the two binaries into dir, the version stamped as the
// Dockerfile stamps it.
func build(t *testing.T, dir string) (worker, pyrula string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator),
		"-ldflags", "-X github.com/pyrula/caseworker/version.Version="+testVersion,
		"./cmd/worker", "./cmd/pyrula")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return filepath.Join(dir, "worker"), filepath.Join(dir, "pyrula")
}

// environ is the test's environment without PYRULA_ variables, plus env.
func environ(env []string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PYRULA_") {
			out = append(out, kv)
		}
	}
	return append(out, env...)
}

// run runs a binary to its end (at most a minute) and returns its stdout
// and exit status.
func run(t *testing.T, env []string, bin string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = environ(env)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s %v: %v", filepath.Base(bin), args, err)
	}
	if stderr.Len() > 0 {
		t.Logf("%s %v: stderr: %s", filepath.Base(bin), args, stderr.String())
	}
	return stdout.String(), cmd.ProcessState.ExitCode()
}

// lines splits run's stdout into lines, failing on a non-zero exit.
func lines(t *testing.T, out string, code int) []string {
	t.Helper()
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	return strings.Split(strings.TrimSpace(out), "\n")
}

func mustUnmarshal(t *testing.T, raw string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(raw), v); err != nil {
		t.Fatalf("not the JSON expected: %q: %v", raw, err)
	}
}

// reply is the worker's reply to a message, as enqueue prints it.
type reply struct {
	Type    string          `json:"type"`
	Status  string          `json:"status"`
	Code    string          `json:"code"`
	Message string          `json:"message"`
	Result  json.RawMessage `json:"result"`
}

// decode decodes an ok reply's result into v.
func (r reply) decode(t *testing.T, v any) {
	t.Helper()
	if r.Status != "ok" {
		t.Fatalf("%s: reply status %q (%s: %s), want ok", r.Type, r.Status, r.Code, r.Message)
	}
	mustUnmarshal(t, string(r.Result), v)
}

// event is a run's journal event, as enqueue --follow prints it.
type event struct {
	RunSeq int64  `json:"run_seq"`
	Kind   string `json:"kind"`
	Call   struct {
		Kind string `json:"kind"`
		Key  string `json:"key"`
	} `json:"call"`
	Provenance any    `json:"provenance"` // a string on call:done, counts on case:outcome
	Code       string `json:"code"`
	// case:outcome only.
	Status      string `json:"status"`
	PrefixCalls int    `json:"prefix_calls"`
}

// enqueue sends a message with `pyrula enqueue TYPE --body BODY FLAGS…`,
// checks its exit status and returns the reply and the run's events.
func enqueue(t *testing.T, pyrula string, env []string, wantExit int, typ, body string, flags ...string) (reply, []event) {
	t.Helper()
	out, code := run(t, env, pyrula, append([]string{"enqueue", typ, "--body", body, "--timeout", "30s"}, flags...)...)
	if code != wantExit {
		t.Fatalf("enqueue %s %s: exit %d, want %d\n%s", typ, body, code, wantExit, out)
	}
	ls := strings.Split(strings.TrimSpace(out), "\n")
	var r reply
	mustUnmarshal(t, ls[0], &r)
	if r.Status != "ok" {
		t.Fatalf("enqueue %s: reply %s", typ, ls[0])
	}
	var events []event
	for _, l := range ls[1:] {
		var e event
		mustUnmarshal(t, l, &e)
		events = append(events, e)
	}
	return r, events
}

// lastKind checks that a followed run's last event is of kind want.
func lastKind(t *testing.T, what string, events []event, want string) event {
	t.Helper()
	if len(events) == 0 || events[len(events)-1].Kind != want {
		t.Fatalf("%s: events %+v, want the last one %s", what, events, want)
	}
	return events[len(events)-1]
}

// freeAddr returns a loopback address with a port nobody listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// deleteNamespaceAtEnd deletes the namespace's keys when t ends.
func deleteNamespaceAtEnd(t *testing.T, url, ns string) {
	t.Helper()
	opt, err := valkey.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.DisableCache = true
	c, err := valkey.NewClient(opt)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(func() {
		defer c.Close()
		ctx := context.Background()
		for cursor := uint64(0); ; {
			se, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(ns+":*").Count(1000).Build()).AsScanEntry()
			if err != nil {
				t.Logf("delete namespace %s: %v", ns, err)
				return
			}
			for _, k := range se.Elements {
				c.Do(ctx, c.B().Del().Key(k).Build())
			}
			if cursor = se.Cursor; cursor == 0 {
				return
			}
		}
	})
}

// workerProc is the worker running in the background.
type workerProc struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{} // closed when it exited
	err  error         // cmd.Wait's, once done is closed
}

// startWorker starts `worker` (serve) with env; it is killed when t ends
// if it is still running, and its output is logged when t failed.
func startWorker(t *testing.T, bin string, env []string) *workerProc {
	t.Helper()
	w := &workerProc{cmd: exec.Command(bin), out: &syncBuffer{}, done: make(chan struct{})}
	w.cmd.Env = environ(env)
	w.cmd.Stdout, w.cmd.Stderr = w.out, w.out
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		w.err = w.cmd.Wait()
		close(w.done)
	}()
	t.Cleanup(func() {
		select {
		case <-w.done:
		default:
			_ = w.cmd.Process.Kill()
			<-w.done
		}
		if t.Failed() {
			t.Logf("worker output:\n%s", w.out.String())
		}
	})
	return w
}

// waitHealthy polls url until it answers 200, for at most 30 s.
func (w *workerProc) waitHealthy(t *testing.T, url string) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-w.done:
			t.Fatalf("the worker exited before %s answered: %v", url, w.err)
		case <-deadline:
			t.Fatalf("%s did not answer 200 within 30s (last: %v)", url, err)
		case <-tick.C:
		}
	}
}

// stop sends SIGTERM and checks that the worker drains and exits 0.
func (w *workerProc) stop(t *testing.T) {
	t.Helper()
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not exit within 30s of SIGTERM")
	}
	if w.err != nil {
		t.Errorf("the worker's exit after SIGTERM: %v, want 0", w.err)
	}
	scanner := bufio.NewScanner(strings.NewReader(w.out.String()))
	for scanner.Scan() {
		if strings.Contains(scanner.Text(), `"level":"error"`) {
			t.Errorf("the worker logged an error: %s", scanner.Text())
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the writes of a running process and
// the test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
