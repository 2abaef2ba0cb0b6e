package anthropicllm_test

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
	"github.com/pyrula/caseworker/llm/anthropicllm"
)

const testKey = "sk-ant-test-0123456789-secret"

// reply is one answer of the fake API.
type reply struct {
	status int
	header map[string]string
	body   string
	hang   bool // wait until the client goes away, answer nothing
}

// request is what the fake API received.
type request struct {
	method, path string
	header       http.Header
	body         []byte
	at           time.Time
}

// fakeAPI speaks the Messages API wire format: it answers POST /v1/messages
// with its replies in order (the last one repeats) and records the requests.
type fakeAPI struct {
	t       *testing.T
	srv     *httptest.Server
	mu      sync.Mutex
	replies []reply
	reqs    []request
	arrived chan struct{} // gets a value per request, if anyone listens
}

func newFakeAPI(t *testing.T, replies ...reply) *fakeAPI {
	t.Helper()
	f := &fakeAPI{t: t, replies: replies, arrived: make(chan struct{}, 100)}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	n := len(f.reqs)
	f.reqs = append(f.reqs, request{method: r.Method, path: r.URL.Path, header: r.Header.Clone(), body: body, at: time.Now()})
	rep := f.replies[min(n, len(f.replies)-1)]
	f.mu.Unlock()
	f.arrived <- struct{}{}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, errorJSON("not_found_error", "no such path"))
		return
	}
	if rep.hang {
		<-r.Context().Done()
		return
	}
	w.Header().Set("content-type", "application/json")
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(rep.status)
	_, _ = io.WriteString(w, rep.body)
}

func (f *fakeAPI) requests() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.reqs...)
}

