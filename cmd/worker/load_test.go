package main_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pyrula/caseworker/internal/testenv"
)

// loadMessages is how many messages TestLoad sends in all.
const loadMessages = 2000

// TestLoad sends 2,000 mixed messages through 3 worker processes sharing
// one Redis and one directory fixture store: start_run and run_case (whose
// runs execute), save_case (20 distinct bundles saved over and over),
// delete_case_bundle, malformed messages and duplicates (the same message
// sent twice, possibly handled at the same time by two workers). Nothing
// crashes, so every send gets exactly one reply (a duplicate's identical to
// the first), every run ends exactly once, no call completes twice, every
// bundle is stored once, and nothing is left pending.
func TestLoad(t *testing.T) {
	url := testenv.ValkeyURL(t)
	ns := testenv.UniqueName(t, "wload")
	client := testenv.ValkeyClientAt(t, url, ns)
	dir := filepath.Join(t.TempDir(), "store")
	env := []string{"PYRULA_FIXTURE_STORE=" + dir, "PYRULA_CLAIM_IDLE=2s", "PYRULA_RUN_LEASE=5s"}
	workers := make([]*daemon, 3)
	for i := range workers {
		workers[i] = startReady(t, workerEnv(url, ns, fmt.Sprintf("w%d", i), env...)...)
	}
	stream, replyStream := ns+":case-messages", ns+":case-replies"
	start := time.Now()
	sent := map[string]int{}
	total := 0
	send := func(msgs []any) {
		t.Helper()
		sendAll(t, client, stream, msgs)
		for _, m := range msgs {
			sent[m.(envelope).MessageID]++
		}
		total += len(msgs)
	}

	// 20 runs to save, then 20 saves of them.
	const seeds = 20
	var msgs []any
	for i := range seeds {
		msgs = append(msgs, checkoutRun(fmt.Sprintf("seed-%d", i), 0))
	}
	send(msgs)
	waitLen(t, client, replyStream, seeds, 30*time.Second)
	var seedRuns []string
	for id, r := range allReplies(t, client, replyStream).check(t, sent, true) {
		if run := runResultID(r); run != "" {
			seedRuns = append(seedRuns, run)
		} else {
			t.Fatalf("message %s: %+v, want an ok start_run", id, r)
		}
	}
	waitRunsFinished(t, client, ns, seedRuns, 30*time.Second)
	saveOf := func(id, run string) envelope {
		// Forked after its last event before the terminal one: every
		// call's result is in the bundle.
		j := readJournal(t, client, ns, run)
		fork := j.events[len(j.events)-2].Seq
		return envelope{MessageID: id, Type: "save_case", Body: map[string]any{"target_name": "checkout", "run_id": run, "fork_after_seq": fork}}
	}
	msgs = nil
	for i, run := range seedRuns {
		msgs = append(msgs, saveOf(fmt.Sprintf("save-%d", i), run))
	}
	send(msgs)
	waitLen(t, client, replyStream, int64(total), 30*time.Second)
	var hashes []string
	for id, r := range allReplies(t, client, replyStream).check(t, sent, true) {
		if !strings.HasPrefix(id, "save-") {
			continue
		}
		var res struct {
			FixtureHash string `json:"fixture_hash"`
		}
		if r.Status != "ok" || json.Unmarshal(r.Result, &res) != nil || res.FixtureHash == "" {
			t.Fatalf("message %s: %+v (result %s), want an ok save_case", id, r, r.Result)
		}
		hashes = append(hashes, res.FixtureHash)
	}

	// The mix.
	rng := rand.New(rand.NewPCG(1, 2))
	var mix []any
	kinds := map[string]string{} // message id → what it is
	for i := 0; len(mix) < loadMessages-total; i++ {
		id := fmt.Sprintf("m-%d", i)
		var m envelope
		switch i % 20 {
		case 0, 1:
			m, kinds[id] = checkoutRun(id, 0), "start_run"
		case 2, 3:
			m = envelope{MessageID: id, Type: "run_case", Body: map[string]any{
				"target_name": "checkout",
				"source":      map[string]any{"bundle": map[string]any{"fixture_hash": hashes[rng.IntN(len(hashes))]}},
				"options":     map[string]any{"replay_only": true},
			}}
			kinds[id] = "run_case"
		case 4:
			m, kinds[id] = saveOf(id, seedRuns[rng.IntN(len(seedRuns))]), "save_case"
		case 5:
			kinds[id] = "malformed"
			switch i / 20 % 4 {
			case 0:
				m = envelope{MessageID: id, Type: "no_such_type", Body: map[string]any{}}
			case 1:
				m = envelope{MessageID: id, Type: "delete_case_bundle", Body: 5}
			case 2:
				m = deleteBundle(id, "not-a-hash")
			default:
				m = envelope{MessageID: id, Type: "run_case", Body: map[string]any{"target_name": "checkout", "source": map[string]any{}}}
			}
		case 6, 7:
			if len(mix) > 0 {
				mix = append(mix, mix[rng.IntN(len(mix))]) // a duplicate
				continue
			}
			fallthrough
		default:
			m, kinds[id] = deleteBundle(id, randomHash(t)), "delete_case_bundle"
		}
		mix = append(mix, m)
	}
	rng.Shuffle(len(mix), func(i, j int) { mix[i], mix[j] = mix[j], mix[i] })
	mixStart := time.Now()
	send(mix)
	waitLen(t, client, replyStream, loadMessages, 90*time.Second)
	replied := time.Since(mixStart)

	replies := allReplies(t, client, replyStream).check(t, sent, true)
	var runs []string
	caseRuns := map[string]bool{}
	counts := map[string]int{}
	for id, r := range replies {
		kind, ok := kinds[id]
		if !ok {
			continue // a seed or a first save, checked above
		}
		counts[kind]++
		switch want := "ok"; {
		case kind == "malformed":
			if r.Status != "refused" {
				t.Errorf("malformed message %s: %+v, want refused", id, r)
			}
		case r.Status != want:
			t.Errorf("message %s (%s): %s %s %s, want ok", id, kind, r.Status, r.Code, r.Message)
		case kind == "delete_case_bundle" && string(r.Result) != `{"deleted":false}`:
			t.Errorf("message %s: result %s, want {\"deleted\":false}", id, r.Result)
		}
		if run := runResultID(r); run != "" {
			runs = append(runs, run)
			caseRuns[run] = kind == "run_case"
		}
	}
	runs = append(runs, seedRuns...)
	waitRunsFinished(t, client, ns, runs, 90*time.Second)
	finished := time.Since(mixStart)
	journals := checkRuns(t, client, ns, runs)
	outcomes := map[string]int{}
	for _, id := range runs {
		term := journals[id].terminal()
		if len(term) == 0 {
			continue
		}
		what := "start_run"
		if caseRuns[id] {
			what = "run_case"
		}
		outcomes[what+" "+term[0].Kind+" "+term[0].Code]++
		if !caseRuns[id] {
			if term[0].Kind != "run:complete" {
				t.Errorf("run %s: %s %s, want run:complete", id, term[0].Kind, term[0].Code)
			}
			if n := journals[id].callsDone()["step:reserve:0"]; n != 1 {
				t.Errorf("run %s: reserve (a write) completed %d times, want once", id, n)
			}
		}
	}
	distinct := map[string]bool{}
	for _, h := range hashes {
		distinct[h] = true
	}
	if files := storeFiles(t, dir); len(files) != len(distinct) {
		t.Errorf("%d bundle files in the store, want %d (one per distinct bundle)", len(files), len(distinct))
	}
	waitNothingPending(t, client, ns, 30*time.Second)

	// Every worker's metrics: the messages each answered add up to the sends.
	var perWorker []int
	sum := 0
	for _, d := range workers {
		n := answered(t, d)
		perWorker = append(perWorker, n)
		sum += n
	}
	if sum != loadMessages {
		t.Errorf("the workers' pyrula_worker_messages_total add up to %d, want %d", sum, loadMessages)
	}
	t.Logf("load: %d messages (%d distinct ids; mix %v) through 3 workers (answered %v): all replied %v after the mix was sent, %d runs (%d journals with the child runs) finished %v after; %v in all",
		total, len(sent), counts, perWorker, replied.Round(time.Millisecond), len(runs), len(journals),
		finished.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	t.Logf("run outcomes: %v", outcomes)
}

// answered sums pyrula_worker_messages_total over its labels in the
// worker's /metrics.
func answered(t *testing.T, d *daemon) int {
	t.Helper()
	_, body, err := d.get("/metrics")
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	n := 0.0
	for _, l := range strings.Split(body, "\n") {
		if !strings.HasPrefix(l, "pyrula_worker_messages_total{") {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v); err == nil {
			n += v
		}
	}
	return int(n)
}
