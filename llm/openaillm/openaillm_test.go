package openaillm_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/llm"
	"github.com/pyrula/caseworker/llm/openaillm"
)

const testKey = "sk-test-0123456789abcdef"

// request is one request the fake server received.
type request struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

// fakeServer speaks the Chat Completions wire format: handle answers the
// n-th (0-based) request.
type fakeServer struct {
	t      *testing.T
	srv    *httptest.Server
	handle func(n int, w http.ResponseWriter, r *http.Request, body []byte)

	mu   sync.Mutex
	reqs []request
}

func newServer(t *testing.T, handle func(n int, w http.ResponseWriter, r *http.Request, body []byte)) *fakeServer {
	t.Helper()
	f := &fakeServer{t: t, handle: handle}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("reading the request body: %v", err)
		}
		f.mu.Lock()
		n := len(f.reqs)
		f.reqs = append(f.reqs, request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
		f.mu.Unlock()
		f.handle(n, w, r, body)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeServer) baseURL() string { return f.srv.URL + "/v1" }

func (f *fakeServer) requests() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.reqs...)
}

// client returns a client of f with the test key and policy p.
func (f *fakeServer) client(t *testing.T, p llm.Policy) *openaillm.Client {
	t.Helper()
	c, err := openaillm.New(openaillm.Options{APIKey: testKey, BaseURL: f.baseURL(), Policy: p, HTTPClient: f.srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// completion is a chat.completion body with one choice.
func completion(message, finish, usage string) string {
	return `{"id":"chatcmpl-1","object":"chat.completion","created":1767225600,"model":"gpt-test",` +
		`"choices":[{"index":0,"message":` + message + `,"finish_reason":"` + finish + `","logprobs":null}],` +
		`"usage":` + usage + `}`
}

func apiError(message, typ string) string {
	return `{"error":{"message":"` + message + `","type":"` + typ + `","param":null,"code":null}}`
}

func textAnswer(text string) string {
	return completion(`{"role":"assistant","content":"`+text+`","refusal":null}`, "stop",
		`{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13}`)
}

// fast is a policy for tests: short waits.
var fast = llm.Policy{Attempts: 3, Timeout: 5 * time.Second, Backoff: time.Millisecond, MaxWait: time.Second}

// assertJSON checks that got is the JSON want (semantically).
func assertJSON(t *testing.T, what string, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v: %s", what, err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: bad want: %v", what, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s:\n got %s\nwant %s", what, got, want)
	}
}

func modelError(t *testing.T, err error) *host.ModelError {
	t.Helper()
	var me *host.ModelError
	if !errors.As(err, &me) {
		t.Fatalf("err = %v (%T), want a *host.ModelError", err, err)
	}
	return me
}

func assertModelError(t *testing.T, err error, want host.ModelError) {
	t.Helper()
	if got := modelError(t, err); *got != want {
		t.Fatalf("err = %#v\nwant %#v", *got, want)
	}
}

func assertRequests(t *testing.T, f *fakeServer, n int) []request {
	t.Helper()
	reqs := f.requests()
	if len(reqs) != n {
		t.Fatalf("the server got %d request(s), want %d", len(reqs), n)
	}
	return reqs
}

var lookupSchema = json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string","maxLength":32}},"required":["order_id"],"additionalProperties":false}`)

func TestToolUseRoundTrip(t *testing.T) {
	f := newServer(t, func(n int, w http.ResponseWriter, r *http.Request, body []byte) {
		switch n {
		case 0:
			writeJSON(w, 200, completion(`{"role":"assistant","content":"Let me look.","refusal":null,"tool_calls":[`+
				`{"id":"call_A1","type":"function","function":{"name":"lookup_order","arguments":"{\"order_id\":\"ord_7Q2K\"}"}},`+
				`{"id":"call_B2","type":"function","function":{"name":"ping","arguments":"{}"}}]}`, "tool_calls",
				`{"prompt_tokens":40,"completion_tokens":12,"total_tokens":52}`))
		default:
			writeJSON(w, 200, completion(`{"role":"assistant","content":"It was delivered.","refusal":null}`, "stop",
				`{"prompt_tokens":90,"completion_tokens":5,"total_tokens":95}`))
		}
	})
	c := f.client(t, fast)
	tools := []flow.ToolSpec{
		{Name: "lookup_order", Description: "Look up an order by id.", InputSchema: lookupSchema},
		{Name: "ping"},
	}
	req := flow.ModelRequest{
		Model:     "gpt-test",
		System:    "You are a support agent.",
		Messages:  []flow.Message{flow.UserText("Where is ord_7Q2K?")},
		Tools:     []string{"lookup_order", "ping"},
		ToolSpecs: tools,
	}
	resp, err := c.Call(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := flow.ModelResponse{
		Role: "assistant",
		Content: []flow.Block{
			flow.TextBlock("Let me look."),
			{Type: "tool_use", ID: "call_A1", Name: "lookup_order", Input: json.RawMessage(`{"order_id":"ord_7Q2K"}`)},
			{Type: "tool_use", ID: "call_B2", Name: "ping", Input: json.RawMessage(`{}`)},
		},
		StopReason: "tool_use",
		Usage:      &flow.Usage{InputTokens: 40, OutputTokens: 12},
	}
	if !reflect.DeepEqual(resp, want) {
		t.Fatalf("resp = %+v\nwant %+v", resp, want)
	}

	req.Messages = append(req.Messages, resp.Message(), flow.Message{Role: "user", Blocks: []flow.Block{
		{Type: "tool_result", ToolUseID: "call_A1", Content: json.RawMessage(`{"order_id":"ord_7Q2K","status":"delivered"}`)},
		{Type: "tool_result", ToolUseID: "call_B2", Content: json.RawMessage(`"unknown_tool: no tool ping"`), IsError: true},
		flow.TextBlock("Please be brief."),
	}})
	req.MaxTokens = 512
	resp, err = c.Call(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want = flow.ModelResponse{
		Role:       "assistant",
		Content:    []flow.Block{flow.TextBlock("It was delivered.")},
		StopReason: "end_turn",
		Usage:      &flow.Usage{InputTokens: 90, OutputTokens: 5},
	}
	if !reflect.DeepEqual(resp, want) {
		t.Fatalf("resp = %+v\nwant %+v", resp, want)
	}

	reqs := assertRequests(t, f, 2)
	for _, r := range reqs {
		if r.Method != http.MethodPost || r.Path != "/v1/chat/completions" {
			t.Fatalf("request %s %s, want POST /v1/chat/completions", r.Method, r.Path)
		}
		if got := r.Header.Get("Authorization"); got != "Bearer "+testKey {
			t.Fatalf("Authorization = %q", got)
		}
	}
	toolsJSON := `[
		{"type":"function","function":{"name":"lookup_order","description":"Look up an order by id.",
		 "parameters":{"type":"object","properties":{"order_id":{"type":"string","maxLength":32}},"required":["order_id"],"additionalProperties":false}}},
		{"type":"function","function":{"name":"ping","parameters":{"type":"object"}}}]`
	assertJSON(t, "first request", reqs[0].Body, `{
		"model":"gpt-test",
		"max_completion_tokens":4096,
		"messages":[
			{"role":"system","content":"You are a support agent."},
			{"role":"user","content":"Where is ord_7Q2K?"}],
		"tools":`+toolsJSON+`}`)
	assertJSON(t, "second request", reqs[1].Body, `{
		"model":"gpt-test",
		"max_completion_tokens":512,
		"messages":[
			{"role":"system","content":"You are a support agent."},
			{"role":"user","content":"Where is ord_7Q2K?"},
			{"role":"assistant","content":"Let me look.","tool_calls":[
				{"id":"call_A1","type":"function","function":{"name":"lookup_order","arguments":"{\"order_id\":\"ord_7Q2K\"}"}},
				{"id":"call_B2","type":"function","function":{"name":"ping","arguments":"{}"}}]},
			{"role":"tool","tool_call_id":"call_A1","content":"{\"order_id\":\"ord_7Q2K\",\"status\":\"delivered\"}"},
			{"role":"tool","tool_call_id":"call_B2","content":"error: unknown_tool: no tool ping"},
			{"role":"user","content":"Please be brief."}],
		"tools":`+toolsJSON+`}`)
}

func TestRequestMapping(t *testing.T) {
	f := newServer(t, func(n int, w http.ResponseWriter, r *http.Request, body []byte) {
		writeJSON(w, 200, textAnswer("ok"))
	})
	c := f.client(t, fast)
	_, err := c.Call(context.Background(), flow.ModelRequest{
		Model: "gpt-test",
		Messages: []flow.Message{
			{Role: "user", Blocks: []flow.Block{flow.TextBlock("one"), flow.TextBlock("two")}},
			{Role: "assistant", Text: "plain"},
			{Role: "assistant", Blocks: []flow.Block{flow.TextBlock("a"), flow.TextBlock("b"),
				{Type: "tool_use", ID: "t1", Name: "noinput"}}},
			{Role: "user", Blocks: []flow.Block{{Type: "tool_result", ToolUseID: "t1", Content: json.RawMessage(`[1,2]`)}}},
			{Role: "user", Blocks: []flow.Block{}},
		},
		MaxTokens: 7,
	})
	if err != nil {
		t.Fatal(err)
	}
	reqs := assertRequests(t, f, 1)
	assertJSON(t, "request", reqs[0].Body, `{
		"model":"gpt-test",
		"max_completion_tokens":7,
		"messages":[
			{"role":"user","content":[{"type":"text","text":"one"},{"type":"text","text":"two"}]},
			{"role":"assistant","content":"plain"},
			{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"tool_calls":[
				{"id":"t1","type":"function","function":{"name":"noinput","arguments":"{}"}}]},
			{"role":"tool","tool_call_id":"t1","content":"[1,2]"},
			{"role":"user","content":""}]}`)
}

func TestUnmappableRequest(t *testing.T) {
	f := newServer(t, func(n int, w http.ResponseWriter, r *http.Request, body []byte) {
		writeJSON(w, 200, textAnswer("ok"))
	})
	c := f.client(t, fast)
	for name, req := range map[string]flow.ModelRequest{
		"role":   {Model: "m", Messages: []flow.Message{{Role: "system", Text: "x"}}},
		"block":  {Model: "m", Messages: []flow.Message{{Role: "user", Blocks: []flow.Block{{Type: "image"}}}}},
		"model":  {Messages: []flow.Message{flow.UserText("x")}},
		"schema": {Model: "m", Messages: []flow.Message{flow.UserText("x")}, ToolSpecs: []flow.ToolSpec{{Name: "t", InputSchema: json.RawMessage(`[1]`)}}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.Call(context.Background(), req)
			me := modelError(t, err)
			if me.Kind != host.ModelInvalidRequest || me.Attempts != 0 || me.Status != 0 || me.Client != "openai" {
				t.Fatalf("err = %#v", *me)
			}
		})
	}
	assertRequests(t, f, 0)
}

func TestStopReasonsAndUsage(t *testing.T) {
	for _, tc := range []struct {
		finish, want string
	}{
		{"stop", "end_turn"},
		{"tool_calls", "tool_use"},
		{"length", "max_tokens"},
		{"content_filter", "refusal"},
		{"function_call", "function_call"},
	} {
		t.Run(tc.finish, func(t *testing.T) {
			f := newServer(t, func(n int, w http.ResponseWriter, r *http.Request, body []byte) {
				writeJSON(w, 200, completion(`{"role":"assistant","content":"hi","refusal":null}`, tc.finish,
					`{"prompt_tokens":1000,"completion_tokens":50,"total_tokens":1050,"prompt_tokens_details":{"cached_tokens":800,"audio_tokens":0}}`))
			})
			resp, err := f.client(t, fast).Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("x")}})
			if err != nil {
				t.Fatal(err)
			}
			want := flow.ModelResponse{
				Role:       "assistant",
				Content:    []flow.Block{flow.TextBlock("hi")},
				StopReason: tc.want,
				Usage:      &flow.Usage{InputTokens: 200, OutputTokens: 50, CacheReadInputTokens: 800},
			}
			if !reflect.DeepEqual(resp, want) {
				t.Fatalf("resp = %+v\nwant %+v", resp, want)
			}
		})
	}
}

