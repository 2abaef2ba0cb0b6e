package main_test

// The kill trial (docs/reliability.md): three worker processes share one
// namespace under a mixed load while a random one of them is SIGKILLed at
// random moments and restarted; then every invariant of the protocol is
// checked over everything that was sent.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/testenv"
)

var (
	killTrials = flag.Int("kill-trials", 0, "TestKillTrial: SIGKILL this many workers (a long trial) instead of the bounded default")
	killSeed   = flag.Uint64("kill-seed", 0, "TestKillTrial: seed of the trial's random choices (0: a new one, logged)")
	killLogs   = flag.String("kill-logs", "", "TestKillTrial: write every worker's log, at debug level, to this directory (one file per worker life)")
)

// boundedKills is how many workers TestKillTrial kills by default, so
// that the whole suite runs it every time.
const boundedKills = 4

// The kinds of message the trial sends, as its checks tell them apart.
const (
	kindStart         = "start_run"
	kindSaveSeed      = "save_case of a seed run"
	kindSaveRun       = "save_case of a trial run"
	kindCaseBundle    = "run_case from a bundle"
	kindCaseJournal   = "run_case from a journal"
	kindDeleteAbsent  = "delete_case_bundle of an absent bundle"
	kindDeleteStored  = "delete_case_bundle of a stored bundle"
	kindSuite         = "run_suite of seed bundles"
	killTrialWorkers  = 3
	killTrialWaveGap  = 250 * time.Millisecond
	killTrialMaxDelay = 1500 // ms, the longest durable sleep of a start_run
)

// TestKillTrial runs three worker processes on one namespace under a mixed
// load (start_run with durable sleeps, save_case of finished runs, run_case
// from bundles and from journals, run_suite of seed bundles under two arms,
// run_case and run_suite of the paid agent with every model call live and
// its write allowed, delete_case_bundle, the same message sent again later
// and two copies at the same moment, a message id reused with another
// body) and SIGKILLs a random worker at random moments, restarting it each
// time. Then: every message id answered, all replies of a message id
// identical (a reused id: one reply executed, the other refused), one
// run:submitted and one terminal event per run, no call started or
// completed twice, each write of the example targets done once per run
// and its result the one the run used, every paid run within its bounds
// (checkPaidRun: no model call whose answer was journaled sent again, the
// outcome's cost at or above the server's bill), every outcome the
// expected one (a suite's: each child once, passed), nothing pending, no
// dead letters.
//
// Bounded by default (boundedKills kills); -kill-trials N runs a long
// trial. With PYRULA_TEST_VALKEY_CLUSTER_URL set, the same trial also runs
// against that Redis Cluster.
func TestKillTrial(t *testing.T) {
	kills := boundedKills
	if *killTrials > 0 {
		kills = *killTrials
	}
	t.Run("valkey", func(t *testing.T) {
		runKillTrial(t, testenv.ValkeyURL(t), kills)
	})
	if os.Getenv(testenv.EnvValkeyClusterURL) != "" {
		t.Run("cluster", func(t *testing.T) {
			runKillTrial(t, testenv.ValkeyClusterURL(t), kills)
		})
	}
}

// finishedRun is a run that ended, with the fork its saves and journal
// case runs use (its last event before the terminal one) and, once saved,
// its bundle's hash.
type finishedRun struct {
	runID string
	fork  int64
	hash  string
}

// reusedID is a message id sent with two bodies of one type.
type reusedID struct {
	typ    string
	bodies [2]envelope
	delays [2]int // start_run: the delay_ms of each body
	sends  int
}

// life is one incarnation of a worker process.
type life struct {
	name string
	d    *daemon
}

// killTrial is the state of one trial: what was sent, what the replies
// said so far, the workers.
type killTrial struct {
	t                      *testing.T
	c                      valkey.Client
	url, ns, dir           string
	stream, replies        string
	env                    []string
	rng                    *rand.Rand
	workers                []*daemon
	lives                  []life
	seq, waves             int
	msgs                   map[string]envelope // by message id, the messages sent with one body
	kinds                  map[string]string
	ids                    []string // in the order first sent
	sent                   map[string]int
	reused                 map[string]*reusedID
	reusedIDs              []string
	pairs                  map[string]bool // ids sent as two copies at once
	seeds                  []finishedRun   // finished and saved before the kills
	finished               []finishedRun   // trial runs found finished
	saveOf                 map[string]int  // save_case id → its seed
	suiteCases             map[string]int  // run_suite id → its number of cases
	started                []string        // start_run runs not yet found finished
	lastReply              string
	seenRun                map[string]bool   // start_run ids whose run is listed
	deletable              []string          // hashes saved by the trial, not deleted yet
	deleted                map[string]string // hash → the delete's message id
	savedByTrial           map[string]string // hash → the save's message id
	kills, killedInFlight  int
	start                  time.Time
	loadBefore, loadDuring string
	// lossesAllowed (a failover trial without PYRULA_WAIT_REPLICAS): what
	// docs/operate.md says a failover can lose then is counted in losses,
	// by kind, instead of failing the trial; anything else still fails it.
	lossesAllowed bool
	losses        map[string][]string
	// lostRunReplies and lostSaveReplies count the lost replies of messages
	// that submit runs and of save_case of a trial run: each may leave a
	// run, or a bundle, that no reply names.
	lostRunReplies, lostSaveReplies int
	// The paid part (killtrial_paid_test.go): the model server, the paid
	// recording and its bundle, and what the checks found.
	paid                                                                       *paidServer
	paidSeedRun, paidHash                                                      string
	paidRequests, paidAgain, paidWritesAgain, paidResumed, paidChildrenResumed int
}