func (f *fakeAPI) client(t *testing.T, p llm.Policy) *anthropicllm.Client {
	t.Helper()
	c, err := anthropicllm.New(anthropicllm.Options{APIKey: testKey, BaseURL: f.srv.URL, Policy: p, HTTPClient: f.srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fast is a policy that keeps the tests quick.
var fast = llm.Policy{Attempts: 3, Timeout: 2 * time.Second, Backoff: time.Millisecond, MaxWait: 50 * time.Millisecond}

func errorJSON(typ, msg string) string {
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
	return string(b)
}

// messageJSON is a Messages API answer with the given content blocks.
func messageJSON(stop, usage string, content ...string) string {
	return `{"id":"msg_01","type":"message","role":"assistant","model":"claude-test",` +
		`"content":[` + strings.Join(content, ",") + `],"stop_reason":"` + stop + `","stop_sequence":null,` +
		`"usage":` + usage + `}`
}

func ok(body string) reply { return reply{status: 200, body: body} }

// jsonEqual fails the test unless got and want are the same JSON value.
func jsonEqual(t *testing.T, what string, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v in %s", what, err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: bad want: %v", what, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s:\n got %s\nwant %s", what, got, want)
	}
}

func modelError(t *testing.T, err error) *host.ModelError {
	t.Helper()
	var me *host.ModelError
	if !errors.As(err, &me) {
		t.Fatalf("err = %v (%T), want a *host.ModelError", err, err)
	}
	if strings.Contains(err.Error(), testKey) {
		t.Errorf("the error holds the API key: %v", err)
	}
	return me
}

func wantModelError(t *testing.T, err error, want host.ModelError) {
	t.Helper()
	me := modelError(t, err)
	if *me != want {
		t.Errorf("error = %+v, want %+v", *me, want)
	}
}

var lookupSchema = json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string","description":"the order"}},"required":["order_id"],"additionalProperties":false}`)

func TestToolUseRoundTrip(t *testing.T) {
	f := newFakeAPI(t,
		ok(messageJSON("tool_use", `{"input_tokens":120,"output_tokens":30}`,
			`{"type":"text","text":"Let me look."}`,
			`{"type":"tool_use","id":"toolu_01","name":"lookup_order","input":{ "order_id" : "ord_7Q2K" }}`)),
		ok(messageJSON("end_turn", `{"input_tokens":200,"output_tokens":12}`,
			`{"type":"text","text":"Your refund is on its way."}`)),
	)
	c := f.client(t, fast)
	ctx := context.Background()
	req := flow.ModelRequest{
		Model:    "claude-test",
		System:   "You are a support agent.",
		Messages: []flow.Message{flow.UserText("Refund ord_7Q2K please")},
		Tools:    []string{"lookup_order", "ping"},
		ToolSpecs: []flow.ToolSpec{
			{Name: "lookup_order", Description: "Look up an order.", InputSchema: lookupSchema},
			{Name: "ping"}, // no schema: {"type":"object"}
		},
		MaxTokens: 1000,
	}
	resp, err := c.Call(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want := flow.ModelResponse{
		Role: "assistant",
		Content: []flow.Block{
			flow.TextBlock("Let me look."),
			{Type: "tool_use", ID: "toolu_01", Name: "lookup_order", Input: json.RawMessage(`{"order_id":"ord_7Q2K"}`)},
		},
		StopReason: "tool_use",
		Usage:      &flow.Usage{InputTokens: 120, OutputTokens: 30},
	}
	if !reflect.DeepEqual(resp, want) {
		t.Fatalf("first answer:\n got %+v\nwant %+v", resp, want)
	}

	req.Messages = append(req.Messages, resp.Message(), flow.Message{Role: "user", Blocks: []flow.Block{
		{Type: "tool_result", ToolUseID: "toolu_01", Content: json.RawMessage(`{"order_id":"ord_7Q2K","status":"delivered"}`)},
		{Type: "tool_result", ToolUseID: "toolu_02", Content: json.RawMessage(`"refund: not allowed"`), IsError: true},
	}})
	resp, err = c.Call(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want = flow.ModelResponse{
		Role:       "assistant",
		Content:    []flow.Block{flow.TextBlock("Your refund is on its way.")},
		StopReason: "end_turn",
		Usage:      &flow.Usage{InputTokens: 200, OutputTokens: 12},
	}
	if !reflect.DeepEqual(resp, want) {
		t.Fatalf("second answer:\n got %+v\nwant %+v", resp, want)
	}

	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	for i, r := range reqs {
		if r.method != http.MethodPost || r.path != "/v1/messages" {
			t.Errorf("request %d: %s %s, want POST /v1/messages", i, r.method, r.path)
		}
		// SDK v2's WithAPIKey sends the key as a bearer token.
		if got := r.header.Get("Authorization"); got != "Bearer "+testKey {
			t.Errorf("request %d: Authorization = %q, want the API key as a bearer token", i, got)
		}
		if r.header.Get("anthropic-version") == "" {
			t.Errorf("request %d: no anthropic-version header", i)
		}
		if got := r.header.Get("Content-Type"); got != "application/json" {
			t.Errorf("request %d: Content-Type = %q", i, got)
		}
	}
	tools := `[
		{"name":"lookup_order","description":"Look up an order.","input_schema":` + string(lookupSchema) + `},
		{"name":"ping","input_schema":{"type":"object"}}]`
	jsonEqual(t, "first request", reqs[0].body, `{
		"model":"claude-test","max_tokens":1000,
		"system":[{"type":"text","text":"You are a support agent."}],
		"messages":[{"role":"user","content":[{"type":"text","text":"Refund ord_7Q2K please"}]}],
		"tools":`+tools+`}`)
	jsonEqual(t, "second request", reqs[1].body, `{
		"model":"claude-test","max_tokens":1000,
		"system":[{"type":"text","text":"You are a support agent."}],
		"messages":[
			{"role":"user","content":[{"type":"text","text":"Refund ord_7Q2K please"}]},
			{"role":"assistant","content":[
				{"type":"text","text":"Let me look."},
				{"type":"tool_use","id":"toolu_01","name":"lookup_order","input":{"order_id":"ord_7Q2K"}}]},
			{"role":"user","content":[
				{"type":"tool_result","tool_use_id":"toolu_01",
				 "content":[{"type":"text","text":"{\"order_id\":\"ord_7Q2K\",\"status\":\"delivered\"}"}]},
				{"type":"tool_result","tool_use_id":"toolu_02","is_error":true,
				 "content":[{"type":"text","text":"\"refund: not allowed\""}]}]}],
		"tools":`+tools+`}`)
}

func TestInputSchema(t *testing.T) {
	tests := []struct{ schema, sent string }{
		{string(lookupSchema), string(lookupSchema)}, // byte for byte, keyword order kept
		{``, `{"type":"object"}`},
		{`null`, `{"type":"object"}`},
		{` {} `, `{"type":"object"}`},
		{`{"properties":{"x":{"type":"integer"}}}`, `{"type":"object","properties":{"x":{"type":"integer"}}}`},
	}
	for _, tt := range tests {
		f := newFakeAPI(t, ok(messageJSON("end_turn", `{"input_tokens":1,"output_tokens":1}`)))
		_, err := f.client(t, fast).Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("q")},
			ToolSpecs: []flow.ToolSpec{{Name: "t", InputSchema: json.RawMessage(tt.schema)}}})
		if err != nil {
			t.Fatal(err)
		}
		body := string(f.requests()[0].body)
		if want := `"input_schema":` + tt.sent; !strings.Contains(body, want) {
			t.Errorf("schema %q: body %s lacks %s", tt.schema, body, want)
		}
	}
}

func TestDefaultsAndLargeMaxTokens(t *testing.T) {
	f := newFakeAPI(t, ok(messageJSON("end_turn", `{"input_tokens":1,"output_tokens":1}`, `{"type":"text","text":"hi"}`)))
	c := f.client(t, fast)
	// No system, no tools, MaxTokens 0: max_tokens is flow.DefaultMaxTokens.
	if _, err := c.Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("hi")}}); err != nil {
		t.Fatal(err)
	}
	// A max_tokens the SDK would want streamed for is sent as it is.
	if _, err := c.Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("hi")}, MaxTokens: 64000}); err != nil {
		t.Fatal(err)
	}
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	jsonEqual(t, "request", reqs[0].body, `{"model":"m","max_tokens":4096,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`)
	jsonEqual(t, "request", reqs[1].body, `{"model":"m","max_tokens":64000,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`)
}

