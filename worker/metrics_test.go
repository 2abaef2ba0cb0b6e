package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap/zaptest"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/internal/testwait"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/memstore"
	"github.com/pyrula/caseworker/worker"
)

// withRegistry replaces e's worker by one whose metrics go to a registry
// the test reads (setup's worker registers on a registry of its own).
func (e *env) withRegistry(st store.Store) *prometheus.Registry {
	e.t.Helper()
	reg := prometheus.NewRegistry()
	e.restart(worker.Params{Store: st, Registerer: reg, Logger: zaptest.NewLogger(e.t)})
	return reg
}

// sample is one series of a gathered metric: its labels and its value (a
// histogram's sample count, with its sum).
type sample struct {
	labels map[string]string
	value  float64
	sum    float64
}

// gather returns the series of metric name.
func gather(t *testing.T, reg *prometheus.Registry, name string) []sample {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var out []sample
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			s := sample{labels: map[string]string{}}
			for _, l := range m.GetLabel() {
				s.labels[l.GetName()] = l.GetValue()
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				s.value = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				s.value = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				s.value, s.sum = float64(m.GetHistogram().GetSampleCount()), m.GetHistogram().GetSampleSum()
			}
			out = append(out, s)
		}
	}
	return out
}

// value sums the series of name whose labels include want (pairs of name
// and value); found is false when there is none.
func value(t *testing.T, reg *prometheus.Registry, name string, want ...string) (v float64, found bool) {
	t.Helper()
	for _, s := range gather(t, reg, name) {
		match := true
		for i := 0; i+1 < len(want); i += 2 {
			if s.labels[want[i]] != want[i+1] {
				match = false
			}
		}
		if match {
			v, found = v+s.value, true
		}
	}
	return v, found
}

// wantValue fails unless the series of name matching want sum to v.
func wantValue(t *testing.T, reg *prometheus.Registry, v float64, name string, want ...string) {
	t.Helper()
	if got, _ := value(t, reg, name, want...); got != v {
		t.Errorf("%s%v = %v, want %v", name, want, got, v)
	}
}

// failStore fails every Stat of one hash and the first Stat of another
// (the store call every delete_case_bundle makes first), as a store outage
// would.
type failStore struct {
	store.Store
	always, once bundle.Hash
	failedOnce   chan struct{}
}

func (s *failStore) Stat(ctx context.Context, h bundle.Hash) (store.Info, error) {
	if h == s.always {
		return store.Info{}, errTransient
	}
	if h == s.once {
		select {
		case <-s.failedOnce:
		default:
			close(s.failedOnce)
			return store.Info{}, errTransient
		}
	}
	return s.Store.Stat(ctx, h)
}