func TestRefusalAndMissingUsage(t *testing.T) {
	f := newServer(t, func(n int, w http.ResponseWriter, r *http.Request, body []byte) {
		writeJSON(w, 200, `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[`+
			`{"index":0,"message":{"role":"assistant","content":null,"refusal":"I can't help with that."},"finish_reason":"stop"}]}`)
	})
	resp, err := f.client(t, fast).Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("x")}})
	if err != nil {
		t.Fatal(err)
	}
	want := flow.ModelResponse{
		Role:       "assistant",
		Content:    []flow.Block{flow.TextBlock("I can't help with that.")},
		StopReason: "end_turn",
		Usage:      &flow.Usage{},
	}
	if !reflect.DeepEqual(resp, want) {
		t.Fatalf("resp = %+v\nwant %+v", resp, want)
	}
}

func TestRateLimitedRetryAfterMs(t *testing.T) {
	f := newServer(t, func(n int, w http.ResponseWriter, r *http.Request, body []byte) {
		if n == 0 {
			w.Header().Set("retry-after-ms", "50")
			writeJSON(w, 429, apiError("Rate limit reached for requests", "requests"))
			return
		}
		writeJSON(w, 200, textAnswer("ok"))
	})
	// Without the header the wait would be 5s or more.
	c := f.client(t, llm.Policy{Attempts: 3, Timeout: 5 * time.Second, Backoff: 10 * time.Second, MaxWait: 10 * time.Second})
	start := time.Now()
	resp, err := c.Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("x")}})
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text() != "ok" {
		t.Fatalf("text = %q", resp.Text())
	}
	assertRequests(t, f, 2)
	if elapsed < 50*time.Millisecond || elapsed > 2*time.Second {
		t.Fatalf("took %v, want about 50ms", elapsed)
	}
}

