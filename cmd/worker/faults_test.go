package main_test

// Process-level fault tests: real worker processes, real Redis
// and PostgreSQL. Each one asserts that every message gets its reply (all
// replies of a message id identical; exactly one where nothing crashed),
// that every submitted run reaches exactly one terminal event, and that no
// call completes twice.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/internal/testwait"
)

// randomHash is a bundle hash that no store holds.
func randomHash(t *testing.T) string {
	t.Helper()
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// checkoutRun is a start_run of the example checkout workflow, whose
// durable sleep lasts delayMS.
func checkoutRun(id string, delayMS int) envelope {
	return envelope{MessageID: id, Type: "start_run", Body: map[string]any{
		"target_name": "checkout", "inputs": map[string]any{"delay_ms": delayMS},
	}}
}

// deleteBundle is a delete_case_bundle of hash.
func deleteBundle(id, hash string) envelope {
	return envelope{MessageID: id, Type: "delete_case_bundle", Body: map[string]any{"fixture_hash": hash}}
}

// burst is n messages, every third a start_run of checkout, the others
// delete_case_bundle of bundles no store holds; and how often each id was
// sent.
func burst(t *testing.T, prefix string, n int) ([]any, map[string]int) {
	msgs := make([]any, 0, n)
	sent := map[string]int{}
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if i%3 == 0 {
			msgs = append(msgs, checkoutRun(id, 0))
		} else {
			msgs = append(msgs, deleteBundle(id, randomHash(t)))
		}
		sent[id]++
	}
	return msgs, sent
}

// waitAllReplied waits until every message id of sent has a reply.
func waitAllReplied(t *testing.T, c valkey.Client, stream string, sent map[string]int, within time.Duration) {
	t.Helper()
	missing := len(sent)
	testwait.Eventually(t, within, "a reply to every message", func() bool {
		rs := allReplies(t, c, stream)
		missing = 0
		for id := range sent {
			if len(rs[id]) == 0 {
				missing++
			}
		}
		if missing > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		return missing == 0
	})
}

// checkBurst makes the checks of a burst once every message was replied
// to: the replies (exactly one per send when exact), all ok; every run
// finished exactly once; nothing left pending.
func checkBurst(t *testing.T, c valkey.Client, ns string, sent map[string]int, exact bool) {
	t.Helper()
	replies := allReplies(t, c, ns+":case-replies").check(t, sent, exact)
	var runs []string
	for id, r := range replies {
		if r.Status != "ok" {
			t.Errorf("message %s: %s %s %s, want ok", id, r.Status, r.Code, r.Message)
		}
		if run := runResultID(r); run != "" {
			runs = append(runs, run)
		}
	}
	waitRunsFinished(t, c, ns, runs, 60*time.Second)
	journals := checkRuns(t, c, ns, runs)
	for _, id := range runs {
		if n := journals[id].callsDone()["step:reserve:0"]; n != 1 {
			t.Errorf("run %s: reserve (a write) completed %d times, want once", id, n)
		}
	}
	waitNothingPending(t, c, ns, 30*time.Second)
	if t.Failed() {
		return
	}
	t.Logf("%d messages, %d runs (%d journals with the child runs), all replied to and finished once", len(sent), len(runs), len(journals))
}

