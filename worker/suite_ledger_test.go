package worker_test

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/suite"
)

// ledgerServer is a local OpenAI-compatible chat completions server that
// bills every request from its price table (dollars per million prompt and
// completion tokens, by model) and keeps the bill per model. support_agent
// asks it once for a tool (lookup_order), then for the answer.
type ledgerServer struct {
	*httptest.Server
	mu       sync.Mutex
	billed   map[string]float64
	requests map[string]int
}

// ledgerPrices are the server's prices: gpt-a at $1 and gpt-b at $3 per
// million tokens, prompt and completion alike.
var ledgerPrices = map[string]float64{"gpt-a": 1, "gpt-b": 3}

func newLedgerServer(t *testing.T) *ledgerServer {
	t.Helper()
	s := &ledgerServer{billed: map[string]float64{}, requests: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model    string `json:"model"`
			Messages []struct {
				Role string `json:"role"`
			} `json:"messages"`
		}
		price, ok := 0.0, false
		if r.URL.Path == "/v1/chat/completions" && json.NewDecoder(r.Body).Decode(&req) == nil && len(req.Messages) > 0 {
			price, ok = ledgerPrices[req.Model]
		}
		if !ok {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		const prompt, completion = 1000, 50
		s.mu.Lock()
		s.billed[req.Model] += float64(prompt+completion) * price / 1e6
		s.requests[req.Model]++
		s.mu.Unlock()
		message, finish := `{"role":"assistant","content":"Your order is delivered."}`, "stop"
		if req.Messages[len(req.Messages)-1].Role != "tool" {
			message = `{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"lookup_order","arguments":"{\"order_id\":\"ord_7Q2K\"}"}}]}`
			finish = "tool_calls"
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":%s,"finish_reason":%q}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
			req.Model, message, finish, prompt, completion, prompt+completion)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *ledgerServer) bill() (map[string]float64, map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, n := map[string]float64{}, map[string]int{}
	for k, v := range s.billed {
		b[k] = v
	}
	for k, v := range s.requests {
		n[k] = v
	}
	return b, n
}

// TestSuiteBudgetAgainstTheLedger: 2 arms (two models at different prices)
// × 50 recorded support agent runs from the journal, every model call
// live through the official OpenAI SDK to a local server that bills them,
// on three workers under one max_cost_usd that cannot pay for them all.
// The suite's spend never passes the ceiling, equals what the server
// billed, and per arm equals the server's bill of that arm's model.
func TestSuiteBudgetAgainstTheLedger(t *testing.T) {
	t.Parallel()
	srv := newLedgerServer(t)
	e := setupOn(t, testenv.ValkeyClient(t), nil, nil, nil)
	e.getenv = func(k string) string {
		if k == "OPENAI_BASE_URL" {
			return srv.URL + "/v1"
		}
		if k == "OPENAI_API_KEY" {
			return "test-key"
		}
		return ""
	}
	// The worker setupOn started has no model environment: start three
	// that do, and stop it.
	e.w.Stop(t.Context())
	for _, name := range []string{"l1", "l2", "l3"} {
		w := *e
		w.cfg.ConsumerName = name
		w.start(nil)
	}
	const cases = 50
	for range cases {
		e.record("support_agent")
	}
	prices := map[string]any{}
	for m, p := range ledgerPrices {
		prices[m] = map[string]any{"input_per_mtok": p, "output_per_mtok": p}
	}
	arm := func(model string) map[string]any {
		return map[string]any{"name": model, "options": map[string]any{"model": model, "llm_ref": "openai", "prices": prices,
			"allow_write": []string{"tool:refund"}}}
	}
	const ceiling = 0.2
	e.send("ledger", "run_suite", map[string]any{"target_name": "support_agent", "max_cost_usd": ceiling,
		"cases": map[string]any{"journal": map[string]any{"fork": "inputs_only"}},
		"arms":  []map[string]any{arm("gpt-a"), arm("gpt-b")}})
	o := suiteOutcome(t, e.waitRun(suiteResult(t, e.waitReplies(1)[0]).SuiteID, 120*time.Second))
	billed, requests := srv.bill()
	total := billed["gpt-a"] + billed["gpt-b"]
	t.Logf("%d children: %v; server billed $%.6f for %v requests; ceiling $%g", o.Total, o.ByStatus, total, requests, ceiling)
	if o.Total != 2*cases || o.Budget == nil || requests["gpt-a"] == 0 || requests["gpt-b"] == 0 {
		t.Fatalf("outcome %d children, budget %+v, requests %v", o.Total, o.Budget, requests)
	}
	if float64(o.Budget.SpentUSD) > ceiling || total > ceiling+1e-9 {
		t.Fatalf("spent %v (server billed %v) over the ceiling %v", o.Budget.SpentUSD, total, ceiling)
	}
	if math.Abs(float64(o.Budget.SpentUSD)-total) > 1e-6 || o.Budget.UnsettledUSD != 0 {
		t.Fatalf("the suite's spend %v (unsettled %v) is not what the server billed, %v", o.Budget.SpentUSD, o.Budget.UnsettledUSD, total)
	}
	for _, a := range o.Arms {
		if math.Abs(float64(a.CostUSD)-billed[a.Name]) > 1e-6 {
			t.Errorf("arm %s spent %v; the server billed %v for %s", a.Name, a.CostUSD, billed[a.Name], a.Name)
		}
	}
	if o.ByStatus[suite.Fail] == 0 {
		t.Fatalf("no child was refused for budget: %v", o.ByStatus)
	}
}