func TestUsageWithCacheTokens(t *testing.T) {
	f := newFakeAPI(t, ok(messageJSON("max_tokens",
		`{"input_tokens":7,"output_tokens":4096,"cache_creation_input_tokens":1500,"cache_read_input_tokens":30000,"service_tier":"standard"}`,
		`{"type":"thinking","thinking":"hmm","signature":"sig"}`,
		`{"type":"text","text":"partial"}`)))
	resp, err := f.client(t, fast).Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("q")}})
	if err != nil {
		t.Fatal(err)
	}
	want := flow.ModelResponse{
		Role:       "assistant",
		Content:    []flow.Block{flow.TextBlock("partial")},
		StopReason: "max_tokens",
		Usage:      &flow.Usage{InputTokens: 7, OutputTokens: 4096, CacheCreationInputTokens: 1500, CacheReadInputTokens: 30000},
	}
	if !reflect.DeepEqual(resp, want) {
		t.Fatalf("answer:\n got %+v\nwant %+v", resp, want)
	}
	// The answer survives the journal's JSON round trip.
	raw, err := json.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	var back flow.ModelResponse
	if err := json.Unmarshal(raw, &back); err != nil || !reflect.DeepEqual(back, want) {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
}

func TestEmptyContent(t *testing.T) {
	f := newFakeAPI(t, ok(messageJSON("end_turn", `{"input_tokens":3,"output_tokens":0}`)))
	resp, err := f.client(t, fast).Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("q")}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Content == nil || len(resp.Content) != 0 || resp.Usage == nil || *resp.Usage != (flow.Usage{InputTokens: 3}) {
		t.Fatalf("answer = %+v", resp)
	}
}

func TestRetryAfter(t *testing.T) {
	const okBody = `{"id":"m","type":"message","role":"assistant","content":[{"type":"text","text":"done"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":2}}`
	limited := errorJSON("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit")
	tests := []struct {
		name     string
		header   map[string]string
		maxWait  time.Duration
		min, max time.Duration
	}{
		// retry-after-ms wins over retry-after.
		{"retry-after-ms", map[string]string{"retry-after": "1", "retry-after-ms": "150"}, time.Second, 150 * time.Millisecond, 900 * time.Millisecond},
		// retry-after: 1 is capped by MaxWait.
		{"retry-after capped", map[string]string{"retry-after": "1"}, 120 * time.Millisecond, 120 * time.Millisecond, 900 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeAPI(t, reply{status: 429, header: tt.header, body: limited}, ok(okBody))
			p := llm.Policy{Attempts: 3, Timeout: 2 * time.Second, Backoff: time.Millisecond, MaxWait: tt.maxWait}
			resp, err := f.client(t, p).Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("q")}})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Text() != "done" || *resp.Usage != (flow.Usage{InputTokens: 1, OutputTokens: 2}) {
				t.Errorf("answer = %+v", resp)
			}
			reqs := f.requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests, want 2", len(reqs))
			}
			if gap := reqs[1].at.Sub(reqs[0].at); gap < tt.min || gap > tt.max {
				t.Errorf("waited %v between attempts, want %v to %v", gap, tt.min, tt.max)
			}
		})
	}
}