func TestServerErrorThenSuccess(t *testing.T) {
	f := newServer(t, func(n int, w http.ResponseWriter, r *http.Request, body []byte) {
		if n == 0 {
			writeJSON(w, 500, apiError("The server had an error while processing your request.", "server_error"))
			return
		}
		writeJSON(w, 200, textAnswer("ok"))
	})
	resp, err := f.client(t, fast).Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("x")}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text() != "ok" {
		t.Fatalf("text = %q", resp.Text())
	}
	assertRequests(t, f, 2)
}

func TestOverloadedEveryTime(t *testing.T) {
	f := newServer(t, func(n int, w http.ResponseWriter, r *http.Request, body []byte) {
		writeJSON(w, 503, apiError("The engine is currently overloaded, please try again later.", "server_error"))
	})
	_, err := f.client(t, fast).Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("x")}})
	assertModelError(t, err, host.ModelError{Kind: host.ModelOverloaded, Client: "openai", Status: 503, Attempts: 3,
		Message: "The engine is currently overloaded, please try again later."})
	assertRequests(t, f, 3)
}

func TestAuthenticationNotRetriedAndRedacted(t *testing.T) {
	f := newServer(t, func(n int, w http.ResponseWriter, r *http.Request, body []byte) {
		// A server that echoes the whole key back.
		writeJSON(w, 401, apiError("Incorrect API key provided: "+testKey+".", "invalid_request_error"))
	})
	_, err := f.client(t, fast).Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("x")}})
	assertModelError(t, err, host.ModelError{Kind: host.ModelAuthentication, Client: "openai", Status: 401, Attempts: 1,
		Message: "Incorrect API key provided: [redacted]."})
	if strings.Contains(err.Error(), testKey) || strings.Contains(err.Error(), "Bearer") {
		t.Fatalf("err.Error() = %q holds the key", err.Error())
	}
	reqs := assertRequests(t, f, 1)
	if got := reqs[0].Header.Get("Authorization"); got != "Bearer "+testKey {
		t.Fatalf("Authorization = %q", got)
	}
}

