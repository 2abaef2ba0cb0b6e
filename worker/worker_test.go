package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap/zaptest"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/examples"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/flow/journallog"
	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/internal/testwait"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/memstore"
	"github.com/pyrula/caseworker/worker"
)

// env is one test's worker: real Redis, a namespace of its own.
type env struct {
	t      *testing.T
	client valkey.Client
	cfg    worker.Config
	reg    *flow.Registry
	w      *worker.Worker
	// getenv, when set, is the workers' environment of model clients.
	getenv func(string) string
}

func setup(t *testing.T, st store.Store, mod func(*worker.Config)) *env {
	t.Helper()
	return setupWith(t, testenv.ValkeyClient(t), st, mod)
}

// setupWith is setup on a given server connection (real Valkey, the Valkey
// Cluster, or the embedded server of conformance_test.go).
func setupWith(t *testing.T, c valkey.Client, st store.Store, mod func(*worker.Config)) *env {
	t.Helper()
	return setupOn(t, c, st, mod, nil)
}

// setupRegistered is setup with more registered in the worker's registry
// (model clients, targets) by register.
func setupRegistered(t *testing.T, st store.Store, mod func(*worker.Config), register func(*flow.Registry) error) *env {
	t.Helper()
	return setupOn(t, testenv.ValkeyClient(t), st, mod, register)
}

func setupOn(t *testing.T, c valkey.Client, st store.Store, mod func(*worker.Config), register func(*flow.Registry) error) *env {
	t.Helper()
	cfg := worker.Config{Namespace: testenv.UniqueName(t, "wk"), ConsumerName: "c1", Concurrency: 4, ClaimIdle: 100 * time.Millisecond, MaxDeliveries: 3}
	if mod != nil {
		mod(&cfg)
	}
	ns := cfg.Namespace // mod may choose one (still the test's own)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := testenv.DeleteNamespace(ctx, c, ns); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	reg := flow.NewRegistry()
	if _, err := examples.Register(reg); err != nil {
		t.Fatal(err)
	}
	if register != nil {
		if err := register(reg); err != nil {
			t.Fatal(err)
		}
	}
	e := &env{t: t, client: c, cfg: cfg, reg: reg}
	e.start(st)
	return e
}

func (e *env) start(st store.Store) {
	e.t.Helper()
	w, err := worker.New(e.cfg, worker.Params{Client: e.client, Store: st, Registry: e.reg, Registerer: prometheus.NewRegistry(), Logger: zaptest.NewLogger(e.t), Getenv: e.getenv})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.cfg = w.Config()
	e.w = w
	e.t.Cleanup(func() { w.Stop(context.Background()) })
}