func TestServerErrorThenSuccess(t *testing.T) {
	f := newFakeAPI(t,
		reply{status: 500, body: errorJSON("api_error", "Internal server error")},
		ok(messageJSON("end_turn", `{"input_tokens":5,"output_tokens":6}`, `{"type":"text","text":"recovered"}`)))
	resp, err := f.client(t, fast).Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("q")}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text() != "recovered" || resp.StopReason != "end_turn" {
		t.Errorf("answer = %+v", resp)
	}
	if n := len(f.requests()); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
}

func TestStatusKinds(t *testing.T) {
	tests := []struct {
		status int
		kind   host.ModelErrorKind
	}{
		{400, host.ModelInvalidRequest},
		{401, host.ModelAuthentication},
		{403, host.ModelAuthentication},
		{404, host.ModelInvalidRequest},
		{413, host.ModelInvalidRequest},
		{422, host.ModelInvalidRequest},
		{429, host.ModelRateLimited},
		{500, host.ModelServerError},
		{502, host.ModelServerError},
		{503, host.ModelOverloaded},
		{529, host.ModelOverloaded},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.status), func(t *testing.T) {
			msg := "provider says " + string(tt.kind)
			f := newFakeAPI(t, reply{status: tt.status, body: errorJSON("some_error", msg)})
			_, err := f.client(t, fast).Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("q")}})
			attempts := 1
			if tt.kind.Transient() {
				attempts = fast.Attempts
			}
			wantModelError(t, err, host.ModelError{Kind: tt.kind, Client: "anthropic", Status: tt.status, Attempts: attempts, Message: msg})
			if n := len(f.requests()); n != attempts {
				t.Errorf("%d requests, want %d", n, attempts)
			}
		})
	}
}

func TestOverloadedEveryTime(t *testing.T) {
	f := newFakeAPI(t, reply{status: 529, body: errorJSON("overloaded_error", "Overloaded")})
	p := llm.Policy{Attempts: 4, Timeout: 2 * time.Second, Backoff: time.Millisecond, MaxWait: 20 * time.Millisecond}
	_, err := f.client(t, p).Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("q")}})
	wantModelError(t, err, host.ModelError{Kind: host.ModelOverloaded, Client: "anthropic", Status: 529, Attempts: 4, Message: "Overloaded"})
	if n := len(f.requests()); n != 4 {
		t.Errorf("%d requests, want 4", n)
	}
	var me *host.ModelError
	if errors.As(err, &me); me.ErrorType() != "model_overloaded" {
		t.Errorf("ErrorType = %q", me.ErrorType())
	}
}

func TestAuthentication(t *testing.T) {
	f := newFakeAPI(t, reply{status: 401, body: errorJSON("authentication_error", "invalid x-api-key")})
	_, err := f.client(t, fast).Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("q")}})
	wantModelError(t, err, host.ModelError{Kind: host.ModelAuthentication, Client: "anthropic", Status: 401, Attempts: 1, Message: "invalid x-api-key"})
	if n := len(f.requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
	if want := "anthropic: model call failed after 1 attempt(s): authentication (HTTP 401): invalid x-api-key"; err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
}

func TestErrorBodyNotJSON(t *testing.T) {
	f := newFakeAPI(t, reply{status: 502, body: "<html>bad gateway</html>"})
	p := llm.Policy{Attempts: 1}
	_, err := f.client(t, p).Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("q")}})
	wantModelError(t, err, host.ModelError{Kind: host.ModelServerError, Client: "anthropic", Status: 502, Attempts: 1, Message: "Bad Gateway: <html>bad gateway</html>"})
}

func TestBadResponse(t *testing.T) {
	tests := []struct{ name, body, msg string }{
		{"malformed", `{"id":"msg_01","type":"message","content":[`, "the answer is not a Messages API message: unexpected end of JSON input"},
		{"not a message", `{"hello":"world"}`, `the answer's type is "", not "message"`},
		{"no usage", `{"type":"message","role":"assistant","content":[]}`, "the answer has no usage"},
		{"tool_use without id", messageJSON("tool_use", `{"input_tokens":1,"output_tokens":1}`, `{"type":"tool_use","name":"x","input":{}}`),
			"content block 0: a tool_use needs an id and a name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeAPI(t, ok(tt.body))
			_, err := f.client(t, fast).Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("q")}})
			wantModelError(t, err, host.ModelError{Kind: host.ModelBadResponse, Client: "anthropic", Status: 200, Attempts: 1, Message: tt.msg})
			if n := len(f.requests()); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	f := newFakeAPI(t, reply{hang: true})
	p := llm.Policy{Attempts: 2, Timeout: 100 * time.Millisecond, Backoff: time.Millisecond, MaxWait: 10 * time.Millisecond}
	start := time.Now()
	_, err := f.client(t, p).Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("q")}})
	wantModelError(t, err, host.ModelError{Kind: host.ModelTimeout, Client: "anthropic", Attempts: 2, Message: "no answer within 100ms"})
	if d := time.Since(start); d < 200*time.Millisecond || d > 2*time.Second {
		t.Errorf("took %v, want about 200ms", d)
	}
	if n := len(f.requests()); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
}