func TestStatusKinds(t *testing.T) {
	for _, tc := range []struct {
		status   int
		body     string
		kind     host.ModelErrorKind
		attempts int
		message  string
	}{
		{400, apiError("Invalid value for 'model'.", "invalid_request_error"), host.ModelInvalidRequest, 1, "Invalid value for 'model'."},
		{403, apiError("Forbidden.", "invalid_request_error"), host.ModelAuthentication, 1, "Forbidden."},
		{404, apiError("The model 'nope' does not exist.", "invalid_request_error"), host.ModelInvalidRequest, 1, "The model 'nope' does not exist."},
		{413, apiError("Too large.", "invalid_request_error"), host.ModelInvalidRequest, 1, "Too large."},
		{422, apiError("Unprocessable.", "invalid_request_error"), host.ModelInvalidRequest, 1, "Unprocessable."},
		{502, `<html>bad gateway</html>`, host.ModelServerError, 2, "Bad Gateway"},
	} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			f := newServer(t, func(n int, w http.ResponseWriter, r *http.Request, body []byte) {
				if strings.HasPrefix(tc.body, "<") {
					w.Header().Set("Content-Type", "text/html")
					w.WriteHeader(tc.status)
					_, _ = io.WriteString(w, tc.body)
					return
				}
				writeJSON(w, tc.status, tc.body)
			})
			p := fast
			p.Attempts = 2
			_, err := f.client(t, p).Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("x")}})
			assertModelError(t, err, host.ModelError{Kind: tc.kind, Client: "openai", Status: tc.status, Attempts: tc.attempts, Message: tc.message})
			assertRequests(t, f, tc.attempts)
		})
	}
}

func TestBadResponse(t *testing.T) {
	for name, body := range map[string]string{
		"malformed JSON": `{"id":"x","choices":[`,
		"no choices":     `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[]}`,
		"arguments not an object": completion(`{"role":"assistant","content":null,"tool_calls":[`+
			`{"id":"c1","type":"function","function":{"name":"f","arguments":"[1,2]"}}]}`, "tool_calls",
			`{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}`),
		"arguments not JSON": completion(`{"role":"assistant","content":null,"tool_calls":[`+
			`{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":"}}]}`, "tool_calls",
			`{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}`),
	} {
		t.Run(name, func(t *testing.T) {
			f := newServer(t, func(n int, w http.ResponseWriter, r *http.Request, _ []byte) {
				writeJSON(w, 200, body)
			})
			_, err := f.client(t, fast).Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("x")}})
			me := modelError(t, err)
			if me.Kind != host.ModelBadResponse || me.Status != 200 || me.Attempts != 1 || me.Client != "openai" || me.Message == "" {
				t.Fatalf("err = %#v", *me)
			}
			assertRequests(t, f, 1)
		})
	}
}