// Kinds of loss a failover without PYRULA_WAIT_REPLICAS may cause.
const (
	lossReply      = "a reply lost"
	lossRunCreated = "a run's creation lost (a reply names it, it has no journal)"
	lossRunEnded   = "a run that never ended (its end, its runs entry or a suite child's note lost)"
	lossRunReply   = "a run whose reply was lost (no reply names it)"
	lossSavedReply = "a bundle saved by a save_case whose reply was lost"
	lossChildRun   = "a child run's end lost after its parent took its result"
	lossPaidAgain  = "a paid run's journaled calls made again (its latest events lost)"
)

// lost counts a loss of kind, or fails the trial when losses are not
// allowed.
func (k *killTrial) lost(kind, what string) {
	if !k.lossesAllowed {
		k.t.Errorf("%s: %s", kind, what)
		return
	}
	if k.losses == nil {
		k.losses = map[string][]string{}
	}
	k.losses[kind] = append(k.losses[kind], what)
}

func runKillTrial(t *testing.T, url string, kills int) {
	k := newKillTrial(t, url, fmt.Sprintf("%d kills", kills))
	for k.kills < kills {
		k.load(300*time.Millisecond + time.Duration(k.rng.IntN(1200))*time.Millisecond)
		k.kill(k.rng.IntN(len(k.workers)))
		k.load(time.Duration(k.rng.IntN(400)) * time.Millisecond) // sent while it is down
		i := slices.Index(k.workers, nil)
		k.workers[i] = k.startWorker(i, k.rng.IntN(2) == 0)
	}
	k.finish()
}

// newKillTrial starts the trial's three workers on url (with env besides
// the trial's own settings) and its seed runs; what is a trial of (for its
// first log line) says what it will do to them.
func newKillTrial(t *testing.T, url, what string, env ...string) *killTrial {
	seed := *killSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("kill trial: %s, seed %d (-kill-seed %d repeats the choices)", what, seed, seed)
	ns := testenv.UniqueName(t, "wkill")
	k := &killTrial{
		t: t, url: url, ns: ns, dir: filepath.Join(t.TempDir(), "store"),
		c:      testenv.ValkeyClientAt(t, url, ns),
		stream: ns + ":case-messages", replies: ns + ":case-replies",
		// Every worker default but short reclaim and lease times, so that
		// the work of a killed worker is taken over within seconds.
		env:  []string{"PYRULA_CLAIM_IDLE=1s", "PYRULA_RUN_LEASE=2s", "PYRULA_RUN_CONCURRENCY=8"},
		rng:  rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		msgs: map[string]envelope{}, kinds: map[string]string{}, sent: map[string]int{},
		reused: map[string]*reusedID{}, pairs: map[string]bool{}, saveOf: map[string]int{}, suiteCases: map[string]int{},
		seenRun: map[string]bool{}, deleted: map[string]string{}, savedByTrial: map[string]string{},
		lastReply: "0", start: time.Now(), loadBefore: loadAverage(),
	}
	k.paid = newPaidServer(t)
	k.env = append(k.env, "PYRULA_FIXTURE_STORE="+k.dir, "PYRULA_LLM_REF=openai", "OPENAI_API_KEY=sk-paid",
		"OPENAI_BASE_URL="+k.paid.URL+"/v1", "PAIDTEST_WRITE_URL="+k.paid.URL+"/write")
	k.env = append(k.env, env...)
	if *killLogs != "" {
		k.env = append(k.env, "PYRULA_LOG_LEVEL=debug")
		t.Cleanup(k.writeLogs)
	}
	k.workers = make([]*daemon, killTrialWorkers)
	for i := range k.workers {
		k.workers[i] = k.startWorker(i, false)
	}
	k.seed(6)
	k.seedPaid()
	return k
}

// finish checks the trial once its faults are over and logs its figures.
func (k *killTrial) finish() {
	t := k.t
	k.loadDuring = loadAverage()
	loaded := time.Since(k.start)
	k.check()
	if !t.Failed() {
		t.Logf("kill trial: %v in all (%v until the last restart, then the checks); load average before %s, after the kills %s, at the end %s",
			time.Since(k.start).Round(time.Millisecond), loaded.Round(time.Millisecond),
			k.loadBefore, k.loadDuring, loadAverage())
	}
}

// startWorker starts worker i and waits until it is ready. Its consumer
// name is w<i> at first; a restart keeps it (a pod that keeps its name:
// the new process re-reads what the killed one held) or, when renamed, is
// w<i>-<n> (a replaced pod: the other workers reclaim what the killed one
// held).
func (k *killTrial) startWorker(i int, renamed bool) *daemon {
	name := fmt.Sprintf("w%d", i)
	if renamed {
		name = fmt.Sprintf("w%d-%d", i, len(k.lives))
	}
	d := startReadyOf(k.t, paidBin, workerEnv(k.url, k.ns, name, k.env...)...)
	k.lives = append(k.lives, life{name: name, d: d})
	return d
}

// writeLogs writes each worker life's log to -kill-logs, as
// <n>-<consumer>.log in the order the lives started.
func (k *killTrial) writeLogs() {
	if err := os.MkdirAll(*killLogs, 0o755); err != nil {
		k.t.Errorf("kill trial logs: %v", err)
		return
	}
	for i, l := range k.lives {
		name := filepath.Join(*killLogs, fmt.Sprintf("%03d-%s.log", i, l.name))
		if err := os.WriteFile(name, []byte(l.d.logs()), 0o644); err != nil {
			k.t.Errorf("kill trial logs: %v", err)
			return
		}
	}
	k.t.Logf("kill trial: the workers' logs are in %s", *killLogs)
}