func TestCancelled(t *testing.T) {
	f := newFakeAPI(t, reply{hang: true})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-f.arrived
		cancel()
	}()
	start := time.Now()
	_, err := f.client(t, llm.Policy{Attempts: 3, Timeout: 10 * time.Second}).Call(ctx, flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("q")}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	var me *host.ModelError
	if errors.As(err, &me) {
		t.Errorf("err = %v is a ModelError", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %v", d)
	}
	if n := len(f.requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

func TestConnectionError(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c, err := anthropicllm.New(anthropicllm.Options{APIKey: testKey, BaseURL: url, Policy: llm.Policy{Attempts: 2, Backoff: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("q")}})
	me := modelError(t, err)
	if me.Kind != host.ModelConnection || me.Attempts != 2 || me.Status != 0 || me.Client != "anthropic" || me.Message == "" {
		t.Errorf("error = %+v", *me)
	}
}

func TestInvalidRequestIsNotSent(t *testing.T) {
	tests := []struct {
		name string
		req  flow.ModelRequest
		msg  string
	}{
		{"role", flow.ModelRequest{Model: "m", Messages: []flow.Message{{Role: "system", Text: "x"}}},
			`message 0: role "system" is neither user nor assistant`},
		{"block", flow.ModelRequest{Model: "m", Messages: []flow.Message{{Role: "user", Blocks: []flow.Block{{Type: "image"}}}}},
			`message 0: block 0: type "image" has no Messages API mapping`},
		{"schema", flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("q")},
			ToolSpecs: []flow.ToolSpec{{Name: "t", InputSchema: json.RawMessage(`[1]`)}}},
			"tool t: the input schema is not a JSON object"},
		{"schema type", flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("q")},
			ToolSpecs: []flow.ToolSpec{{Name: "t", InputSchema: json.RawMessage(`{"type":"array"}`)}}},
			`tool t: the input schema's type is "array", not "object"`},
		{"model", flow.ModelRequest{Messages: []flow.Message{flow.UserText("q")}}, "the request names no model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeAPI(t, ok("{}"))
			_, err := f.client(t, fast).Call(context.Background(), tt.req)
			wantModelError(t, err, host.ModelError{Kind: host.ModelInvalidRequest, Client: "anthropic", Message: tt.msg})
			if n := len(f.requests()); n != 0 {
				t.Errorf("%d requests, want 0", n)
			}
		})
	}
}

func TestNew(t *testing.T) {
	_, err := anthropicllm.New(anthropicllm.Options{})
	if err == nil || !strings.Contains(err.Error(), "ANTHROPIC_API_KEY") {
		t.Errorf("New without a key: %v, want an error naming ANTHROPIC_API_KEY", err)
	}
	_, err = anthropicllm.New(anthropicllm.Options{APIKey: testKey, BaseURL: "localhost:8080"})
	if err == nil || strings.Contains(err.Error(), testKey) {
		t.Errorf("New with a bad base URL: %v", err)
	}
	_, err = anthropicllm.FromEnv(func(string) string { return "" }, llm.Policy{})
	if err == nil || !strings.Contains(err.Error(), "ANTHROPIC_API_KEY") {
		t.Errorf("FromEnv without a key: %v", err)
	}

	f := newFakeAPI(t, ok(messageJSON("end_turn", `{"input_tokens":1,"output_tokens":1}`, `{"type":"text","text":"env"}`)))
	env := map[string]string{"ANTHROPIC_API_KEY": "sk-from-env", "ANTHROPIC_BASE_URL": f.srv.URL}
	c, err := anthropicllm.FromEnv(func(k string) string { return env[k] }, fast)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Call(context.Background(), flow.ModelRequest{Model: "m", Messages: []flow.Message{flow.UserText("q")}})
	if err != nil || resp.Text() != "env" {
		t.Fatalf("Call = %+v, %v", resp, err)
	}
	if got := f.requests()[0].header.Get("Authorization"); got != "Bearer sk-from-env" {
		t.Errorf("Authorization = %q", got)
	}
}