// TestMetricsMessagesAddUp: after ok, refused, malformed, duplicate,
// retried and dead-lettered messages, the answered messages add up to the
// received ones (in total and by type) once nothing is in flight, and the
// store metrics count the deletes and the injected failures.
func TestMetricsMessagesAddUp(t *testing.T) {
	t.Parallel()
	always := bundle.Hash(strings.Repeat("1", 64))
	once := bundle.Hash(strings.Repeat("2", 64))
	st := &failStore{Store: memstore.New(memstore.Options{}), always: always, once: once, failedOnce: make(chan struct{})}
	e := setup(t, nil, nil)
	reg := e.withRegistry(st)

	e.send("ok1", "delete_case_bundle", map[string]any{"fixture_hash": zeroHash})
	e.send("bad1", "delete_case_bundle", map[string]any{"fixture_hash": "XYZ"})
	e.sendRaw("not json")
	e.sendRaw(`{"message_id":"has space","type":"delete_case_bundle","body":{}}`)
	e.send("dead1", "delete_case_bundle", map[string]any{"fixture_hash": always})
	e.send("retry1", "delete_case_bundle", map[string]any{"fixture_hash": once})
	e.waitReplies(6)
	e.send("ok1", "delete_case_bundle", map[string]any{"fixture_hash": zeroHash}) // a duplicate
	got := map[string]messages.Reply{}
	for _, r := range e.waitReplies(7) {
		got[r.MessageID] = r
	}
	wantReply(t, got["dead1"], messages.StatusError, messages.RuntimeError)
	wantReply(t, got["retry1"], messages.StatusOK, "")

	// The counters move just after the ack; wait until nothing is in flight
	// and everything received is answered.
	testwait.Eventually(t, 10*time.Second, "nothing in flight and every message answered", func() bool {
		inFlight, _ := value(t, reg, "pyrula_worker_messages_in_flight")
		answered, _ := value(t, reg, "pyrula_worker_messages_total")
		return inFlight == 0 && answered == 7
	})
	received, _ := value(t, reg, "pyrula_worker_messages_received_total")
	answered, _ := value(t, reg, "pyrula_worker_messages_total")
	inFlight, _ := value(t, reg, "pyrula_worker_messages_in_flight")
	if received != 7 || answered != received-inFlight {
		t.Errorf("%v received, %v answered, %v in flight: want 7 received, answered = received - in flight", received, answered, inFlight)
	}
	for _, typ := range []string{"delete_case_bundle", "unknown"} {
		received, _ := value(t, reg, "pyrula_worker_messages_received_total", "type", typ)
		answered, _ := value(t, reg, "pyrula_worker_messages_total", "type", typ)
		if received != answered {
			t.Errorf("type %s: %v received, %v answered", typ, received, answered)
		}
	}
	wantValue(t, reg, 5, "pyrula_worker_messages_received_total", "type", "delete_case_bundle")
	wantValue(t, reg, 2, "pyrula_worker_messages_received_total", "type", "unknown")
	wantValue(t, reg, 3, "pyrula_worker_messages_total", "type", "delete_case_bundle", "outcome", "ok")
	wantValue(t, reg, 1, "pyrula_worker_messages_total", "type", "delete_case_bundle", "outcome", "refused")
	wantValue(t, reg, 1, "pyrula_worker_messages_total", "type", "delete_case_bundle", "outcome", "error")
	wantValue(t, reg, 2, "pyrula_worker_messages_total", "type", "unknown", "outcome", "refused")
	wantValue(t, reg, 1, "pyrula_worker_dead_letters_total")
	wantValue(t, reg, 1, "pyrula_worker_duplicates_total")
	// dead1: delivered 3 times (MaxDeliveries), then dead-lettered;
	// retry1: delivered twice. Redeliveries are not received again.
	wantValue(t, reg, 3, "pyrula_worker_redeliveries_total")
	wantValue(t, reg, 4, "pyrula_worker_transient_failures_total")

	// The store (each delivery looks its bundle up before it claims the
	// message id, none is there to delete): ok1 and its duplicate, dead1
	// three times and retry1 twice; the four injected failures are
	// errors, an absent bundle is not.
	wantValue(t, reg, 7, "pyrula_worker_store_operation_duration_seconds", "backend", "memory", "op", "stat")
	wantValue(t, reg, 4, "pyrula_worker_store_errors_total", "backend", "memory", "op", "stat")
	wantValue(t, reg, 0, "pyrula_worker_store_operation_duration_seconds", "backend", "memory", "op", "delete")
	wantValue(t, reg, 0, "pyrula_worker_store_errors_total", "op", "open")

	// At rest: nothing pending or waiting on either stream.
	for _, stream := range []string{"case", "runs"} {
		wantValue(t, reg, 0, "pyrula_worker_stream_pending", "stream", stream)
		wantValue(t, reg, 0, "pyrula_worker_stream_lag", "stream", stream)
		wantValue(t, reg, 0, "pyrula_worker_stream_oldest_pending_age_seconds", "stream", stream)
		wantValue(t, reg, 1, "pyrula_worker_stream_consumers", "stream", stream)
	}
	wantValue(t, reg, 1, "pyrula_worker_build_info")
}