// restart replaces e's worker by one made with p, to which it adds e's
// client and registry (a test's own registerer, logger or tracer).
func (e *env) restart(p worker.Params) {
	e.t.Helper()
	if err := e.w.Stop(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	p.Client, p.Registry = e.client, e.reg
	w, err := worker.New(e.cfg, p)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.w = w
	e.t.Cleanup(func() { w.Stop(context.Background()) })
}

func (e *env) send(id, typ string, body any) {
	e.t.Helper()
	raw, _ := json.Marshal(body)
	msg, _ := json.Marshal(map[string]any{"message_id": id, "type": typ, "body": json.RawMessage(raw)})
	e.sendRaw(string(msg))
}

func (e *env) sendRaw(msg string) {
	e.t.Helper()
	err := e.client.Do(context.Background(), e.client.B().Xadd().Key(e.cfg.CaseStream).Id("*").FieldValue().FieldValue("message", msg).Build()).Error()
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) replies() []messages.Reply {
	e.t.Helper()
	entries, err := e.client.Do(context.Background(), e.client.B().Xrange().Key(e.cfg.ReplyStream).Start("-").End("+").Build()).AsXRange()
	if err != nil {
		e.t.Fatal(err)
	}
	var out []messages.Reply
	for _, en := range entries {
		var r messages.Reply
		if err := json.Unmarshal([]byte(en.FieldValues["reply"]), &r); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// waitReplies polls (bounded) until n replies arrived, and checks nothing is pending.
func (e *env) waitReplies(n int) []messages.Reply {
	e.t.Helper()
	var got []messages.Reply
	testwait.Eventually(e.t, 10*time.Second, "the replies, nothing pending", func() bool { got = e.replies(); return len(got) >= n && e.pending() == 0 })
	if len(got) != n {
		e.t.Fatalf("%d replies, want %d: %+v", len(got), n, got)
	}
	return got
}

func (e *env) pending() int64 {
	res, err := e.client.Do(context.Background(), e.client.B().Xpending().Key(e.cfg.CaseStream).Group(e.cfg.ConsumerGroup).Build()).ToArray()
	if err != nil {
		e.t.Fatal(err)
	}
	n, _ := res[0].AsInt64()
	return n
}

func wantReply(t *testing.T, r messages.Reply, status messages.ReplyStatus, code messages.Code) {
	t.Helper()
	if r.Status != status || r.Code != code {
		t.Fatalf("reply %+v, want %s %s", r, status, code)
	}
}

// record runs target live into the env's journal, as `pyrula run` does.
func (e *env) record(target string) string {
	e.t.Helper()
	j, err := valkeyjournal.New(e.client, valkeyjournal.Options{Namespace: e.cfg.Namespace})
	if err != nil {
		e.t.Fatal(err)
	}
	log, err := journallog.New(j, journallog.Options{Owner: "test"})
	if err != nil {
		e.t.Fatal(err)
	}
	rt, err := host.NewRuntime(host.Config{Registry: e.reg, Log: log})
	if err != nil {
		e.t.Fatal(err)
	}
	runID := testenv.UniqueName(e.t, "run")
	out, err := rt.Run(context.Background(), host.RunParams{RunID: runID, Target: target})
	if err != nil || out.Status != host.StatusComplete {
		e.t.Fatalf("run: %v %+v", err, out)
	}
	return runID
}

const zeroHash = "0000000000000000000000000000000000000000000000000000000000000000"

func TestDeleteCaseBundle(t *testing.T) {
	t.Parallel()
	e := setup(t, memstore.New(memstore.Options{}), nil)
	e.send("d1", "delete_case_bundle", map[string]any{"fixture_hash": zeroHash})
	e.send("d2", "delete_case_bundle", map[string]any{"fixture_hash": "XYZ"})
	e.send("d3", "delete_case_bundle", map[string]any{"fixture_hash": zeroHash, "fixture_store": "file:///elsewhere"})
	e.send("d4", "delete_case_bundle", map[string]any{"fixture_hash": zeroHash, "fixture_store": "memory:"})
	got := map[string]messages.Reply{}
	for _, r := range e.waitReplies(4) {
		got[r.MessageID] = r
	}
	wantReply(t, got["d1"], messages.StatusOK, "")
	if string(got["d1"].Result) != `{"deleted":false}` {
		t.Errorf("result %s", got["d1"].Result)
	}
	wantReply(t, got["d2"], messages.StatusRefused, messages.InvalidFixtureHash)
	wantReply(t, got["d3"], messages.StatusRefused, messages.BindingMismatch)
	wantReply(t, got["d4"], messages.StatusOK, "")
}

func TestNoFixtureStore(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	e.send("n1", "delete_case_bundle", map[string]any{"fixture_hash": zeroHash})
	e.send("n2", "save_case", map[string]any{"target_name": "checkout", "run_id": "run_x"})
	for _, r := range e.waitReplies(2) {
		wantReply(t, r, messages.StatusRefused, messages.NoFixtureStore)
	}
}

func TestSaveCaseAndDuplicates(t *testing.T) {
	t.Parallel()
	st := &countingStore{Store: memstore.New(memstore.Options{})}
	e := setup(t, st, nil)
	runID := e.record("checkout")
	body := map[string]any{"target_name": "checkout", "run_id": runID, "kind": "workflow"}
	e.send("s1", "save_case", body)
	first := e.waitReplies(1)[0]
	wantReply(t, first, messages.StatusOK, "")
	var res messages.SaveCaseResult
	if err := json.Unmarshal(first.Result, &res); err != nil || res.FixtureStore != "memory:" {
		t.Fatalf("result %s: %v", first.Result, err)
	}
	h, err := bundle.ParseHash(res.FixtureHash)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Stat(context.Background(), h); err != nil {
		t.Fatalf("the bundle is not in the store: %v", err)
	}
	// The same message again (keys in another order): the same reply, no work.
	e.sendRaw(fmt.Sprintf(`{"type":"save_case","body":{"kind":"workflow", "run_id":%q,"target_name":"checkout"},"message_id":"s1"}`, runID))
	e.waitReplies(2)
	// The same id with another body: refused.
	e.send("s1", "save_case", map[string]any{"target_name": "checkout", "run_id": runID})
	got := e.waitReplies(3)
	if string(got[1].Result) != string(first.Result) || got[1].Status != messages.StatusOK {
		t.Errorf("duplicate reply %+v, want %+v", got[1], first)
	}
	wantReply(t, got[2], messages.StatusRefused, messages.InvalidOverrides)
	if n := st.puts.Load(); n != 1 {
		t.Errorf("%d puts, want 1", n)
	}
	// Unknown runs and targets are refused.
	e.send("s2", "save_case", map[string]any{"target_name": "checkout", "run_id": "run_nope"})
	e.waitReplies(4)
	e.send("s3", "save_case", map[string]any{"target_name": "support_agent", "run_id": runID})
	got = e.waitReplies(5)
	wantReply(t, got[3], messages.StatusRefused, messages.CaptureIncomplete)
	wantReply(t, got[4], messages.StatusRefused, messages.InvalidOverrides)
}

func TestMalformedRefusedAndAcked(t *testing.T) {
	t.Parallel()
	e := setup(t, memstore.New(memstore.Options{}), func(c *worker.Config) { c.MaxMessageBytes = 200 })
	e.sendRaw("not json")
	e.sendRaw(`{"type":"delete_case_bundle","body":{}}`)
	e.send("m3", "frobnicate", map[string]any{})
	e.send("m4", "delete_case_bundle", nil)
	e.send("m5", "save_case", map[string]any{"run_id": "r"})
	e.sendRaw(`{"message_id":"m6","type":"delete_case_bundle","body":{"fixture_hash":"` + strings.Repeat("a", 300) + `"}}`)
	e.send("m7", "run_case", map[string]any{})
	withEntry := 0
	for _, r := range e.waitReplies(7) {
		wantReply(t, r, messages.StatusRefused, messages.InvalidOverrides)
		if r.MessageID == "" && r.EntryID != "" {
			withEntry++
		}
	}
	if withEntry != 3 {
		t.Errorf("%d refusals name their entry, want 3 (no JSON, no id, too large)", withEntry)
	}
}

// countingStore counts Puts and fails the first fails operations.
type countingStore struct {
	store.Store
	puts  atomic.Int64
	fails atomic.Int64
}

var errTransient = errors.New("injected store outage")

func (s *countingStore) Put(ctx context.Context, h bundle.Hash, r io.Reader) (bool, error) {
	s.puts.Add(1)
	return s.Store.Put(ctx, h, r)
}

// Stat and Delete fail while injected failures (fails) are left.
func (s *countingStore) Stat(ctx context.Context, h bundle.Hash) (store.Info, error) {
	if s.fails.Add(-1) >= 0 {
		return store.Info{}, errTransient
	}
	return s.Store.Stat(ctx, h)
}

func (s *countingStore) Delete(ctx context.Context, h bundle.Hash) (bool, error) {
	if s.fails.Add(-1) >= 0 {
		return false, errTransient
	}
	return s.Store.Delete(ctx, h)
}

func TestTransientFailureRetried(t *testing.T) {
	t.Parallel()
	st := &countingStore{Store: memstore.New(memstore.Options{})}
	st.fails.Store(2)
	e := setup(t, st, nil)
	e.send("t1", "delete_case_bundle", map[string]any{"fixture_hash": zeroHash})
	r := e.waitReplies(1)[0]
	wantReply(t, r, messages.StatusOK, "")
}

func TestDeadLetter(t *testing.T) {
	t.Parallel()
	st := &countingStore{Store: memstore.New(memstore.Options{})}
	st.fails.Store(1000)
	e := setup(t, st, nil)
	e.send("x1", "delete_case_bundle", map[string]any{"fixture_hash": zeroHash})
	r := e.waitReplies(1)[0]
	wantReply(t, r, messages.StatusError, messages.RuntimeError)
	if !strings.Contains(r.Message, "injected store outage") {
		t.Errorf("message %q lacks the last error", r.Message)
	}
	dead, err := e.client.Do(context.Background(), e.client.B().Xrange().Key(e.cfg.CaseStream+":dead").Start("-").End("+").Build()).AsXRange()
	if err != nil || len(dead) != 1 || !strings.Contains(dead[0].FieldValues["error"], "injected") {
		t.Fatalf("dead letters %+v, %v", dead, err)
	}
	// A resend gets the same reply.
	e.send("x1", "delete_case_bundle", map[string]any{"fixture_hash": zeroHash})
	got := e.waitReplies(2)
	if got[1].Message != r.Message || got[1].Status != r.Status {
		t.Errorf("resend %+v, want %+v", got[1], r)
	}
}

func TestGracefulStop(t *testing.T) {
	t.Parallel()
	st := &stuckStore{Store: memstore.New(memstore.Options{}), entered: make(chan struct{}), release: make(chan struct{})}
	e := setup(t, st, nil)
	e.send("g1", "delete_case_bundle", map[string]any{"fixture_hash": zeroHash})
	<-st.entered
	stopped := make(chan error, 1)
	go func() { stopped <- e.w.Stop(context.Background()) }()
	testwait.Eventually(t, 5*time.Second, "the worker not ready", func() bool { return !e.w.Ready() })
	close(st.release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	wantReply(t, e.waitReplies(1)[0], messages.StatusOK, "")
	if err := e.w.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

func TestStopBeforeStartAndConfig(t *testing.T) {
	t.Parallel()
	w, err := worker.New(worker.Config{Namespace: "x", ConsumerName: "c"}, worker.Params{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err = worker.New(worker.Config{Namespace: "x", ConsumerName: "c", LogFormat: "xml"}, worker.Params{})
	var se *worker.SettingError
	if !errors.As(err, &se) || se.Variable != "PYRULA_LOG_FORMAT" {
		t.Fatalf("err %v, want an invalid setting naming PYRULA_LOG_FORMAT", err)
	}
}

// TestWaitReplicasHoldsTheAck: with PYRULA_WAIT_REPLICAS above the replicas
// the server has (the test Redis has none), WAIT comes back short after
// PYRULA_WAIT_TIMEOUT, so the message is neither answered nor acked: it
// stays pending to be retried, its last error saying why.
func TestWaitReplicasHoldsTheAck(t *testing.T) {
	t.Parallel()
	e := setup(t, memstore.New(memstore.Options{}), func(c *worker.Config) {
		c.WaitReplicas = 1
		c.WaitTimeout = 100 * time.Millisecond
		c.MaxDeliveries = 100
	})
	e.send("w1", "delete_case_bundle", map[string]any{"fixture_hash": zeroHash})
	ctx := context.Background()
	key := e.cfg.Namespace + ":msg:{w1}"
	// The delivery failed once WAIT came back with 0 of 1 replicas: the
	// worker kept that error for the message's dead letter. It comes after
	// PYRULA_WAIT_TIMEOUT: well within 4.5 s, which the 5 s default would
	// not be.
	var lastErr string
	testwait.Eventually(t, 4500*time.Millisecond, "the failed WAIT's error", func() bool {
		v, err := e.client.Do(ctx, e.client.B().Get().Key(key+":error").Build()).ToString()
		lastErr = v
		return err == nil
	})
	if want := "wait for replicas: 0 of 1 acknowledged"; !strings.Contains(lastErr, want) {
		t.Fatalf("last error %q, want %q", lastErr, want)
	}
	if n, err := e.client.Do(ctx, e.client.B().Exists().Key(key).Build()).AsInt64(); err != nil || n != 1 {
		t.Fatalf("idempotency record: %d, %v; want it written before the WAIT", n, err)
	}
	if got := e.replies(); len(got) != 0 {
		t.Fatalf("replies without the replicas: %+v", got)
	}
	if p := e.pending(); p != 1 {
		t.Fatalf("pending = %d, want the message held", p)
	}
}

// TestLoopClient: a worker given a LoopClient sends its message loop's
// round trips on it (the handlers' records, replies and acks, the reads of
// new messages between them), and every message is answered and acked.
func TestLoopClient(t *testing.T) {
	t.Parallel()
	st := memstore.New(memstore.Options{})
	e := setup(t, st, nil)
	loop := &commandNames{Client: testenv.ValkeyClient(t), seen: map[string]int{}}
	e.restart(worker.Params{LoopClient: loop, Store: st, Registerer: prometheus.NewRegistry(), Logger: zaptest.NewLogger(t)})
	const n = 20
	for i := range n {
		e.send(fmt.Sprintf("d%d", i), "delete_case_bundle", map[string]any{"fixture_hash": zeroHash})
	}
	for _, r := range e.waitReplies(n) {
		wantReply(t, r, messages.StatusOK, "")
	}
	testwait.Eventually(t, 10*time.Second, "every message acked", func() bool { return e.pending() == 0 })
	// Each message's finishing script (its record, reply and ack) and
	// the reads between rounds.
	seen := loop.names()
	if seen["XREADGROUP"] == 0 || seen["EVALSHA"]+seen["EVAL"] < n {
		t.Errorf("the LoopClient carried %v; want the %d messages' finishing scripts (EVALSHA) and reads (XREADGROUP)", seen, n)
	}
}

// TestLoopClientWithoutClient: New refuses a LoopClient without the Client
// it goes with.
func TestLoopClientWithoutClient(t *testing.T) {
	t.Parallel()
	_, err := worker.New(worker.Config{Namespace: "unused", ConsumerName: "c1"}, worker.Params{LoopClient: testenv.ValkeyClient(t)})
	if err == nil || !strings.Contains(err.Error(), "LoopClient is set without Params.Client") {
		t.Fatalf("New with a LoopClient alone: %v; want the refusal naming both", err)
	}
}

// commandNames counts the commands sent through it by name.
type commandNames struct {
	valkey.Client
	mu   sync.Mutex
	seen map[string]int
}

func (c *commandNames) count(cmds ...valkey.Completed) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cmd := range cmds {
		c.seen[strings.ToUpper(cmd.Commands()[0])]++
	}
}

func (c *commandNames) Do(ctx context.Context, cmd valkey.Completed) valkey.ValkeyResult {
	c.count(cmd)
	return c.Client.Do(ctx, cmd)
}

func (c *commandNames) DoMulti(ctx context.Context, cmds ...valkey.Completed) []valkey.ValkeyResult {
	c.count(cmds...)
	return c.Client.DoMulti(ctx, cmds...)
}

func (c *commandNames) names() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.seen)
}