// TestSIGKILLWhileHandlingAMessage: a worker process is killed while it
// handles messages; another one finishes them.
func TestSIGKILLWhileHandlingAMessage(t *testing.T) {
	url := testenv.ValkeyURL(t)

	// Deterministic: the message is blocked in the store (a row lock held
	// by the test) when its worker is killed.
	t.Run("blocked in the store", func(t *testing.T) {
		dsn := testenv.PostgresDSN(t)
		if r := run(t, 2*time.Minute, []string{"PYRULA_POSTGRES_DSN=" + dsn}, "db", "migrate"); r.code != 0 {
			t.Fatalf("migrate\n%s", r)
		}
		ns := testenv.UniqueName(t, "wfault")
		client := testenv.ValkeyClientAt(t, url, ns)
		hash, release := lockedBundle(t, dsn)
		env := []string{"PYRULA_FIXTURE_STORE=" + dsn, "PYRULA_CLAIM_IDLE=500ms"}
		a := startReady(t, workerEnv(url, ns, "a", env...)...)
		sendAll(t, client, ns+":case-messages", []any{deleteBundle("kill-1", hash)})
		testwait.Eventually(t, 10*time.Second, "the message in flight on a", func() bool { return a.inFlight() == 1 })
		a.sigkill()

		b := startReady(t, workerEnv(url, ns, "b", env...)...)
		testwait.Eventually(t, 10*time.Second, "b reclaiming the message", func() bool { return b.inFlight() == 1 })
		if n := streamLen(client, ns+":case-replies"); n != 0 {
			t.Fatalf("%d replies while the message is still blocked", n)
		}
		release()
		waitLen(t, client, ns+":case-replies", 1, 15*time.Second)
		replies := allReplies(t, client, ns+":case-replies").check(t, map[string]int{"kill-1": 1}, true)
		// The killed worker's DELETE may still be waiting in PostgreSQL
		// (its server process notices the closed connection only when it
		// next writes to it) and take the row when the lock goes: then b
		// finds nothing to delete. Either way the bundle is deleted once
		// and the message answered ok.
		r := replies["kill-1"]
		if res := string(r.Result); r.Status != "ok" || res != `{"deleted":true}` && res != `{"deleted":false}` {
			t.Errorf("reply %+v (result %s), want ok with deleted", r, r.Result)
		}
		t.Logf("reply: %s %s", r.Status, r.Result)
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var rows int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM archive.case_bundles WHERE hash = $1`, hash).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if rows != 0 {
			t.Errorf("the bundle is still stored after its delete was answered ok")
		}
		waitNothingPending(t, client, ns, 10*time.Second)
		if !strings.Contains(b.logs(), "reclaimed a pending entry") {
			t.Errorf("b did not log reclaiming the entry")
		}
	})

	// At whatever point each message is when the worker dies: a burst of
	// start_run and delete_case_bundle messages over two workers, one
	// killed while it has messages in flight.
	t.Run("burst", func(t *testing.T) {
		ns := testenv.UniqueName(t, "wfault")
		client := testenv.ValkeyClientAt(t, url, ns)
		env := []string{"PYRULA_FIXTURE_STORE=memory:", "PYRULA_CLAIM_IDLE=500ms", "PYRULA_RUN_LEASE=2s"}
		a := startReady(t, workerEnv(url, ns, "a", env...)...)
		startReady(t, workerEnv(url, ns, "b", env...)...)
		msgs, sent := burst(t, "m", 300)
		sendAll(t, client, ns+":case-messages", msgs)
		n := 0
		testwait.Eventually(t, 30*time.Second, "a handling messages mid-burst", func() bool {
			n = a.inFlight()
			return n > 0 && streamLen(client, ns+":case-replies") >= 20
		})
		a.sigkill()
		t.Logf("a killed with %d message(s) in flight, %d replies published", n, streamLen(client, ns+":case-replies"))
		waitAllReplied(t, client, ns+":case-replies", sent, 60*time.Second)
		checkBurst(t, client, ns, sent, false)
	})
}

// TestSIGKILLInTheMiddleOfARun: the worker process executing a run is
// killed while the run sleeps (durably) after its write step; the other
// worker reclaims the run once its lease lapsed and finishes it without
// repeating a call.
func TestSIGKILLInTheMiddleOfARun(t *testing.T) {
	url := testenv.ValkeyURL(t)
	ns := testenv.UniqueName(t, "wfault")
	client := testenv.ValkeyClientAt(t, url, ns)
	env := []string{"PYRULA_FIXTURE_STORE=memory:", "PYRULA_CLAIM_IDLE=500ms", "PYRULA_RUN_LEASE=2s"}
	workers := map[string]*daemon{
		"a": startReady(t, workerEnv(url, ns, "a", env...)...),
		"b": startReady(t, workerEnv(url, ns, "b", env...)...),
	}
	sendAll(t, client, ns+":case-messages", []any{checkoutRun("slow-1", 4000)})
	got, _ := readReplies(t, client, ns+":case-replies", "0", 1, 15*time.Second)
	runID := runResultID(got[0])
	if runID == "" {
		t.Fatalf("reply %+v, want an ok start_run", got[0])
	}
	testwait.Eventually(t, 15*time.Second, "the run sleeping after its reserve step", func() bool {
		for _, e := range readJournal(t, client, ns, runID).events {
			if e.Kind == "call:start" && e.Call != nil && e.Call.Kind == "sleep" {
				return true
			}
		}
		return false
	})
	// The lease owner is "<consumer>/<random>": kill that worker.
	owner, err := client.Do(t.Context(), client.B().Hget().Key(ns+":{"+runID+"}:meta").Field("lease_owner").Build()).ToString()
	if err != nil {
		t.Fatalf("read the run's lease owner: %v", err)
	}
	name, _, _ := strings.Cut(owner, "/")
	victim, ok := workers[name]
	if !ok {
		t.Fatalf("the run's lease owner is %q, not a or b", owner)
	}
	delete(workers, name)
	victim.sigkill()
	killed := time.Now()
	var survivor *daemon
	for _, d := range workers {
		survivor = d
	}

	waitRunsFinished(t, client, ns, []string{runID}, 30*time.Second)
	t.Logf("worker %s killed in the run's sleep; the run finished %v later", name, time.Since(killed).Round(time.Millisecond))
	journals := checkRuns(t, client, ns, []string{runID})
	j := journals[runID]
	if term := j.terminal(); len(term) != 1 || term[0].Kind != "run:complete" {
		t.Errorf("terminal events %+v, want one run:complete", term)
	}
	done := j.callsDone()
	for _, call := range []string{"step:quote:0", "step:reserve:0", "sleep:0", "step:child:0"} {
		if done[call] != 1 {
			t.Errorf("call %s completed %d times, want once (calls done: %v)", call, done[call], done)
		}
	}
	child := journals[runID+"/child:0"]
	if n := child.callsDone()["step:send_email:0"]; n != 1 {
		t.Errorf("the child run's send_email (a write) completed %d times, want once", n)
	}
	if !strings.Contains(survivor.logs(), "reclaimed a runs entry") {
		t.Errorf("the surviving worker did not log reclaiming the run")
	}
	allReplies(t, client, ns+":case-replies").check(t, map[string]int{"slow-1": 1}, true)
	waitNothingPending(t, client, ns, 15*time.Second)
}

// TestRedisRestartWithMessagesInFlight: a private Redis (fsynced AOF) is
// killed and restarted while two workers handle a burst; they reconnect
// and every message and run still ends exactly once.
func TestRedisRestartWithMessagesInFlight(t *testing.T) {
	srv := startPrivateRedis(t)
	url := srv.url()
	ns := testenv.UniqueName(t, "wfault")
	client := testenv.ValkeyClientAt(t, url, ns)
	// MAX_DELIVERIES is high: a message that fails while Redis is down is
	// retried, not dead-lettered.
	env := []string{"PYRULA_FIXTURE_STORE=memory:", "PYRULA_CLAIM_IDLE=500ms", "PYRULA_RUN_LEASE=2s", "PYRULA_MAX_DELIVERIES=20"}
	a := startReady(t, workerEnv(url, ns, "a", env...)...)
	b := startReady(t, workerEnv(url, ns, "b", env...)...)
	msgs, sent := burst(t, "r", 300)
	sendAll(t, client, ns+":case-messages", msgs)
	waitLen(t, client, ns+":case-replies", 30, 30*time.Second)
	inA, inB := a.inFlight(), b.inFlight()
	replied := streamLen(client, ns+":case-replies")
	srv.kill()
	// The outage: long enough for reads, handlers and runs to fail.
	time.Sleep(time.Second)
	srv.start()
	t.Logf("Redis killed with %d+%d message(s) in flight and %d replies published; restarted after 1s", inA, inB, replied)
	waitAllReplied(t, client, ns+":case-replies", sent, 90*time.Second)
	checkBurst(t, client, ns, sent, false)
	for name, d := range map[string]*daemon{"a": a, "b": b} {
		select {
		case <-d.done:
			t.Errorf("worker %s exited: %v", name, d.err)
		default:
		}
	}
}

// TestStoreFailsUntilDeadLettered: the fixture store directory is replaced
// by a regular file once the worker has opened it (the tests may run as
// root, for whom a read-only directory is still writable), so that every
// store operation fails. Messages that need the store fail transiently
// until PYRULA_MAX_DELIVERIES, then go to <stream>:dead with their error,
// get one error reply each and are acked.
func TestStoreFailsUntilDeadLettered(t *testing.T) {
	url := testenv.ValkeyURL(t)
	ns := testenv.UniqueName(t, "wfault")
	client := testenv.ValkeyClientAt(t, url, ns)
	dir := filepath.Join(t.TempDir(), "store")
	const maxDeliveries = 3
	startReady(t, workerEnv(url, ns, "a", "PYRULA_FIXTURE_STORE="+dir,
		"PYRULA_CLAIM_IDLE=200ms", "PYRULA_MAX_DELIVERIES="+strconv.Itoa(maxDeliveries))...)
	stream, replies := ns+":case-messages", ns+":case-replies"

	// A finished run, saved once while the store works.
	sendAll(t, client, stream, []any{checkoutRun("seed", 0)})
	got, last := readReplies(t, client, replies, "0", 1, 15*time.Second)
	runID := runResultID(got[0])
	if runID == "" {
		t.Fatalf("reply %+v, want an ok start_run", got[0])
	}
	waitRunsFinished(t, client, ns, []string{runID}, 15*time.Second)
	save := func(id string, fork int) envelope {
		return envelope{MessageID: id, Type: "save_case", Body: map[string]any{"target_name": "checkout", "run_id": runID, "fork_after_seq": fork}}
	}
	sendAll(t, client, stream, []any{save("save-ok", 4)})
	got, last = readReplies(t, client, replies, last, 1, 15*time.Second)
	if got[0].Status != "ok" {
		t.Fatalf("save_case with a working store: %+v", got[0])
	}
	if n := len(storeFiles(t, dir)); n != 1 {
		t.Fatalf("%d bundle files after one save, want 1", n)
	}

	// Break the store: its directory becomes a regular file.
	if err := os.Rename(dir, dir+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, []byte("not a directory\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	msgs := []any{save("save-bad", 6)}
	for i := range 3 {
		msgs = append(msgs, deleteBundle(fmt.Sprintf("del-bad-%d", i), randomHash(t)))
	}
	sendAll(t, client, stream, msgs)
	start := time.Now()
	_, last = readReplies(t, client, replies, last, len(msgs), 60*time.Second)
	t.Logf("%d messages dead-lettered %v after they were sent", len(msgs), time.Since(start).Round(time.Millisecond))
	sent := map[string]int{"seed": 1, "save-ok": 1}
	for _, m := range msgs {
		sent[m.(envelope).MessageID] = 1
	}
	all := allReplies(t, client, replies).check(t, sent, true)
	for _, m := range msgs {
		id := m.(envelope).MessageID
		r := all[id]
		if r.Status != "error" || r.Code != "runtime_error" || !strings.Contains(r.Message, "dead-lettered") {
			t.Errorf("message %s: reply %+v, want an error runtime_error naming the dead letter", id, r)
		}
	}

	// The dead letters: each message once, with the store's error and the
	// number of deliveries. A dead-lettered message's reply is published
	// before its dead-letter entry and its ack, so wait for those too.
	var dead []valkey.XRangeEntry
	testwait.Eventually(t, 10*time.Second, "the dead letters and their acks", func() bool {
		var err error
		dead, err = client.Do(t.Context(), client.B().Xrange().Key(stream+":dead").Start("-").End("+").Build()).AsXRange()
		if err != nil {
			t.Fatal(err)
		}
		return len(dead) >= len(msgs) && pendingCount(t, client, stream, "case-workers") == 0
	})
	byID := map[string]int{}
	for _, e := range dead {
		var env envelope
		if err := json.Unmarshal([]byte(e.FieldValues["message"]), &env); err != nil {
			t.Fatalf("dead letter %s: %v", e.ID, err)
		}
		byID[env.MessageID]++
		if !strings.Contains(e.FieldValues["error"], "not a directory") {
			t.Errorf("dead letter of %s: error %q does not show the store's failure", env.MessageID, e.FieldValues["error"])
		}
		if e.FieldValues["deliveries"] != strconv.Itoa(maxDeliveries) {
			t.Errorf("dead letter of %s: %s deliveries, want %d", env.MessageID, e.FieldValues["deliveries"], maxDeliveries)
		}
	}
	for _, m := range msgs {
		if id := m.(envelope).MessageID; byID[id] != 1 {
			t.Errorf("message %s dead-lettered %d times, want once", id, byID[id])
		}
	}
	if len(dead) != len(msgs) {
		t.Errorf("%d dead letters, want %d", len(dead), len(msgs))
	}
	if n := pendingCount(t, client, stream, "case-workers"); n != 0 {
		t.Errorf("%d entries pending after dead-lettering, want 0 (acked)", n)
	}

	// A resend of a dead-lettered message gets the recorded error reply,
	// and is not dead-lettered again.
	sendAll(t, client, stream, []any{msgs[1]})
	readReplies(t, client, replies, last, 1, 15*time.Second)
	sent[msgs[1].(envelope).MessageID] = 2
	allReplies(t, client, replies).check(t, sent, true)
	if n := streamLen(client, stream+":dead"); n != int64(len(msgs)) {
		t.Errorf("%d dead letters after a resend, want %d", n, len(msgs))
	}
}

// TestSIGTERMDuringABurst: one of two workers is stopped with SIGTERM in
// the middle of a burst. It exits 0 within its grace, finishing or handing
// back what it had in flight; the other worker handles the rest. Nothing
// crashed, so every message gets exactly one reply.
func TestSIGTERMDuringABurst(t *testing.T) {
	url := testenv.ValkeyURL(t)
	ns := testenv.UniqueName(t, "wfault")
	client := testenv.ValkeyClientAt(t, url, ns)
	const grace = 10 * time.Second
	env := []string{"PYRULA_FIXTURE_STORE=memory:", "PYRULA_CLAIM_IDLE=500ms", "PYRULA_RUN_LEASE=2s",
		"PYRULA_SHUTDOWN_GRACE=" + grace.String()}
	a := startReady(t, workerEnv(url, ns, "a", env...)...)
	startReady(t, workerEnv(url, ns, "b", env...)...)
	msgs, sent := burst(t, "t", 300)
	sendAll(t, client, ns+":case-messages", msgs)
	n := 0
	testwait.Eventually(t, 30*time.Second, "a handling messages mid-burst", func() bool {
		n = a.inFlight()
		return n > 0 && streamLen(client, ns+":case-replies") >= 20
	})
	term := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.done:
	case <-time.After(grace + 5*time.Second):
		t.Fatalf("a did not exit within the grace (%v) + 5s after SIGTERM", grace)
	}
	t.Logf("a stopped with %d message(s) in flight; exited %v after SIGTERM", n, time.Since(term).Round(time.Millisecond))
	if a.err != nil {
		t.Fatalf("a's exit after SIGTERM: %v (want exit 0)", a.err)
	}
	waitAllReplied(t, client, ns+":case-replies", sent, 60*time.Second)
	checkBurst(t, client, ns, sent, true)
}

// TestDuplicateRunsEntryExecutesOnce: a redelivered start_run (its worker
// crashed after submitting the run, before the ack) adds a second runs
// entry for the same run. The lease is per process, so only the executor
// can keep one process from executing both entries at once: the example
// targets number their reservations and emails per process, so a run
// after them shows how often each write really happened.
func TestDuplicateRunsEntryExecutesOnce(t *testing.T) {
	url := testenv.ValkeyURL(t)
	ns := testenv.UniqueName(t, "wfault")
	client := testenv.ValkeyClientAt(t, url, ns)
	d := startReady(t, workerEnv(url, ns, "a", "PYRULA_FIXTURE_STORE=memory:",
		"PYRULA_CLAIM_IDLE=500ms", "PYRULA_RUN_LEASE=2s", "PYRULA_RUN_CONCURRENCY=2")...)
	stream, replies := ns+":case-messages", ns+":case-replies"

	// Two runs sleeping in both run slots, so that the next run's two
	// entries are read together once they finish.
	sendAll(t, client, stream, []any{checkoutRun("busy-0", 2500), checkoutRun("busy-1", 2500)})
	got, last := readReplies(t, client, replies, "0", 2, 15*time.Second)
	busy := []string{runResultID(got[0]), runResultID(got[1])}
	testwait.Eventually(t, 15*time.Second, "both runs sleeping", func() bool {
		for _, id := range busy {
			if readJournal(t, client, ns, id).callsDone()["step:reserve:0"] != 1 {
				return false
			}
		}
		return true
	})
	sendAll(t, client, stream, []any{checkoutRun("dup", 0)})
	got, last = readReplies(t, client, replies, last, 1, 15*time.Second)
	dup := runResultID(got[0])
	if dup == "" {
		t.Fatalf("reply %+v, want an ok start_run", got[0])
	}
	if err := client.Do(t.Context(), client.B().Xadd().Key(ns+":runs").Id("*").FieldValue().FieldValue("run_id", dup).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	waitRunsFinished(t, client, ns, append(busy, dup), 30*time.Second)

	// Three runs reserved and emailed once each: the next one is the fourth.
	sendAll(t, client, stream, []any{checkoutRun("after", 0)})
	got, _ = readReplies(t, client, replies, last, 1, 15*time.Second)
	after := runResultID(got[0])
	waitRunsFinished(t, client, ns, []string{after}, 15*time.Second)
	journals := checkRuns(t, client, ns, append(busy, dup, after))
	var res struct {
		ReservationID string `json:"reservation_id"`
		MessageID     string `json:"message_id"`
	}
	if term := journals[after].terminal(); len(term) != 1 || json.Unmarshal(term[0].Result, &res) != nil {
		t.Fatalf("run %s: terminal events %+v", after, term)
	}
	if res.ReservationID != "rsv_0004" || res.MessageID != "msg_0004@example.com" {
		t.Errorf("the fourth run reserved %s and emailed %s, want rsv_0004 and msg_0004@example.com: a write ran twice", res.ReservationID, res.MessageID)
	}
	waitNothingPending(t, client, ns, 15*time.Second)
	if strings.Contains(d.logs(), "already recorded") {
		t.Errorf("the worker logged a result recorded twice")
	}
}
