// Package anthropicllm owns the Anthropic model client: a flow.ModelClient
// that sends each model call to the Anthropic Messages API (POST
// /v1/messages) through the official Go SDK, and maps the request, the
// answer and the failures between flow's types and the wire format.
//
// The SDK's own retries are turned off: every request is sent through
// llm.Do, so the shared llm.Policy is the one retry loop (attempts,
// per-attempt timeout, backoff, retry-after). Failures are returned as
// *host.ModelError with Client "anthropic", and their messages never hold
// the API key or the request's headers.
//
// Besides the SDK and the standard library, the package imports only flow
// and llm.
package anthropicllm

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/llm"
)

// ClientName is the Client of the *host.ModelError values this package
// returns.
const ClientName = "anthropic"

// The environment variables FromEnv reads.
const (
	// EnvAPIKey holds the API key (required).
	EnvAPIKey = "ANTHROPIC_API_KEY"
	// EnvBaseURL holds the API's base URL (optional; the SDK's default,
	// https://api.anthropic.com/, when empty).
	EnvBaseURL = "ANTHROPIC_BASE_URL"
)

// Options configures a Client.
type Options struct {
	// APIKey authenticates the requests; required.
	APIKey string
	// BaseURL is the API's base URL, e.g. a proxy or a test server; empty
	// means the SDK's default (https://api.anthropic.com/).
	BaseURL string
	// Policy bounds each call: attempts, per-attempt timeout, backoff and
	// the cap on waits. Zero fields take llm's defaults.
	Policy llm.Policy
	// HTTPClient sends the requests; nil means http.DefaultClient. Its own
	// Timeout, if any, applies on top of Policy.Timeout.
	HTTPClient *http.Client
}

// Client is a flow.ModelClient for the Anthropic Messages API. It is safe
// for concurrent use.
type Client struct {
	sdk     anthropic.Client
	policy  llm.Policy
	timeout time.Duration // Policy.Timeout with its default applied
}

var _ flow.ModelClient = (*Client)(nil)

// New returns a Client for o. It fails when o.APIKey is empty (the error
// names ANTHROPIC_API_KEY) or o.BaseURL is not an absolute http(s) URL. The
// SDK reads nothing from the environment: o is the whole configuration.
func New(o Options) (*Client, error) {
	if strings.TrimSpace(o.APIKey) == "" {
		return nil, fmt.Errorf("anthropicllm: no API key: set %s", EnvAPIKey)
	}
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithAPIKey(o.APIKey),
		option.WithMaxRetries(0),
	}
	if o.BaseURL != "" {
		u, err := url.Parse(o.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("anthropicllm: base URL (%s) is not an absolute http(s) URL", EnvBaseURL)
		}
		opts = append(opts, option.WithBaseURL(o.BaseURL))
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	opts = append(opts, option.WithHTTPClient(hc))
	return &Client{
		sdk:     anthropic.NewClient(opts...),
		policy:  o.Policy,
		timeout: cmp.Or(o.Policy.Timeout, llm.DefaultTimeout),
	}, nil
}

// FromEnv returns a Client configured from the environment as getenv reads
// it (os.Getenv when nil): the API key from ANTHROPIC_API_KEY (required)
// and the base URL from ANTHROPIC_BASE_URL (optional), with the retry
// policy p.
func FromEnv(getenv func(string) string, p llm.Policy) (*Client, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	return New(Options{APIKey: getenv(EnvAPIKey), BaseURL: getenv(EnvBaseURL), Policy: p})
}

// Call implements flow.ModelClient: it sends req as one Messages API
// request, under the client's Policy, and returns the answer's text and
// tool_use blocks, its stop_reason and its usage. A request that cannot be
// expressed in the wire format fails with kind invalid_request before
// anything is sent (Attempts 0). When ctx ends, Call returns ctx's error.
func (c *Client) Call(ctx context.Context, req flow.ModelRequest) (flow.ModelResponse, error) {
	params, err := newParams(req)
	if err != nil {
		return flow.ModelResponse{}, &host.ModelError{Kind: host.ModelInvalidRequest, Client: ClientName, Message: err.Error()}
	}
	return llm.Do(ctx, c.policy, func(ctx context.Context) (flow.ModelResponse, *llm.Attempt) {
		var (
			raw  []byte
			resp *http.Response
		)
		// WithRequestTimeout also keeps the SDK from refusing a large
		// max_tokens as needing streaming; llm.Do's own timeout is the same.
		_, err := c.sdk.Messages.New(ctx, params,
			option.WithResponseBodyInto(&raw),
			option.WithResponseInto(&resp),
			option.WithRequestTimeout(c.timeout))
		if err != nil {
			return flow.ModelResponse{}, c.failed(err)
		}
		out, err := decodeResponse(raw)
		if err != nil {
			status := 0
			if resp != nil {
				status = resp.StatusCode
			}
			return flow.ModelResponse{}, &llm.Attempt{Err: &host.ModelError{
				Kind: host.ModelBadResponse, Client: ClientName, Status: status, Message: err.Error()}}
		}
		return out, nil
	})
}