// blockStore blocks every Stat (what every delete_case_bundle does first)
// until release is closed.
type blockStore struct {
	store.Store
	entered chan struct{}
	release chan struct{}
}

func (s *blockStore) Stat(ctx context.Context, h bundle.Hash) (store.Info, error) {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	select {
	case <-s.release:
	case <-ctx.Done():
		return store.Info{}, ctx.Err()
	}
	return s.Store.Stat(ctx, h)
}

// TestMetricsStreamPendingAndLag: with the one slot busy, the entry being
// handled is pending (its age read from its id) and the entries behind it
// are lag; once it is released, both fall to zero. On Valkey and on the
// Valkey Cluster, where the scrape's commands go to the nodes of the two
// streams and the server clock is read apart from them.
func TestMetricsStreamPendingAndLag(t *testing.T) {
	t.Parallel()
	onServers(t, metricsStreamPendingAndLag)
}

func metricsStreamPendingAndLag(t *testing.T, setup newEnv) {
	st := &blockStore{Store: memstore.New(memstore.Options{}), entered: make(chan struct{}, 1), release: make(chan struct{})}
	e := setup(t, nil, func(c *worker.Config) { c.Concurrency = 1 })
	reg := e.withRegistry(st)

	// Neither stream has an entry yet: an explicit id 1 s after the epoch
	// makes the first message's age known without waiting.
	raw, _ := json.Marshal(map[string]any{"message_id": "p1", "type": "delete_case_bundle", "body": map[string]any{"fixture_hash": zeroHash}})
	err := e.client.Do(context.Background(), e.client.B().Xadd().Key(e.cfg.CaseStream).Id("1000-0").FieldValue().FieldValue("message", string(raw)).Build()).Error()
	if err != nil {
		t.Fatal(err)
	}
	<-st.entered
	e.send("p2", "delete_case_bundle", map[string]any{"fixture_hash": zeroHash})
	e.send("p3", "delete_case_bundle", map[string]any{"fixture_hash": zeroHash})

	wantValue(t, reg, 1, "pyrula_worker_stream_pending", "stream", "case")
	wantValue(t, reg, 2, "pyrula_worker_stream_lag", "stream", "case")
	wantValue(t, reg, 1, "pyrula_worker_stream_consumers", "stream", "case")
	age, _ := value(t, reg, "pyrula_worker_stream_oldest_pending_age_seconds", "stream", "case")
	if want := float64(time.Now().Unix() - 1); age < want-60 || age > want+60 {
		t.Errorf("oldest pending age %v s, want about %v s (its id is 1000-0)", age, want)
	}
	wantValue(t, reg, 1, "pyrula_worker_messages_in_flight")
	wantValue(t, reg, 1, "pyrula_worker_messages_received_total")
	wantValue(t, reg, 0, "pyrula_worker_messages_total")

	close(st.release)
	e.waitReplies(3)
	testwait.Eventually(t, 10*time.Second, "no lag, nothing pending", func() bool {
		lag, _ := value(t, reg, "pyrula_worker_stream_lag", "stream", "case")
		pending, _ := value(t, reg, "pyrula_worker_stream_pending", "stream", "case")
		age, _ := value(t, reg, "pyrula_worker_stream_oldest_pending_age_seconds", "stream", "case")
		return lag == 0 && pending == 0 && age == 0
	})
	wantValue(t, reg, 0, "pyrula_worker_stream_stats_errors_total")
}