// kill SIGKILLs worker i, noting how many messages it had in flight.
func (k *killTrial) kill(i int) {
	d := k.workers[i]
	if n := d.inFlight(); n > 0 {
		k.killedInFlight += n
	}
	d.sigkill()
	k.workers[i] = nil
	k.kills++
}

// id returns a new message id with prefix.
func (k *killTrial) id(prefix string) string {
	k.seq++
	return fmt.Sprintf("%s-%d", prefix, k.seq)
}

// note records m, of kind, as sent once more.
func (k *killTrial) note(m envelope, kind string) envelope {
	if _, ok := k.msgs[m.MessageID]; !ok {
		k.msgs[m.MessageID], k.kinds[m.MessageID] = m, kind
		k.ids = append(k.ids, m.MessageID)
	}
	k.sent[m.MessageID]++
	return m
}

// saveCaseMsg is a save_case of a checkout run forked after fork.
func saveCaseMsg(id, runID string, fork int64) envelope {
	return envelope{MessageID: id, Type: "save_case", Body: map[string]any{"target_name": "checkout", "run_id": runID, "fork_after_seq": fork}}
}

// caseFromBundle is a replay-only run_case of the bundle hash.
func caseFromBundle(id, hash string) envelope {
	return envelope{MessageID: id, Type: "run_case", Body: map[string]any{
		"target_name": "checkout",
		"source":      map[string]any{"bundle": map[string]any{"fixture_hash": hash}},
		"options":     map[string]any{"replay_only": true},
	}}
}

// caseFromJournal is a replay-only run_case of run runID's journal forked
// after fork.
func caseFromJournal(id, runID string, fork int64) envelope {
	return envelope{MessageID: id, Type: "run_case", Body: map[string]any{
		"target_name": "checkout",
		"source":      map[string]any{"journal": map[string]any{"run_id": runID, "fork_after_seq": fork}},
		"options":     map[string]any{"replay_only": true},
	}}
}

// suiteArms are the arms of the trial's suites.
const suiteArms = 2

// suiteOfSeeds is a run_suite of the bundles hashes under suiteArms
// replay-only arms: every child passes.
func suiteOfSeeds(id string, hashes []string) envelope {
	return envelope{MessageID: id, Type: "run_suite", Body: map[string]any{
		"target_name": "checkout", "cases": map[string]any{"bundles": hashes},
		"arms": []map[string]any{{"name": "a", "options": map[string]any{"replay_only": true}}, {"name": "b", "options": map[string]any{"replay_only": true}}},
	}}
}

// seed runs n checkout runs to their end and saves each once, before any
// kill: the bundles and journals the trial's case runs and saves use.
func (k *killTrial) seed(n int) {
	t := k.t
	var msgs []any
	for range n {
		msgs = append(msgs, k.note(checkoutRun(k.id("seed"), 0), kindStart))
	}
	sendAll(t, k.c, k.stream, msgs)
	k.waitReplied(60 * time.Second)
	var runs []string
	for _, m := range msgs {
		var r reply
		raw := allReplies(t, k.c, k.replies)[m.(envelope).MessageID][0]
		if err := json.Unmarshal([]byte(raw), &r); err != nil || runResultID(r) == "" {
			t.Fatalf("seed %s: reply %s, want an ok start_run", m.(envelope).MessageID, raw)
		}
		runs = append(runs, runResultID(r))
	}
	waitRunsFinished(t, k.c, k.ns, runs, 60*time.Second)
	msgs = nil
	for i, run := range runs {
		j := readJournal(t, k.c, k.ns, run)
		k.seeds = append(k.seeds, finishedRun{runID: run, fork: j.events[len(j.events)-2].Seq})
		m := k.note(saveCaseMsg(k.id("seed-save"), run, k.seeds[i].fork), kindSaveSeed)
		k.saveOf[m.MessageID] = i
		msgs = append(msgs, m)
	}
	sendAll(t, k.c, k.stream, msgs)
	k.waitReplied(60 * time.Second)
	rs := allReplies(t, k.c, k.replies)
	for _, m := range msgs {
		id := m.(envelope).MessageID
		var r reply
		if err := json.Unmarshal([]byte(rs[id][0]), &r); err != nil || r.Status != "ok" {
			t.Fatalf("seed save %s: reply %s, want ok", id, rs[id][0])
		}
		var res struct {
			FixtureHash string `json:"fixture_hash"`
		}
		if err := json.Unmarshal(r.Result, &res); err != nil || res.FixtureHash == "" {
			t.Fatalf("seed save %s: result %s", id, r.Result)
		}
		k.seeds[k.saveOf[id]].hash = res.FixtureHash
	}
	for _, id := range k.ids {
		k.seenRun[id] = true // the seeds are saved already
	}
}

