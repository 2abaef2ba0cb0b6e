package cli_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// chatServer is a local OpenAI-compatible server (Chat Completions wire
// format) that plays support_agent's provider: offered tools and no tool
// result yet, it asks for lookup_order; after a tool result it answers;
// with no tools (the refund_policy sub-agent) it says eligible. Every
// answer reports 1000 prompt tokens (200 of them cached) and 50 completion
// tokens. A request with the key "sk-bad-KEY123" gets 401.
type chatServer struct {
	*httptest.Server
	mu     sync.Mutex
	models []string // the model of each request, in order
}

func newChatServer(t *testing.T) *chatServer {
	t.Helper()
	s := &chatServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Authorization") == "Bearer sk-bad-KEY123" {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":{"message":"Incorrect API key provided: sk-bad-KEY123","type":"invalid_request_error","code":"invalid_api_key"}}`))
			return
		}
		var req struct {
			Model    string `json:"model"`
			Messages []struct {
				Role string `json:"role"`
			} `json:"messages"`
			Tools []json.RawMessage `json:"tools"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.models = append(s.models, req.Model)
		n := len(s.models)
		s.mu.Unlock()
		message := `{"role":"assistant","content":"eligible: damaged on delivery"}`
		finish := "stop"
		switch last := req.Messages[len(req.Messages)-1].Role; {
		case len(req.Tools) > 0 && last != "tool":
			message = `{"role":"assistant","content":null,"tool_calls":[{"id":"call_` + string(rune('a'+n)) + `","type":"function","function":{"name":"lookup_order","arguments":"{\"order_id\":\"ord_7Q2K\"}"}}]}`
			finish = "tool_calls"
		case len(req.Tools) > 0:
			message = `{"role":"assistant","content":"Your order ord_7Q2K is delivered; a refund is on its way."}`
		}
		w.Write([]byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"` + req.Model + `","choices":[{"index":0,"message":` + message +
			`,"finish_reason":"` + finish + `"}],"usage":{"prompt_tokens":1000,"completion_tokens":50,"total_tokens":1050,"prompt_tokens_details":{"cached_tokens":200}}}`))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *chatServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.models...)
}

// caseOutcome is the fields of the outcome line these tests read.
type caseOutcome struct {
	Status     string          `json:"status"`
	Code       string          `json:"code"`
	Message    string          `json:"message"`
	LiveCalls  int             `json:"live_calls"`
	CostUSD    json.RawMessage `json:"cost_usd"`
	LLMRef     *string         `json:"llm_ref"`
	Provenance map[string]int  `json:"provenance"`
}

func lastOutcome(t *testing.T, r result) caseOutcome {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var o caseOutcome
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &o); err != nil {
		t.Fatalf("outcome line: %v\n%s", err, r)
	}
	return o
}

// TestLLMRefOpenAICompatible re-runs a recorded agent case on another model
// through --llm-ref openai against a local OpenAI-compatible server: the
// live model calls reach the server with the new model, cost is priced from
// the reported usage exactly, a ceiling too low for one call's worst case
// sends nothing, and bad names, missing keys and workflow targets are
// invalid input.
func TestLLMRefOpenAICompatible(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, _, rec := dev(t, dir, "support_agent", "--dir", dir)
	if rec.Status != "complete" {
		t.Fatalf("recording: %+v", rec)
	}
	srv := newChatServer(t)
	env := []string{"OPENAI_BASE_URL=" + srv.URL + "/v1"}
	args := []string{"case", "run", rec.Case, "--llm-ref", "openai", "--model", "gpt-5.4-mini", "--allow-write", "tool:refund"}

	r := run(t, invocation{args: args, env: env})
	wantOK(t, r)
	o := lastOutcome(t, r)
	if got := srv.requests(); len(got) != 2 || got[0] != "gpt-5.4-mini" || got[1] != "gpt-5.4-mini" {
		t.Fatalf("the server saw %v, want two gpt-5.4-mini calls\n%s", got, r)
	}
	// Two calls of 800 uncached prompt tokens at 0.75, 200 cached at 0.075
	// and 50 output tokens at 4.50 USD per million: 0.00084 USD each. The
	// live answer's tool call has a new tool-use id, so lookup_order (a
	// read) runs live too: three live calls.
	if o.Status != "complete" || o.LiveCalls != 3 || o.Provenance["changed"] != 2 || o.Provenance["live"] != 1 || string(o.CostUSD) != "0.00168" || o.LLMRef == nil || *o.LLMRef != "openai" {
		t.Errorf("outcome %+v cost %s\n%s", o, o.CostUSD, r)
	}

	// A ceiling below one call's worst case sends nothing.
	r = run(t, invocation{args: append(args, "--max-cost-usd", "0.001"), env: env})
	o = lastOutcome(t, r)
	if r.code != 3 || o.Code != "live_budget_exceeded" || !strings.Contains(o.Message, "not sent") || string(o.CostUSD) != "0" {
		t.Errorf("ceiling 0.001: exit %d, %+v", r.code, o)
	}
	if got := srv.requests(); len(got) != 2 {
		t.Errorf("a call over the ceiling reached the server: %v", got)
	}
	// A ceiling with room for each call's worst case lets the run finish.
	r = run(t, invocation{args: append(args, "--max-cost-usd", "0.05"), env: env})
	if o = lastOutcome(t, r); r.code != 0 || string(o.CostUSD) != "0.00168" {
		t.Errorf("ceiling 0.05: exit %d, %+v", r.code, o)
	}

	// A rejected key is a recorded model error; the run fails, exit 3, and
	// the key is printed nowhere.
	r = run(t, invocation{args: args, env: append(env, "OPENAI_API_KEY=sk-bad-KEY123")})
	o = lastOutcome(t, r)
	if r.code != 3 || o.Status != "error" || !strings.Contains(o.Message, "authentication") {
		t.Errorf("bad key: exit %d, %+v\n%s", r.code, o, r)
	}
	if strings.Contains(r.stdout+r.stderr, "KEY123") {
		t.Errorf("the key leaked\n%s", r)
	}

	// Without --llm-ref the agent's own client answers, with a warning.
	r = run(t, invocation{args: []string{"case", "run", rec.Case, "--model", "local-support-1", "--prompt-file", writeFile(t, "prompt.txt", []byte("Be brief.")), "--allow-write", "tool:refund"}})
	if r.code != 0 || !strings.HasPrefix(r.stderr, "warning: ") || !strings.Contains(r.stderr, "own model client") || !strings.Contains(r.stderr, "--llm-ref") {
		t.Errorf("no --llm-ref: want exit 0 and a warning\n%s", r)
	}
	if o = lastOutcome(t, r); o.LLMRef != nil {
		t.Errorf("llm_ref %q without --llm-ref", *o.LLMRef)
	}

	wantError(t, run(t, invocation{args: append(args[:3], "--llm-ref", "nope")}), `llm ref "nope" names no model client (have anthropic, openai)`)
	wantError(t, run(t, invocation{args: append(args[:3], "--llm-ref", "anthropic")}), "ANTHROPIC_API_KEY")
	wantError(t, run(t, invocation{args: append(args[:3], "--llm-ref", "openai")}), "OPENAI_API_KEY")

	// dev (like run) sends the agent's live model calls to the named client.
	before := len(srv.requests())
	r = run(t, invocation{args: []string{"dev", "support_agent", "--dir", t.TempDir(), "--llm-ref", "openai"}, env: env})
	var kept devOut
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &kept); err != nil || r.code != 0 {
		t.Fatalf("dev --llm-ref: %v\n%s", err, r)
	}
	if got := srv.requests()[before:]; len(got) != 2 || got[0] != "local-support-1" ||
		!strings.Contains(string(kept.Result), "a refund is on its way") {
		t.Errorf("dev --llm-ref: the server saw %v; result %s", got, kept.Result)
	}

	// --model and --prompt-file are for agents.
	_, _, wf := dev(t, dir, "checkout", "--dir", dir, "--input", "delay_ms=1")
	wantError(t, run(t, invocation{args: []string{"case", "run", wf.Case, "--model", "gpt-5.4"}}), "--model applies to agents; checkout is a workflow")
}