// newParams maps a flow request to the Messages API's.
func newParams(req flow.ModelRequest) (anthropic.MessageNewParams, error) {
	if req.Model == "" {
		return anthropic.MessageNewParams{}, errors.New("the request names no model")
	}
	p := anthropic.MessageNewParams{
		Model:     anthropic.Model(req.Model),
		MaxTokens: req.MaxTokens,
		Messages:  make([]anthropic.MessageParam, 0, len(req.Messages)),
	}
	if p.MaxTokens <= 0 {
		p.MaxTokens = flow.DefaultMaxTokens
	}
	if req.System != "" {
		p.System = []anthropic.TextBlockParam{{Text: req.System}}
	}
	for i, m := range req.Messages {
		blocks, err := contentParams(m)
		if err != nil {
			return anthropic.MessageNewParams{}, fmt.Errorf("message %d: %w", i, err)
		}
		switch m.Role {
		case "user":
			p.Messages = append(p.Messages, anthropic.NewUserMessage(blocks...))
		case "assistant":
			p.Messages = append(p.Messages, anthropic.NewAssistantMessage(blocks...))
		default:
			return anthropic.MessageNewParams{}, fmt.Errorf("message %d: role %q is neither user nor assistant", i, m.Role)
		}
	}
	for _, spec := range req.ToolSpecs {
		schema, err := inputSchema(spec.InputSchema)
		if err != nil {
			return anthropic.MessageNewParams{}, fmt.Errorf("tool %s: %w", spec.Name, err)
		}
		tool := anthropic.ToolParam{Name: spec.Name, InputSchema: schema}
		if spec.Description != "" {
			tool.Description = anthropic.String(spec.Description)
		}
		p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: &tool})
	}
	return p, nil
}

// contentParams maps a message's content: plain text is one text block.
func contentParams(m flow.Message) ([]anthropic.ContentBlockParamUnion, error) {
	if m.Blocks == nil {
		return []anthropic.ContentBlockParamUnion{anthropic.NewTextBlock(m.Text)}, nil
	}
	out := make([]anthropic.ContentBlockParamUnion, 0, len(m.Blocks))
	for j, b := range m.Blocks {
		switch b.Type {
		case "text":
			out = append(out, anthropic.NewTextBlock(b.Text))
		case "tool_use":
			input := b.Input
			if len(input) == 0 {
				input = json.RawMessage("{}")
			}
			out = append(out, anthropic.ContentBlockParamUnion{OfToolUse: &anthropic.ToolUseBlockParam{
				ID: b.ID, Name: b.Name, Input: input}})
		case "tool_result":
			r := anthropic.ToolResultBlockParam{ToolUseID: b.ToolUseID}
			if len(b.Content) > 0 {
				// The tool's JSON result, as the text the model reads.
				r.Content = []anthropic.ToolResultBlockParamContentUnion{
					{OfText: &anthropic.TextBlockParam{Text: string(b.Content)}}}
			}
			if b.IsError {
				r.IsError = anthropic.Bool(true)
			}
			out = append(out, anthropic.ContentBlockParamUnion{OfToolResult: &r})
		default:
			return nil, fmt.Errorf("block %d: type %q has no Messages API mapping", j, b.Type)
		}
	}
	return out, nil
}

// inputSchema maps a tool's JSON Schema to the SDK's input_schema. The
// schema's JSON is sent as it is (the SDK's structured form would write its
// other keywords in random order, and a tools prefix that changes from call
// to call defeats prompt caching); one without a type gets "type":
// "object", and an empty one is {"type": "object"}.
func inputSchema(raw json.RawMessage) (anthropic.ToolInputSchemaParam, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		raw = json.RawMessage(`{"type":"object"}`)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return anthropic.ToolInputSchemaParam{}, errors.New("the input schema is not a JSON object")
	}
	if t, ok := fields["type"]; ok {
		var s string
		if json.Unmarshal(t, &s) != nil || s != "object" {
			return anthropic.ToolInputSchemaParam{}, fmt.Errorf(`the input schema's type is %s, not "object"`, t)
		}
	} else {
		rest := bytes.TrimSpace(raw[1:])
		sep := ","
		if rest[0] == '}' {
			sep = ""
		}
		raw = slices.Concat([]byte(`{"type":"object"`+sep), rest)
	}
	return param.Override[anthropic.ToolInputSchemaParam](json.RawMessage(raw)), nil
}

// wireMessage is the shape decodeResponse checks before decoding a body
// with the SDK's type, whose decoder accepts any JSON.
type wireMessage struct {
	Type    string            `json:"type"`
	Role    string            `json:"role"`
	Content []json.RawMessage `json:"content"`
	Usage   *json.RawMessage  `json:"usage"`
}