// waitReplied waits until every message sent so far has its reply: each
// message id as many replies as it was sent (every entry is answered). If
// some have not within the time, it fails naming them.
func (k *killTrial) waitReplied(within time.Duration) {
	k.t.Helper()
	deadline := time.Now().Add(within)
	for {
		rs := allReplies(k.t, k.c, k.replies)
		var missing []string
		for id, n := range k.sent {
			if len(rs[id]) < n {
				missing = append(missing, fmt.Sprintf("%s (%d of %d)", id, len(rs[id]), n))
			}
		}
		for id, u := range k.reused {
			if len(rs[id]) < u.sends {
				missing = append(missing, fmt.Sprintf("%s (%d of %d)", id, len(rs[id]), u.sends))
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			if k.lossesAllowed {
				k.dropMissingReplies(rs)
				return
			}
			sort.Strings(missing)
			k.t.Fatalf("%d message ids without all their replies after %v: %s", len(missing), within, strings.Join(missing[:min(len(missing), 20)], ", "))
		}
		time.Sleep(100 * time.Millisecond) // reading every reply is not free
	}
}

// dropMissingReplies counts each message id without all its replies in rs
// as a lost reply, and checks only the replies that arrived.
func (k *killTrial) dropMissingReplies(rs map[string][]string) {
	for id, n := range k.sent {
		if got := len(rs[id]); got < n {
			k.lost(lossReply, fmt.Sprintf("%s (%s, %d of %d)", id, k.kinds[id], got, n))
			switch k.kinds[id] {
			case kindStart, kindCaseBundle, kindCaseJournal, kindSuite:
				k.lostRunReplies++
			case kindSaveRun:
				k.lostSaveReplies++
			}
			if k.sent[id] = got; got == 0 {
				delete(k.sent, id)
			}
		}
	}
	for id, u := range k.reused {
		if got := len(rs[id]); got < u.sends {
			k.lost(lossReply, fmt.Sprintf("%s (reused by %s, %d of %d)", id, u.typ, got, u.sends))
			if u.typ == "start_run" {
				k.lostRunReplies++
			}
			delete(k.reused, id)
		}
	}
}

// load sends a wave of messages every killTrialWaveGap for d.
func (k *killTrial) load(d time.Duration) {
	end := time.Now().Add(d)
	for {
		k.wave()
		left := time.Until(end)
		if left <= 0 {
			return
		}
		time.Sleep(min(left, killTrialWaveGap))
	}
}

// wave sends one wave: every other wave two copies of one new message at
// once, or else, two times in three, a message id reused with another body
// (both sent at once; sometimes one of them again in a later wave); then
// two start_run, a run_case from a bundle and one from a journal, a
// save_case of a seed run and of a trial run found finished, two deletes
// of absent bundles and one of a bundle the trial saved, and an earlier
// message again, in one pipeline.
func (k *killTrial) wave() {
	t := k.t
	k.poll()
	// First, while the workers wait on the stream (the last wave was
	// killTrialWaveGap ago): two copies of a message at the same moment,
	// consecutive XADDs of one pipeline, which workers blocked on the
	// stream are handed one each; or a message id reused with another
	// body, both sent at once.
	p := k.rng.IntN(len(k.seeds))
	if k.waves%2 == 0 {
		var m envelope
		switch k.rng.IntN(5) {
		case 4:
			if len(k.deletable) > 0 { // both copies race to delete a stored bundle
				h := k.deletable[0]
				k.deletable = k.deletable[1:]
				m = k.note(deleteBundle(k.id("pair-del-stored"), h), kindDeleteStored)
				k.deleted[h] = m.MessageID
				break
			}
			fallthrough
		case 0:
			m = k.note(checkoutRun(k.id("pair-run"), k.rng.IntN(killTrialMaxDelay)), kindStart)
		case 1:
			m = k.note(caseFromBundle(k.id("pair-case"), k.seeds[p].hash), kindCaseBundle)
		case 2:
			m = saveCaseMsg(k.id("pair-save"), k.seeds[p].runID, k.seeds[p].fork)
			k.saveOf[m.MessageID] = p
			m = k.note(m, kindSaveSeed)
		default:
			m = k.note(deleteBundle(k.id("pair-del"), randomHash(t)), kindDeleteAbsent)
		}
		k.note(m, k.kinds[m.MessageID])
		k.pairs[m.MessageID] = true
		sendAll(t, k.c, k.stream, []any{m, m})
	}
	if k.waves%2 == 1 && k.rng.IntN(3) > 0 {
		id := k.id("reused")
		u := &reusedID{sends: 2}
		if k.rng.IntN(2) == 0 {
			u.typ = "start_run"
			u.delays[0] = k.rng.IntN(killTrialMaxDelay)
			u.delays[1] = u.delays[0] + 1 + k.rng.IntN(100)
			u.bodies = [2]envelope{checkoutRun(id, u.delays[0]), checkoutRun(id, u.delays[1])}
		} else {
			u.typ = "delete_case_bundle"
			u.bodies = [2]envelope{deleteBundle(id, randomHash(t)), deleteBundle(id, randomHash(t))}
		}
		k.reused[id] = u
		k.reusedIDs = append(k.reusedIDs, id)
		first := k.rng.IntN(2)
		sendAll(t, k.c, k.stream, []any{u.bodies[first], u.bodies[1-first]})
	}

	var msgs []any
	add := func(m envelope, kind string) { msgs = append(msgs, k.note(m, kind)) }
	for range 2 {
		add(checkoutRun(k.id("run"), k.rng.IntN(killTrialMaxDelay)), kindStart)
	}
	s := k.rng.IntN(len(k.seeds))
	add(caseFromBundle(k.id("case-b"), k.seeds[s].hash), kindCaseBundle)
	src := k.seeds[k.rng.IntN(len(k.seeds))]
	if len(k.finished) > 0 && k.rng.IntN(2) == 0 {
		src = k.finished[k.rng.IntN(len(k.finished))]
	}
	add(caseFromJournal(k.id("case-j"), src.runID, src.fork), kindCaseJournal)
	m := saveCaseMsg(k.id("save-seed"), k.seeds[s].runID, k.seeds[s].fork)
	k.saveOf[m.MessageID] = s
	add(m, kindSaveSeed)
	if f, ok := k.nextFinished(); ok {
		add(saveCaseMsg(k.id("save-run"), f.runID, f.fork), kindSaveRun)
	}
	for range 2 {
		add(deleteBundle(k.id("del-absent"), randomHash(t)), kindDeleteAbsent)
	}
	if len(k.deletable) > 0 {
		h := k.deletable[0]
		k.deletable = k.deletable[1:]
		m := deleteBundle(k.id("del-stored"), h)
		k.deleted[h] = m.MessageID
		add(m, kindDeleteStored)
	}
	if k.waves%3 == 0 {
		a, b := k.rng.IntN(len(k.seeds)), k.rng.IntN(len(k.seeds))
		hashes := []string{k.seeds[a].hash}
		if b != a {
			hashes = append(hashes, k.seeds[b].hash)
		}
		m := suiteOfSeeds(k.id("suite"), hashes)
		k.suiteCases[m.MessageID] = len(hashes)
		add(m, kindSuite)
	}
	k.paidWave(add)
	if n := len(k.ids); n > len(msgs) {
		id := k.ids[k.rng.IntN(n-len(msgs))] // sent in an earlier wave
		msgs = append(msgs, k.note(k.msgs[id], k.kinds[id]))
	}
	if len(k.reusedIDs) > 0 && k.rng.IntN(4) == 0 {
		u := k.reused[k.reusedIDs[k.rng.IntN(len(k.reusedIDs))]]
		u.sends++
		msgs = append(msgs, u.bodies[k.rng.IntN(2)])
	}
	k.rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	sendAll(t, k.c, k.stream, msgs)

	k.waves++
}

// poll reads the replies published since the last poll: the runs of
// start_run replies (to save once finished) and the bundles the trial's
// saves stored (to delete).
func (k *killTrial) poll() {
	for {
		entries, err := k.c.Do(context.Background(), k.c.B().Xrange().Key(k.replies).Start("("+k.lastReply).End("+").Count(1000).Build()).AsXRange()
		if err != nil {
			k.t.Fatalf("XRANGE %s: %v", k.replies, err)
		}
		for _, e := range entries {
			k.lastReply = e.ID
			var r reply
			if err := json.Unmarshal([]byte(e.FieldValues["reply"]), &r); err != nil || r.Status != "ok" {
				continue // checked at the end
			}
			switch k.kinds[r.MessageID] {
			case kindStart:
				if !k.seenRun[r.MessageID] {
					k.seenRun[r.MessageID] = true // the first reply only
					k.started = append(k.started, runResultID(r))
				}
			case kindSaveRun:
				var res struct {
					FixtureHash string `json:"fixture_hash"`
				}
				if json.Unmarshal(r.Result, &res) == nil && res.FixtureHash != "" {
					if _, ok := k.savedByTrial[res.FixtureHash]; !ok {
						k.savedByTrial[res.FixtureHash] = r.MessageID
						k.deletable = append(k.deletable, res.FixtureHash)
					}
				}
			}
		}
		if len(entries) < 1000 {
			return
		}
	}
}

// nextFinished returns a start_run run found finished (of the oldest few
// not yet found), with its fork, taken off the list.
func (k *killTrial) nextFinished() (finishedRun, bool) {
	for i := 0; i < min(3, len(k.started)); i++ {
		j := readJournal(k.t, k.c, k.ns, k.started[i])
		if len(j.terminal()) == 0 {
			continue
		}
		f := finishedRun{runID: k.started[i], fork: j.events[len(j.events)-2].Seq}
		k.started = slices.Delete(k.started, i, i+1)
		k.finished = append(k.finished, f)
		return f, true
	}
	return finishedRun{}, false
}

// checkoutResult is what the checks read of a checkout run's result.
type checkoutResult struct {
	Status        string `json:"status"`
	ReservationID string `json:"reservation_id"`
	MessageID     string `json:"message_id"`
}

// check waits for the trial to settle and checks every invariant.
func (k *killTrial) check() {
	t := k.t
	if k.lossesAllowed {
		k.waitReplied(90 * time.Second)
	} else {
		k.waitReplied(3 * time.Minute)
	}
	k.poll() // the bundles saved since the last wave
	rs := allReplies(t, k.c, k.replies)
	sends := 0
	for _, n := range k.sent {
		sends += n
	}

	// A reused id: exactly two distinct replies, one executed (ok) and one
	// refusal, whatever the timing; as many replies as sends at least.
	var runs []string
	delays := map[string][2]int{} // run → the delays of its reused id's bodies
	for id, u := range k.reused {
		sends += u.sends
		got := rs[id]
		delete(rs, id)
		if len(got) < u.sends {
			t.Errorf("reused id %s sent %d times: %d replies", id, u.sends, len(got))
		}
		distinct := map[string]bool{}
		for _, raw := range got {
			distinct[raw] = true
		}
		var oks, refusals int
		for raw := range distinct {
			var r reply
			if err := json.Unmarshal([]byte(raw), &r); err != nil {
				t.Fatal(err)
			}
			switch {
			case r.Type != u.typ:
				t.Errorf("reused id %s: reply of type %s, sent %s: %s", id, r.Type, u.typ, raw)
			case r.Status == "ok":
				oks++
				if run := runResultID(r); run != "" {
					runs = append(runs, run)
					delays[run] = u.delays
				} else if u.typ == "delete_case_bundle" && string(r.Result) != `{"deleted":false}` {
					t.Errorf("reused id %s: %s, want deleted false", id, raw)
				}
			case r.Status == "refused" && r.Code == "invalid_overrides" && r.Message == "message_id "+id+" reused with another body":
				refusals++
			default:
				t.Errorf("reused id %s: unexpected reply %s", id, raw)
			}
		}
		if oks != 1 || refusals != 1 {
			t.Errorf("reused id %s (%s, sent %d times): %d distinct ok replies and %d refusals, want one of each: %q", id, u.typ, u.sends, oks, refusals, got)
		}
	}

	// Every other message id: its replies identical, as many as its sends
	// at least; then each outcome checked by kind.
	replies := replySet(rs).check(t, k.sent, false)
	counts := map[string]int{}
	caseRun := map[string]bool{}
	suites := map[string]int{}       // suite run → its cases
	paidModel := map[string]string{} // paid case run → its model
	for id, r := range replies {
		kind := k.kinds[id]
		counts[kind]++
		if r.Status != "ok" {
			t.Errorf("message %s (%s): %s %s %s, want ok", id, kind, r.Status, r.Code, r.Message)
			continue
		}
		var res struct {
			FixtureHash string `json:"fixture_hash"`
		}
		switch kind {
		case kindStart:
			runs = append(runs, runResultID(r))
		case kindCaseBundle, kindCaseJournal:
			runs = append(runs, runResultID(r))
			caseRun[runResultID(r)] = true
		case kindPaidStart:
			runs = append(runs, runResultID(r))
		case kindPaidSave:
			if fixtureHashOf(r) != k.paidHash {
				t.Errorf("message %s: result %s, want the paid bundle %s", id, r.Result, k.paidHash)
			}
		case kindPaidCase:
			runs = append(runs, runResultID(r))
			caseRun[runResultID(r)] = true
			paidModel[runResultID(r)] = paidCaseModel(id)
		case kindSuite, kindPaidSuite:
			var sr struct {
				SuiteID string `json:"suite_id"`
			}
			if json.Unmarshal(r.Result, &sr) != nil || sr.SuiteID == "" {
				t.Errorf("message %s (%s): result %s, want a suite", id, kind, r.Result)
				continue
			}
			suites[sr.SuiteID] = k.suiteCases[id]
			runs = append(runs, sr.SuiteID)
			for arm := range suiteArms {
				for c := range k.suiteCases[id] {
					child := fmt.Sprintf("%s:%d:%d", sr.SuiteID, arm, c)
					runs = append(runs, child)
					caseRun[child] = true
					if kind == kindPaidSuite {
						paidModel[child] = paidSuiteModel(id, arm)
					}
				}
			}
		case kindSaveSeed:
			if json.Unmarshal(r.Result, &res) != nil || res.FixtureHash != k.seeds[k.saveOf[id]].hash {
				t.Errorf("message %s: result %s, want the seed's bundle %s", id, r.Result, k.seeds[k.saveOf[id]].hash)
			}
		case kindSaveRun:
			if json.Unmarshal(r.Result, &res) != nil || k.savedByTrial[res.FixtureHash] != id {
				t.Errorf("message %s: result %s, not a bundle the trial saw saved", id, r.Result)
			}
		case kindDeleteAbsent:
			if string(r.Result) != `{"deleted":false}` {
				t.Errorf("message %s (%s): result %s, want deleted false", id, kind, r.Result)
			}
		case kindDeleteStored:
			if string(r.Result) != `{"deleted":true}` {
				t.Errorf("message %s (%s): result %s, want deleted true", id, kind, r.Result)
			}
		}
	}

	// Every run ended once, no call started or done twice; each live run
	// complete, its writes done once and its result built from them; each
	// case run complete with one case:outcome.
	var skip map[string]bool
	if k.lossesAllowed {
		runs, skip = k.dropLostRuns(runs)
	} else {
		waitRunsFinished(t, k.c, k.ns, runs, 3*time.Minute)
	}
	journals := checkRunsExcept(t, k.c, k.ns, runs, skip)
	reserve := k.results(runs, "step:reserve:0")
	epochs := k.leaseEpochs(runs)
	resumed, timedOut := 0, 0
	for _, id := range runs {
		j := journals[id]
		for call, n := range j.callsStarted() {
			if n > 1 {
				t.Errorf("run %s: call %s started %d times; its journal:\n%s", id, call, n, j)
			}
		}
		term := j.terminal()
		if len(term) != 1 {
			continue // checkRuns said so
		}
		if epochs[id] > 1 {
			resumed++ // its lease was taken again: a kill or a hand-back
		}
		if term[0].Kind != "run:complete" {
			t.Errorf("run %s: %s %s, want run:complete; its journal:\n%s", id, term[0].Kind, term[0].Code, j)
			continue
		}
		if model, ok := paidModel[id]; ok {
			k.checkPaidRun(id, model, j, epochs[id])
			continue
		}
		if id == k.paidSeedRun {
			continue // recorded live before the first kill
		}
		if caseRun[id] {
			if n := j.count("case:outcome"); n != 1 {
				t.Errorf("case run %s: %d case:outcome events, want 1", id, n)
			}
			continue
		}
		if cases, ok := suites[id]; ok {
			// Its children each ended once (above, as runs); its one
			// outcome counts each of them once, every one a pass.
			if n := j.count("suite:outcome"); n != 1 {
				t.Errorf("suite %s: %d suite:outcome events, want 1; its journal:\n%s", id, n, j)
				continue
			}
			if o := suiteOutcome(t, k.c, k.ns, id); o.Total != cases*suiteArms || o.ByStatus["pass"] != o.Total {
				t.Errorf("suite %s of %d cases × %d arms: outcome %+v, want every child once, passed", id, cases, suiteArms, o)
			}
			continue
		}
		var res checkoutResult
		if err := json.Unmarshal(term[0].Result, &res); err != nil {
			t.Errorf("run %s: result %s: %v", id, term[0].Result, err)
			continue
		}
		if j.callsDone()["step:reserve:0"] != 1 || reserve[id] != res.ReservationID {
			t.Errorf("run %s: reserved %q (reserve done %d times), its result says %q", id, reserve[id], j.callsDone()["step:reserve:0"], res.ReservationID)
		}
		if d, ok := delays[id]; ok {
			if got := k.submittedDelay(id); got != d[0] && got != d[1] {
				t.Errorf("run %s of a reused id: submitted with delay_ms %d, neither body's (%v)", id, got, d)
			}
		}
		switch res.Status {
		case "confirmed":
			child := journals[id+"/child:0"]
			var sent checkoutResult
			if ct := child.terminal(); len(ct) != 1 || json.Unmarshal(ct[0].Result, &sent) != nil {
				k.lost(lossChildRun, fmt.Sprintf("run %s: its child run has no result (%d events)", id, len(child.events)))
				continue
			}
			if child.callsDone()["step:send_email:0"] != 1 || sent.MessageID != res.MessageID || res.MessageID == "" {
				t.Errorf("run %s: emailed %q (send_email done %d times), its result says %q", id, sent.MessageID, child.callsDone()["step:send_email:0"], res.MessageID)
			}
			for _, call := range []string{"step:sigsend:0", "step:child:0"} {
				if n := j.callsDone()[call]; n != 1 {
					t.Errorf("run %s: write %s done %d times, want once", id, call, n)
				}
			}
		case "approval_timed_out":
			// The example's signal inbox is in memory: a run resumed
			// between sending itself the approval and receiving it waits
			// in vain, by design. Only a resumed run may end so.
			timedOut++
			if epochs[id] < 2 {
				t.Errorf("run %s: approval timed out, but it was executed once (lease epoch %d); its journal:\n%s", id, epochs[id], j)
			}
		default:
			t.Errorf("run %s: status %q, want confirmed", id, res.Status)
		}
	}

	// The store: every seed's bundle, every bundle saved by the trial and
	// not deleted, nothing else.
	stored := map[string]bool{}
	for _, f := range storeFiles(t, k.dir) {
		stored[strings.TrimSuffix(filepath.Base(f), ".case")] = true
	}
	want := map[string]bool{}
	for _, s := range k.seeds {
		want[s.hash] = true
	}
	want[k.paidHash] = true
	for h := range k.savedByTrial {
		if _, gone := k.deleted[h]; !gone {
			want[h] = true
		}
	}
	for h := range want {
		if !stored[h] {
			t.Errorf("bundle %s is not in the store", h)
		}
	}
	for h := range stored {
		switch {
		case want[h]:
		case k.deleted[h] == "" && len(k.losses[lossSavedReply]) < k.lostSaveReplies:
			k.lost(lossSavedReply, h)
		default:
			t.Errorf("bundle %s is in the store (deleted by %s)", h, k.deleted[h])
		}
	}

	waitNothingPending(t, k.c, k.ns, time.Minute)
	for _, dead := range []string{k.stream + ":dead", k.ns + ":runs:dead"} {
		if n := streamLen(k.c, dead); n != 0 {
			t.Errorf("%d dead letters on %s, want none", n, dead)
		}
	}

	// The workers' logs: no result recorded twice, no panic; which
	// workers answered the two copies of a pair.
	twoWorkers, reclaimed, runsReclaimed := 0, 0, 0
	answeredBy := map[string]map[string]bool{}
	for _, l := range k.lives {
		logs := l.d.logs()
		for _, bad := range []string{"already recorded", "panic"} {
			if strings.Contains(logs, bad) {
				t.Errorf("worker %s logged %q", l.name, bad)
			}
		}
		reclaimed += strings.Count(logs, "reclaimed a pending entry")
		runsReclaimed += strings.Count(logs, "reclaimed a runs entry")
		for _, line := range strings.Split(logs, "\n") {
			var e struct {
				Msg       string `json:"msg"`
				MessageID string `json:"message_id"`
			}
			if json.Unmarshal([]byte(line), &e) != nil || e.Msg != "message answered" || !k.pairs[e.MessageID] {
				continue
			}
			if answeredBy[e.MessageID] == nil {
				answeredBy[e.MessageID] = map[string]bool{}
			}
			answeredBy[e.MessageID][l.name] = true
		}
	}
	for _, by := range answeredBy {
		if len(by) > 1 {
			twoWorkers++
		}
	}
	if t.Failed() {
		return
	}
	kinds := make([]string, 0, len(counts))
	for kind, n := range counts {
		kinds = append(kinds, fmt.Sprintf("%s %d", kind, n))
	}
	sort.Strings(kinds)
	renamed := 0
	for _, l := range k.lives {
		if strings.Contains(l.name, "-") {
			renamed++
		}
	}
	faults := "no worker killed"
	if k.kills > 0 {
		faults = fmt.Sprintf("%d kills (%d messages in flight in the killed workers), %d restarts (%d as a new consumer)",
			k.kills, k.killedInFlight, len(k.lives)-killTrialWorkers, renamed)
	}
	t.Logf("kill trial: %s; %d messages sent (%d ids: %s; %d sent as two copies at once, %d of them answered by two workers; %d ids reused with another body)",
		faults, sends, len(k.sent)+len(k.reused), strings.Join(kinds, ", "),
		len(k.pairs), twoWorkers, len(k.reused))
	t.Logf("kill trial: %d runs (%d start_run, %d case runs; %d journals with the child runs), %d executed more than once (lease epoch above 1; %d of them approval_timed_out), %d message and %d runs entries reclaimed; 0 violations",
		len(runs), len(runs)-len(caseRun), len(caseRun), len(journals), resumed, timedOut, reclaimed, runsReclaimed)
	paidLost := ""
	if n := len(k.losses[lossPaidAgain]); n > 0 {
		paidLost = fmt.Sprintf(" but in the %d paid runs whose events a failover lost (below)", n)
	}
	t.Logf("kill trial: %d paid runs (case runs and suite children, every call live), %d of them executed more than once (%d suite children); %d model requests, %d of them a call made again (in flight when an execution was cut); %d writes run again; every outcome's cost at or above the server's bill%s",
		len(paidModel), k.paidResumed, k.paidChildrenResumed, k.paidRequests, k.paidAgain, k.paidWritesAgain, paidLost)
	if k.lossesAllowed {
		kinds := slices.Sorted(maps.Keys(k.losses))
		total := 0
		for _, kind := range kinds {
			total += len(k.losses[kind])
			t.Logf("lost without PYRULA_WAIT_REPLICAS: %d × %s: %s", len(k.losses[kind]), kind, strings.Join(k.losses[kind][:min(len(k.losses[kind]), 10)], ", "))
		}
		t.Logf("kill trial: %d losses, every one of a kind docs/operate.md lists for a failover without PYRULA_WAIT_REPLICAS", total)
	}
}

// dropLostRuns counts as lost the runs of runs that do not end within a
// minute and a half (no journal: their creation lost; else their end), and
// the top-level runs no reply names (their reply lost), up to the number
// of lost replies of the message types that submit runs. It returns the
// other runs, and the lost ones to leave out of checkRuns.
func (k *killTrial) dropLostRuns(runs []string) ([]string, map[string]bool) {
	skip := map[string]bool{}
	for _, id := range unfinishedRuns(k.t, k.c, k.ns, runs, 90*time.Second) {
		if len(readJournal(k.t, k.c, k.ns, id).events) == 0 {
			k.lost(lossRunCreated, id)
		} else {
			k.lost(lossRunEnded, id)
		}
		skip[id] = true
	}
	named := map[string]bool{}
	for _, id := range runs {
		named[id] = true
	}
	for _, id := range runIDs(k.t, k.c, k.ns) {
		if strings.Contains(id, "/") || named[id] || skip[id] {
			continue
		}
		if len(k.losses[lossRunReply]) >= k.lostRunReplies {
			k.t.Errorf("run %s exists but no reply names it, and no reply of a message that submits runs was lost", id)
			continue
		}
		k.lost(lossRunReply, id)
		skip[id] = true
	}
	return slices.DeleteFunc(runs, func(id string) bool { return skip[id] }), skip
}

// callsStarted counts the call:start events of each call (kind:key).
func (j runJournal) callsStarted() map[string]int {
	out := map[string]int{}
	for _, e := range j.events {
		if e.Kind == "call:start" && e.Call != nil {
			out[e.Call.Kind+":"+e.Call.Key]++
		}
	}
	return out
}

// results reads the recorded result of call (kind:key) of each run of
// runs that has one: its reservation_id field.
func (k *killTrial) results(runs []string, call string) map[string]string {
	out := map[string]string{}
	for i := 0; i < len(runs); i += 500 {
		batch := runs[i:min(i+500, len(runs))]
		cmds := make(valkey.Commands, len(batch))
		for n, id := range batch {
			cmds[n] = k.c.B().Hget().Key(k.ns + ":{" + id + "}:results").Field(call).Build()
		}
		for n, r := range k.c.DoMulti(context.Background(), cmds...) {
			raw, err := r.ToString()
			if valkey.IsValkeyNil(err) {
				continue
			}
			if err != nil {
				k.t.Fatalf("HGET the %s result of %s: %v", call, batch[n], err)
			}
			var rec struct {
				Result struct {
					ReservationID string `json:"reservation_id"`
				} `json:"result"`
			}
			if err := json.Unmarshal([]byte(raw), &rec); err != nil {
				k.t.Fatalf("the %s result of %s: %v: %s", call, batch[n], err, raw)
			}
			out[batch[n]] = rec.Result.ReservationID
		}
	}
	return out
}

// leaseEpochs reads the lease epoch of each run of runs from its meta:
// 1 for a run executed by one worker, more when another execution took
// its lease over.
func (k *killTrial) leaseEpochs(runs []string) map[string]int64 {
	out := map[string]int64{}
	for i := 0; i < len(runs); i += 500 {
		batch := runs[i:min(i+500, len(runs))]
		cmds := make(valkey.Commands, len(batch))
		for n, id := range batch {
			cmds[n] = k.c.B().Hget().Key(k.ns + ":{" + id + "}:meta").Field("lease_epoch").Build()
		}
		for n, r := range k.c.DoMulti(context.Background(), cmds...) {
			epoch, err := r.AsInt64()
			if err != nil {
				k.t.Fatalf("HGET the lease epoch of %s: %v", batch[n], err)
			}
			out[batch[n]] = epoch
		}
	}
	return out
}

// submittedDelay is the delay_ms of the start_run request in run runID's
// run:submitted event.
func (k *killTrial) submittedDelay(runID string) int {
	key := k.ns + ":{" + runID + "}:events"
	entries, err := k.c.Do(context.Background(), k.c.B().Xrange().Key(key).Start("-").End("+").Count(1).Build()).AsXRange()
	if err != nil || len(entries) == 0 {
		k.t.Fatalf("XRANGE %s: %v", key, err)
	}
	var ev struct {
		Request struct {
			Inputs struct {
				DelayMS int `json:"delay_ms"`
			} `json:"inputs"`
		} `json:"request"`
	}
	if err := json.Unmarshal([]byte(entries[0].FieldValues["event"]), &ev); err != nil {
		k.t.Fatalf("run:submitted of %s: %v", runID, err)
	}
	return ev.Request.Inputs.DelayMS
}

// loadAverage is the first three fields of /proc/loadavg ("?" where it
// cannot be read).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