// TestMetricsStreamUnreadable: a stream whose group is gone is left out of
// the scrape (not reported as zero) and counted as an error; the other
// stream is still reported.
func TestMetricsStreamUnreadable(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	reg := e.withRegistry(nil)
	// A key of the wrong type where the runs stream was: unlike a deleted
	// group, which the worker creates again, it stays unreadable.
	ctx := context.Background()
	runs := e.cfg.Namespace + ":runs"
	for _, cmd := range []valkey.Completed{e.client.B().Del().Key(runs).Build(), e.client.B().Set().Key(runs).Value("not a stream").Build()} {
		if err := e.client.Do(ctx, cmd).Error(); err != nil {
			t.Fatal(err)
		}
	}
	if _, found := value(t, reg, "pyrula_worker_stream_pending", "stream", "runs"); found {
		t.Error("the runs stream is reported without its group")
	}
	// Each gather is a scrape, and each failed.
	if n, _ := value(t, reg, "pyrula_worker_stream_stats_errors_total", "stream", "runs"); n < 1 {
		t.Errorf("%v errors counted for the runs stream, want at least 1", n)
	}
	wantValue(t, reg, 0, "pyrula_worker_stream_stats_errors_total", "stream", "case")
	if _, found := value(t, reg, "pyrula_worker_stream_pending", "stream", "case"); !found {
		t.Error("the case stream is not reported")
	}
	// After Stop nothing is read from Valkey any more.
	if err := e.w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, found := value(t, reg, "pyrula_worker_stream_pending"); found {
		t.Error("stream metrics reported after Stop")
	}
}

// caseOutcome returns the case:outcome event's fields of run runID.
func (e *env) caseOutcome(runID string) map[string]json.RawMessage {
	e.t.Helper()
	events := e.waitRun(runID, 20*time.Second)
	for _, ev := range events {
		if ev.Kind == "case:outcome" {
			return ev.Extra
		}
	}
	e.t.Fatalf("run %s has no case:outcome: %v", runID, events)
	return nil
}

// TestMetricsCaseRunsAndBundles: the case calls by provenance and the live
// spend are those of the case outcomes; a saved and a read bundle are
// observed in the store metrics with their stored size.
func TestMetricsCaseRunsAndBundles(t *testing.T) {
	t.Parallel()
	st := memstore.New(memstore.Options{})
	hash := saveRecorded(t, st)
	e := setup(t, nil, nil)
	reg := e.withRegistry(st)
	src := e.record("support_agent")

	e.send("c1", "run_case", map[string]any{"target_name": "checkout",
		"source": map[string]any{"bundle": map[string]any{"fixture_hash": hash}}, "options": map[string]any{"replay_only": true}})
	// Another system prompt: the model calls after the fork run live.
	e.send("c2", "run_case", map[string]any{"target_name": "support_agent",
		"source":  map[string]any{"journal": map[string]any{"run_id": src, "fork_after_seq": 0}},
		"options": map[string]any{"prompt": "Be brief.", "allow_write": []string{"tool:refund"}}})
	e.send("s1", "save_case", map[string]any{"target_name": "support_agent", "run_id": src})
	got := map[string]messages.Reply{}
	for _, r := range e.waitReplies(3) {
		got[r.MessageID] = r
	}
	wantProv := map[string]float64{}
	var wantCost float64
	for _, id := range []string{"c1", "c2"} {
		o := e.caseOutcome(runResult(t, got[id]).RunID)
		var prov map[string]int
		var prefix int
		var cost float64
		if err := errors.Join(json.Unmarshal(o["provenance"], &prov), json.Unmarshal(o["prefix_calls"], &prefix), json.Unmarshal(o["cost_usd"], &cost)); err != nil {
			t.Fatalf("%s outcome %v: %v", id, o, err)
		}
		for p, n := range prov {
			wantProv[p] += float64(n)
		}
		wantProv["prefix"] += float64(prefix)
		wantCost += cost
	}
	if wantProv["reused"]+wantProv["prefix"] == 0 || wantProv["live"]+wantProv["changed"] == 0 || wantCost <= 0 {
		t.Fatalf("the case runs did not both replay and go live: provenances %v, cost %v", wantProv, wantCost)
	}
	t.Logf("case calls by provenance %v, live cost %v USD", wantProv, wantCost)
	// The runs' counters move after their terminal events.
	testwait.Eventually(t, 10*time.Second, "two case runs counted", func() bool {
		n, _ := value(t, reg, "pyrula_worker_runs_total", "kind", "case")
		return n == 2
	})
	for p, n := range wantProv {
		wantValue(t, reg, n, "pyrula_worker_case_calls_total", "provenance", p)
	}
	if cost, _ := value(t, reg, "pyrula_worker_live_cost_usd_total"); fmt.Sprintf("%.9f", cost) != fmt.Sprintf("%.9f", wantCost) {
		t.Errorf("live cost %v, want %v", cost, wantCost)
	}

	// Bundles: c1 read the recorded case, s1 saved the support run.
	var saved messages.SaveCaseResult
	wantReply(t, got["s1"], messages.StatusOK, "")
	if err := json.Unmarshal(got["s1"].Result, &saved); err != nil {
		t.Fatal(err)
	}
	for op, h := range map[string]string{"open": hash, "put": saved.FixtureHash} {
		info, err := st.Stat(context.Background(), bundle.Hash(h))
		if err != nil {
			t.Fatal(err)
		}
		var hist []sample
		for _, s := range gather(t, reg, "pyrula_worker_bundle_bytes") {
			if s.labels["op"] == op {
				hist = append(hist, s)
			}
		}
		if len(hist) != 1 || hist[0].value != 1 || hist[0].sum != float64(info.Size) {
			t.Errorf("bundle_bytes{op=%s} = %+v, want one bundle of %d bytes", op, hist, info.Size)
		}
		wantValue(t, reg, 1, "pyrula_worker_store_operation_duration_seconds", "backend", "memory", "op", op)
	}
	wantValue(t, reg, 0, "pyrula_worker_store_errors_total")
}

