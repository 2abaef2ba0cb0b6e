package main_test

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/internal/testwait"
)

// paidServer is a local OpenAI-compatible server that answers after a
// delay, counts the requests and bills each at its model's price, and
// counts the POSTs of the paid agent's write step; in all, and by model
// (the kill trial gives each of its paid runs a model of its own).
type paidServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests int
	billed   float64
	writes   int
	byModel  map[string]*modelBill
}

// modelBill is what the paid server saw of one model: requests by their
// last message, the bill, and the writes whose text names the model's
// answer.
type modelBill struct {
	requests map[string]int
	billed   float64
	writes   int
}

// paidWritePrefix and paidWriteSuffix frame the model's name in the paid
// agent's write: "answered: An answer from <model>."
const paidWritePrefix, paidWriteSuffix = "answered: An answer from ", "."

// paidPrice is the server's price of every model, per million tokens in and
// out; each answer is 1,000 tokens in and 50 out.
const paidPrice = 2.0

func newPaidServer(t *testing.T) *paidServer {
	s := &paidServer{byModel: map[string]*modelBill{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/write" {
			s.mu.Lock()
			s.writes++
			if text := string(body); strings.HasPrefix(text, paidWritePrefix) {
				s.model(strings.TrimSuffix(strings.TrimPrefix(text, paidWritePrefix), paidWriteSuffix)).writes++
			}
			s.mu.Unlock()
			return
		}
		var req struct {
			Model    string `json:"model"`
			Messages []struct {
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		json.Unmarshal(body, &req)
		var last string
		if n := len(req.Messages); n > 0 {
			last = string(req.Messages[n-1].Content)
		}
		s.mu.Lock()
		s.requests++
		s.billed += 1050 * paidPrice / 1e6
		m := s.model(req.Model)
		m.requests[last]++
		m.billed += 1050 * paidPrice / 1e6
		s.mu.Unlock()
		time.Sleep(40 * time.Millisecond) // a call in flight long enough to be cut
		w.Header().Set("Content-Type", "application/json")
		// The answer names the model, so that the write step's input, made
		// from it, changes with the model and the write runs live.
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"An answer from %s."},"finish_reason":"stop"}],"usage":{"prompt_tokens":1000,"completion_tokens":50,"total_tokens":1050}}`, req.Model, req.Model)
	}))
	t.Cleanup(s.Close)
	return s
}

// model is model's bill, made on first use; s.mu is held.
func (s *paidServer) model(name string) *modelBill {
	m := s.byModel[name]
	if m == nil {
		m = &modelBill{requests: map[string]int{}}
		s.byModel[name] = m
	}
	return m
}

// bill returns a copy of what the server saw of model.
func (s *paidServer) bill(model string) modelBill {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.model(model)
	return modelBill{requests: maps.Clone(m.requests), billed: m.billed, writes: m.writes}
}

// take returns the counts since the last take and resets them.
func (s *paidServer) take() (requests, writes int, billed float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	requests, writes, billed = s.requests, s.writes, s.billed
	s.requests, s.writes, s.billed = 0, 0, 0
	return
}

// inFlight says which calls of journal j had started and not finished.
func inFlight(j runJournal) map[string]bool {
	open := map[string]bool{}
	for _, e := range j.events {
		if e.Call == nil {
			continue
		}
		id := e.Call.Kind + ":" + e.Call.Key
		switch e.Kind {
		case "call:start":
			open[id] = true
		case "call:done":
			delete(open, id)
		}
	}
	return open
}

// TestNoPaidCallTwice: a case run of the paid agent with every model call
// live (another model) and its write step allowed, its worker SIGKILLed once
// the run has written its first k events, for k = 1, 2, … until the run ends
// before the kill, and resumed by a second worker. Each time the model
// server sees each call whose answer reached the journal once, plus at most
// the one call in flight at the kill; the write runs once, or twice only
// when it was in flight at the kill; and the run's outcome costs no less than
// what the server billed (a call lost in flight counts at its worst case).
func TestNoPaidCallTwice(t *testing.T) { noPaidCallTwice(t, false) }

// TestNoPaidCallTwiceInSuite is TestNoPaidCallTwice for the child of a
// run_suite of the paid case under one arm with the same options: its
// worker (the suite's coordinator's too) SIGKILLed once the child has
// written its first k events, the suite resumed by a second worker and
// ended with the child passed once.
func TestNoPaidCallTwiceInSuite(t *testing.T) { noPaidCallTwice(t, true) }

// noPaidCallTwice runs TestNoPaidCallTwice, on a suite's child when inSuite.
func noPaidCallTwice(t *testing.T, inSuite bool) {
	vurl := testenv.ValkeyURL(t)
	srv := newPaidServer(t)
	ns := testenv.UniqueName(t, "wpaid")
	client := testenv.ValkeyClientAt(t, vurl, ns)
	store := "PYRULA_FIXTURE_STORE=file://" + t.TempDir()
	env := func(consumer string) []string {
		return workerEnv(vurl, ns, consumer, store, "PYRULA_CLAIM_IDLE=300ms", "PYRULA_RUN_LEASE=1s",
			"PYRULA_LLM_REF=openai", "OPENAI_API_KEY=sk-paid", "OPENAI_BASE_URL="+srv.URL+"/v1", "PAIDTEST_WRITE_URL="+srv.URL+"/write")
	}
	replies := ns + ":case-replies"

	// The recording: the paid agent run live once, saved after its start.
	rec := startReadyOf(t, paidBin, env("recorder")...)
	sendAll(t, client, ns+":case-messages", []any{envelope{MessageID: "record", Type: "start_run", Body: map[string]any{"target_name": "paid"}}})
	got, last := readReplies(t, client, replies, "0", 1, 30*time.Second)
	recorded := runResultID(got[0])
	if recorded == "" {
		t.Fatalf("start_run: %+v", got[0])
	}
	waitRunsFinished(t, client, ns, []string{recorded}, 30*time.Second)
	sendAll(t, client, ns+":case-messages", []any{envelope{MessageID: "save", Type: "save_case", Body: map[string]any{"target_name": "paid", "run_id": recorded, "fork_after_seq": 2}}})
	got, last = readReplies(t, client, replies, last, 1, 30*time.Second)
	hash := fixtureHashOf(got[0])
	if hash == "" {
		t.Fatalf("save_case: %+v", got[0])
	}
	rec.sigkill()
	if requests, writes, _ := srv.take(); requests != 3 || writes != 1 {
		t.Fatalf("the recording made %d model requests and %d writes, want 3 and 1", requests, writes)
	}

	options := paidOptions("m2")
	typ, body := "run_case", map[string]any{"target_name": "paid", "source": map[string]any{"bundle": map[string]any{"fixture_hash": hash}}, "options": options}
	if inSuite {
		typ, body = "run_suite", map[string]any{"target_name": "paid", "cases": map[string]any{"bundles": []string{hash}},
			"arms": []map[string]any{{"name": "m2", "options": options}}}
	}
	kills := 0
	for k := 1; k < 100; k++ {
		id := fmt.Sprintf("case-%d", k)
		a := startReadyOf(t, paidBin, env(fmt.Sprintf("a%d", k))...)
		sendAll(t, client, ns+":case-messages", []any{envelope{MessageID: id, Type: typ, Body: body}})
		// The reply to this message: a reclaimed earlier message may be
		// replied to again (the same reply) before it.
		var r reply
		for r.MessageID != id {
			got, last = readReplies(t, client, replies, last, 1, 30*time.Second)
			r = got[0]
		}
		// The run watched: the case run, or the suite's one child.
		runID, waitFor := runResultID(r), []string{runResultID(r)}
		if inSuite {
			var res struct {
				SuiteID string `json:"suite_id"`
			}
			json.Unmarshal(r.Result, &res)
			runID, waitFor = res.SuiteID+":0:0", []string{res.SuiteID, res.SuiteID + ":0:0"}
		}
		if r.Status != "ok" || runID == "" || runID == ":0:0" {
			t.Fatalf("%s %s: %+v", typ, id, r)
		}
		events := ns + ":{" + runID + "}:events"
		var atKill runJournal
		ended := false
		// Ended: the run watched and, in a suite, the suite too (a child
		// may end before the kill and its suite not).
		allEnded := func() bool {
			for _, id := range waitFor {
				if len(readJournal(t, client, ns, id).terminal()) == 0 {
					return false
				}
			}
			return true
		}
		testwait.Eventually(t, 30*time.Second, fmt.Sprintf("run %s at %d events", runID, k), func() bool {
			n, err := client.Do(t.Context(), client.B().Xlen().Key(events).Build()).AsInt64()
			if err != nil && !valkey.IsValkeyNil(err) {
				t.Fatal(err)
			}
			// A run that ends with fewer than k events (the last kill cut
			// its suite after the child's last event) is not cut again.
			if n < int64(k) && !(n > 0 && allEnded()) {
				return false
			}
			a.sigkill()
			atKill = readJournal(t, client, ns, runID)
			ended = allEnded()
			return true
		})
		if !ended {
			kills++
			b := startReadyOf(t, paidBin, env(fmt.Sprintf("b%d", k))...)
			waitRunsFinished(t, client, ns, waitFor, 60*time.Second)
			// The next trial's run goes to its own first worker alone.
			b.sigkill()
		}
		waitRunsFinished(t, client, ns, waitFor, 60*time.Second)
		if inSuite {
			if o := suiteOutcome(t, client, ns, waitFor[0]); o.Total != 1 || o.ByStatus["pass"] != 1 {
				t.Errorf("kill after %d events: suite %s ended %+v, want its one child passed", k, waitFor[0], o)
			}
		}
		j := readJournal(t, client, ns, runID)
		requests, writes, billed := srv.take()
		answered := 0
		for _, e := range j.events {
			if e.Kind == "call:done" && e.Call != nil && e.Call.Kind == "model" {
				answered++
			}
		}
		open := inFlight(atKill)
		modelInFlight := 0
		for c := range open {
			if strings.HasPrefix(c, "model:") {
				modelInFlight++
			}
		}
		if answered != 3 || requests < answered || requests > answered+modelInFlight {
			t.Errorf("kill after %d events: the server saw %d model requests for %d journaled answers (%d in flight at the kill)\n%s", k, requests, answered, modelInFlight, j)
		}
		if writes < 1 || (writes > 1 && !open["step:notify:0"]) || writes > 2 {
			t.Errorf("kill after %d events: the write ran %d times (in flight at the kill: %v)\n%s", k, writes, open["step:notify:0"], j)
		}
		cost := -1.0
		for _, e := range j.events {
			if e.Kind == "case:outcome" {
				cost = e.CostUSD
			}
		}
		if cost < billed-1e-12 {
			t.Errorf("kill after %d events: the outcome costs $%g, below the $%g the server billed for %d requests (%d answers journaled)", k, cost, billed, requests, answered)
		}
		t.Logf("kill after %d events (in flight: %v): %d model requests, %d answers, %d writes; outcome $%g, billed $%g", k, keys(open), requests, answered, writes, cost, billed)
		if ended {
			t.Logf("%d trials, %d kills; the run has %d events", k, kills, len(j.events))
			break
		}
	}
	if kills < 5 {
		t.Errorf("only %d kills landed in a run: the trial did not cut the run", kills)
	}
}

// keys are m's keys that are true.
func keys(m map[string]bool) []string {
	var out []string
	for k, v := range m {
		if v {
			out = append(out, k)
		}
	}
	return out
}