func TestTimeout(t *testing.T) {
	f := newServer(t, func(n int, w http.ResponseWriter, r *http.Request, body []byte) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	p := llm.Policy{Attempts: 2, Timeout: 100 * time.Millisecond, Backoff: time.Millisecond, MaxWait: time.Second}
	start := time.Now()
	_, err := f.client(t, p).Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("x")}})
	assertModelError(t, err, host.ModelError{Kind: host.ModelTimeout, Client: "openai", Attempts: 2, Message: "no answer within 100ms"})
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Fatalf("took %v", elapsed)
	}
	assertRequests(t, f, 2)
}

func TestCancelled(t *testing.T) {
	arrived := make(chan struct{}, 1)
	f := newServer(t, func(n int, w http.ResponseWriter, r *http.Request, body []byte) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel()
	}()
	start := time.Now()
	_, err := f.client(t, fast).Call(ctx, flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("x")}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	var me *host.ModelError
	if errors.As(err, &me) {
		t.Fatalf("err = %v is a ModelError", err)
	}
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Fatalf("took %v", elapsed)
	}
	assertRequests(t, f, 1)
}

func TestConnectionError(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	base := srv.URL + "/v1"
	srv.Close()
	c, err := openaillm.New(openaillm.Options{APIKey: testKey, BaseURL: base, Policy: llm.Policy{Attempts: 2, Timeout: time.Second, Backoff: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("x")}})
	me := modelError(t, err)
	if me.Kind != host.ModelConnection || me.Status != 0 || me.Attempts != 2 || strings.Contains(me.Error(), testKey) {
		t.Fatalf("err = %#v", *me)
	}
}

func TestBaseURLWithoutKey(t *testing.T) {
	f := newServer(t, func(n int, w http.ResponseWriter, r *http.Request, body []byte) {
		writeJSON(w, 200, textAnswer("local"))
	})
	c, err := openaillm.FromEnv(func(name string) string {
		return map[string]string{"OPENAI_BASE_URL": f.baseURL()}[name]
	}, fast)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Call(context.Background(), flow.ModelRequest{Model: "llama3", Messages: []flow.Message{flow.UserText("x")}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text() != "local" {
		t.Fatalf("text = %q", resp.Text())
	}
	reqs := assertRequests(t, f, 1)
	if got := reqs[0].Header.Get("Authorization"); got != "" {
		t.Fatalf("Authorization = %q, want none", got)
	}
	if reqs[0].Path != "/v1/chat/completions" {
		t.Fatalf("path = %q", reqs[0].Path)
	}
}

func TestNewNeedsKeyOrBaseURL(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-from-the-environment")
	_, err := openaillm.New(openaillm.Options{})
	if err == nil || !strings.Contains(err.Error(), "OPENAI_API_KEY") {
		t.Fatalf("err = %v, want one naming OPENAI_API_KEY", err)
	}
	_, err = openaillm.FromEnv(func(string) string { return "" }, llm.Policy{})
	if err == nil || !strings.Contains(err.Error(), "OPENAI_API_KEY") {
		t.Fatalf("FromEnv: err = %v, want one naming OPENAI_API_KEY", err)
	}
	if _, err := openaillm.New(openaillm.Options{BaseURL: "localhost:8000"}); err == nil {
		t.Fatal("a base URL without a scheme was accepted")
	}
}

func TestEnvironmentKeyNotSentToBaseURL(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-from-the-environment")
	t.Setenv("OPENAI_ORG_ID", "org-from-the-environment")
	f := newServer(t, func(n int, w http.ResponseWriter, r *http.Request, body []byte) {
		writeJSON(w, 200, textAnswer("ok"))
	})
	c, err := openaillm.New(openaillm.Options{BaseURL: f.baseURL(), Policy: fast})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("x")}}); err != nil {
		t.Fatal(err)
	}
	reqs := assertRequests(t, f, 1)
	if got := reqs[0].Header.Get("Authorization") + reqs[0].Header.Get("OpenAI-Organization"); got != "" {
		t.Fatalf("the environment's settings were sent: %q", got)
	}
}