// TestMetricsScrapeBoundedWhenValkeyHangs: with Valkey not answering (a
// private redis-server stopped with SIGSTOP), a scrape still returns within
// about the stream metrics' 1 s timeout, leaving the stream gauges out and
// counting the errors.
func TestMetricsScrapeBoundedWhenValkeyHangs(t *testing.T) {
	t.Parallel()
	testenv.ValkeyURL(t) // needs what every worker test needs
	if _, err := os.Stat("/usr/bin/redis-server"); err != nil {
		if testenv.Required() {
			t.Fatalf("/usr/bin/redis-server: %v", err)
		}
		t.Skipf("no /usr/bin/redis-server: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv := exec.Command("/usr/bin/redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", t.TempDir(), "--save", "", "--appendonly", "no")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = srv.Process.Signal(syscall.SIGCONT)
		_ = srv.Process.Kill()
		_ = srv.Wait()
	})
	var c valkey.Client
	testwait.Eventually(t, 10*time.Second, "a client of the test server", func() bool {
		c, err = valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		return err == nil
	})
	t.Cleanup(c.Close)
	reg := prometheus.NewRegistry()
	w, err := worker.New(worker.Config{Namespace: "metrics", ConsumerName: "c1"}, worker.Params{Client: c, Registerer: reg, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantValue(t, reg, 0, "pyrula_worker_stream_pending", "stream", "case")

	if err := srv.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, found := value(t, reg, "pyrula_worker_stream_pending")
	took := time.Since(start)
	t.Logf("scrape with Valkey stopped: %v", took)
	if took > 3*time.Second {
		t.Errorf("a scrape took %v with Valkey not answering, want about 1 s", took)
	}
	if found {
		t.Error("stream gauges reported while Valkey does not answer")
	}
	if err := srv.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for _, stream := range []string{"case", "runs"} {
		if n, _ := value(t, reg, "pyrula_worker_stream_stats_errors_total", "stream", stream); n < 1 {
			t.Errorf("%v errors counted for the %s stream, want at least 1", n, stream)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}