// decodeResponse maps a Messages API answer to a flow.ModelResponse; an
// error means the body is not the wire format.
func decodeResponse(raw []byte) (flow.ModelResponse, error) {
	var w wireMessage
	if err := json.Unmarshal(raw, &w); err != nil {
		return flow.ModelResponse{}, fmt.Errorf("the answer is not a Messages API message: %v", err)
	}
	switch {
	case w.Type != "message":
		return flow.ModelResponse{}, fmt.Errorf("the answer's type is %q, not \"message\"", w.Type)
	case w.Role != "assistant":
		return flow.ModelResponse{}, fmt.Errorf("the answer's role is %q, not \"assistant\"", w.Role)
	case w.Content == nil:
		return flow.ModelResponse{}, errors.New("the answer has no content")
	case w.Usage == nil:
		return flow.ModelResponse{}, errors.New("the answer has no usage")
	}
	var m anthropic.Message
	if err := json.Unmarshal(raw, &m); err != nil {
		return flow.ModelResponse{}, fmt.Errorf("the answer is not a Messages API message: %v", err)
	}
	out := flow.ModelResponse{
		Role:       "assistant",
		Content:    []flow.Block{},
		StopReason: string(m.StopReason),
		Usage: &flow.Usage{
			InputTokens:              m.Usage.InputTokens,
			OutputTokens:             m.Usage.OutputTokens,
			CacheCreationInputTokens: m.Usage.CacheCreationInputTokens,
			CacheReadInputTokens:     m.Usage.CacheReadInputTokens,
		},
	}
	for i, b := range m.Content {
		switch b.Type {
		case "text":
			out.Content = append(out.Content, flow.TextBlock(b.Text))
		case "tool_use":
			if b.ID == "" || b.Name == "" {
				return flow.ModelResponse{}, fmt.Errorf("content block %d: a tool_use needs an id and a name", i)
			}
			input := json.RawMessage("{}")
			if len(b.Input) > 0 && string(b.Input) != "null" {
				var buf bytes.Buffer
				if err := json.Compact(&buf, b.Input); err != nil {
					return flow.ModelResponse{}, fmt.Errorf("content block %d: tool_use input: %v", i, err)
				}
				input = buf.Bytes()
			}
			out.Content = append(out.Content, flow.Block{Type: "tool_use", ID: b.ID, Name: b.Name, Input: input})
		}
		// Other block types (thinking, server tools) are never asked for
		// and have no flow.Block form: they are left out.
	}
	return out, nil
}

// failed classifies an error of one attempt.
func (c *Client) failed(err error) *llm.Attempt {
	var apiErr *anthropic.Error
	if errors.As(err, &apiErr) {
		a := &llm.Attempt{Err: &host.ModelError{
			Kind:    kindOf(apiErr.StatusCode),
			Client:  ClientName,
			Status:  apiErr.StatusCode,
			Message: apiMessage(apiErr),
		}}
		if apiErr.Response != nil {
			h := apiErr.Response.Header
			a.RetryAfter = llm.ParseRetryAfter(h.Get("retry-after"), h.Get("retry-after-ms"), time.Now())
		}
		return a
	}
	e := &host.ModelError{Kind: host.ModelConnection, Client: ClientName, Message: err.Error()}
	var netErr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		e.Kind, e.Message = host.ModelTimeout, "no answer within "+c.timeout.String()
	case errors.As(err, &netErr) && netErr.Timeout():
		e.Kind = host.ModelTimeout
	}
	return &llm.Attempt{Err: e}
}

// kindOf classifies an HTTP error status.
func kindOf(status int) host.ModelErrorKind {
	switch {
	case status == http.StatusTooManyRequests:
		return host.ModelRateLimited
	case status == 529 || status == http.StatusServiceUnavailable:
		return host.ModelOverloaded
	case status >= 500:
		return host.ModelServerError
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return host.ModelAuthentication
	case status == http.StatusRequestTimeout:
		return host.ModelTimeout
	}
	// 400, 404, 413, 422 and every other client error.
	return host.ModelInvalidRequest
}

// apiMessage is the provider's error message: error.message of the body,
// else the status text and the start of the body (a proxy's page, say).
func apiMessage(e *anthropic.Error) string {
	if e.Message != "" {
		return e.Message
	}
	msg := http.StatusText(e.StatusCode)
	if msg == "" {
		msg = fmt.Sprintf("HTTP %d", e.StatusCode)
	}
	if body := strings.TrimSpace(e.RawJSON()); body != "" {
		const max = 200
		if len(body) > max {
			body = strings.ToValidUTF8(body[:max], "") + "…"
		}
		msg += ": " + body
	}
	return msg
}
