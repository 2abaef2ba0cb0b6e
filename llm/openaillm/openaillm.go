// Package openaillm owns the live model client for the OpenAI Chat
// Completions API: a flow.ModelClient that maps flow's model requests
// (Anthropic-like messages of text, tool_use and tool_result blocks) to
// Chat Completions and its answers back, and classifies failures as
// *host.ModelError under the retry policy every provider client shares
// (llm.Policy, llm.Do).
//
// With a base URL (Options.BaseURL, OPENAI_BASE_URL) it serves any server
// compatible with Chat Completions — vLLM, Ollama, LiteLLM and the like —
// and then needs no API key.
//
// It imports flow, flow/host and llm only, besides the official SDK
// (github.com/openai/openai-go/v3), whose own retries it turns off so that
// llm.Do is the one retry loop.
package openaillm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/llm"
)

// ClientName is the client's name in the *host.ModelError values it returns.
const ClientName = "openai"

// Environment variables FromEnv reads.
const (
	// EnvAPIKey holds the API key.
	EnvAPIKey = "OPENAI_API_KEY"
	// EnvBaseURL holds the base URL of a compatible server, e.g.
	// http://localhost:11434/v1 (the path up to /chat/completions).
	EnvBaseURL = "OPENAI_BASE_URL"
)

// Options configure a Client.
type Options struct {
	// APIKey is sent as the bearer token; required unless BaseURL is set
	// (local servers need none).
	APIKey string
	// BaseURL is the API's base URL, the path up to /chat/completions
	// (e.g. http://localhost:8000/v1); "" is the SDK's default
	// (https://api.openai.com/v1/).
	BaseURL string
	// Policy bounds each call: attempts, per-attempt timeout, backoff.
	Policy llm.Policy
	// HTTPClient sends the requests; nil is http.DefaultClient.
	HTTPClient *http.Client
}

// Client is a flow.ModelClient over OpenAI Chat Completions (or a
// compatible server). It is safe for concurrent use.
type Client struct {
	completions openai.ChatCompletionService
	policy      llm.Policy
	apiKey      string
}

var _ flow.ModelClient = (*Client)(nil)

// New returns a Client for o. It fails when o has neither an API key nor a
// base URL (the error names OPENAI_API_KEY), or when the base URL is not an
// http(s) URL.
//
// The client is configured from o alone: unlike the SDK's NewClient it
// reads no OPENAI_* environment variables (FromEnv reads the two it needs),
// so a key in the environment is never sent to a BaseURL that was not
// meant to receive it.
func New(o Options) (*Client, error) {
	if o.APIKey == "" && o.BaseURL == "" {
		return nil, fmt.Errorf("openai: no API key: set %s (or %s for a compatible server that needs none)", EnvAPIKey, EnvBaseURL)
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	opts := []option.RequestOption{
		option.WithEnvironmentProduction(),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0),
	}
	if o.BaseURL != "" {
		u, err := url.Parse(o.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("openai: base URL %q is not an http(s) URL", o.BaseURL)
		}
		opts = append(opts, option.WithBaseURL(o.BaseURL))
	}
	if o.APIKey != "" {
		opts = append(opts, option.WithAPIKey(o.APIKey))
	}
	return &Client{
		completions: openai.NewChatCompletionService(opts...),
		policy:      o.Policy,
		apiKey:      o.APIKey,
	}, nil
}

// FromEnv returns a Client configured from OPENAI_API_KEY and
// OPENAI_BASE_URL as getenv reads them, with policy p. Either must be set;
// the error says which to set, never a value.
func FromEnv(getenv func(string) string, p llm.Policy) (*Client, error) {
	return New(Options{
		APIKey:  strings.TrimSpace(getenv(EnvAPIKey)),
		BaseURL: strings.TrimSpace(getenv(EnvBaseURL)),
		Policy:  p,
	})
}

// Call implements flow.ModelClient: it sends req as one Chat Completions
// request under the client's Policy and returns the first choice's answer.
//
// Failures are *host.ModelError with Client "openai": HTTP 429 is
// rate_limited, 503 overloaded, other 5xx server_error, 408 timeout, 401
// and 403 authentication, other 4xx invalid_request; a success whose body
// is not the wire format (or whose tool-call arguments are not a JSON
// object) is bad_response; no answer at all is connection, and an attempt
// that runs out of Policy.Timeout is timeout. A request that cannot be
// mapped is invalid_request after 0 attempts. When ctx ends, Call returns
// ctx's error.
func (c *Client) Call(ctx context.Context, req flow.ModelRequest) (flow.ModelResponse, error) {
	params, err := buildParams(req)
	if err != nil {
		return flow.ModelResponse{}, &host.ModelError{Kind: host.ModelInvalidRequest, Client: ClientName, Message: err.Error()}
	}
	return llm.Do(ctx, c.policy, func(actx context.Context) (flow.ModelResponse, *llm.Attempt) {
		var httpResp *http.Response
		out, err := c.completions.New(actx, params, option.WithResponseInto(&httpResp))
		if err != nil {
			return flow.ModelResponse{}, c.classify(err, httpResp)
		}
		resp, err := convertResponse(out)
		if err != nil {
			return flow.ModelResponse{}, &llm.Attempt{Err: &host.ModelError{
				Kind: host.ModelBadResponse, Client: ClientName, Status: statusOf(httpResp), Message: err.Error()}}
		}
		return resp, nil
	})
}

// classify turns a failed send into an attempt's outcome. httpResp is the
// last response, nil when none came.
func (c *Client) classify(err error, httpResp *http.Response) *llm.Attempt {
	me := &host.ModelError{Client: ClientName}
	var header http.Header
	var apiErr *openai.Error
	switch {
	case errors.As(err, &apiErr):
		me.Status = apiErr.StatusCode
		me.Message = apiErr.Message
		if apiErr.Response != nil {
			header = apiErr.Response.Header
		}
	case httpResp != nil && httpResp.StatusCode >= 400:
		// An error status whose body the SDK could not read as an error
		// object (a proxy's HTML page, say).
		me.Status = httpResp.StatusCode
		header = httpResp.Header
	}
	if me.Status >= 400 {
		me.Kind = kindOfStatus(me.Status)
		if me.Message == "" {
			me.Message = http.StatusText(me.Status)
		}
	} else {
		var netErr net.Error
		switch {
		case httpResp == nil || errors.As(err, &netErr):
			// No answer, or the connection broke while reading it. (An
			// attempt that ran out of its timeout becomes timeout in
			// llm.Do.)
			me.Kind = host.ModelConnection
		default:
			me.Kind = host.ModelBadResponse
		}
		me.Status = statusOf(httpResp)
		me.Message = err.Error()
	}
	me.Message = c.redact(me.Message)
	a := &llm.Attempt{Err: me}
	if header != nil {
		a.RetryAfter = llm.ParseRetryAfter(header.Get("retry-after"), header.Get("retry-after-ms"), time.Now())
	}
	return a
}

// redact removes the API key from a message, in case a server echoes it.
func (c *Client) redact(msg string) string {
	if c.apiKey == "" {
		return msg
	}
	return strings.ReplaceAll(msg, c.apiKey, "[redacted]")
}

func statusOf(r *http.Response) int {
	if r == nil {
		return 0
	}
	return r.StatusCode
}

// kindOfStatus classifies an HTTP error status.
func kindOfStatus(status int) host.ModelErrorKind {
	switch {
	case status == http.StatusTooManyRequests:
		return host.ModelRateLimited
	case status == http.StatusServiceUnavailable || status == 529:
		return host.ModelOverloaded
	case status >= 500:
		return host.ModelServerError
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return host.ModelAuthentication
	case status == http.StatusRequestTimeout:
		return host.ModelTimeout
	}
	return host.ModelInvalidRequest
}

// ErrorPrefix starts the content of a tool message that answers a failed
// tool call (a tool_result with is_error): Chat Completions has no error
// flag on tool messages, so the model reads it from the text, which is
// ErrorPrefix followed by the error's message (the tool_result's JSON
// string, unquoted).
const ErrorPrefix = "error: "

// buildParams maps a flow request to Chat Completions parameters:
//
//   - System becomes a leading system message (none when empty).
//   - A user message's Text becomes a user message. Its blocks become one
//     tool message per tool_result block (tool_call_id the ToolUseID,
//     content the result's JSON as text, or ErrorPrefix and the message
//     for is_error), followed by one user message of its text blocks when
//     it has any: Chat Completions wants the tool messages right after the
//     assistant message that asked for them. A user message with no blocks
//     becomes a user message with empty content.
//   - An assistant message's text blocks become its content (a string for
//     one, text parts for several) and its tool_use blocks its tool_calls
//     of type function, arguments the input's JSON.
//   - ToolSpecs become function tools, parameters the InputSchema
//     ({"type":"object"} when empty).
//   - MaxTokens is max_completion_tokens (flow.DefaultMaxTokens when 0).
func buildParams(req flow.ModelRequest) (openai.ChatCompletionNewParams, error) {
	p := openai.ChatCompletionNewParams{
		Model:               shared.ChatModel(req.Model),
		MaxCompletionTokens: openai.Int(req.MaxTokens),
		Messages:            []openai.ChatCompletionMessageParamUnion{},
	}
	if req.Model == "" {
		return p, errors.New("the request names no model")
	}
	if req.MaxTokens <= 0 {
		p.MaxCompletionTokens = openai.Int(flow.DefaultMaxTokens)
	}
	if req.System != "" {
		p.Messages = append(p.Messages, openai.SystemMessage(req.System))
	}
	for i, m := range req.Messages {
		var msgs []openai.ChatCompletionMessageParamUnion
		var err error
		switch m.Role {
		case "user":
			msgs, err = userMessages(m)
		case "assistant":
			msgs, err = assistantMessage(m)
		default:
			err = fmt.Errorf("role %q is not user or assistant", m.Role)
		}
		if err != nil {
			return p, fmt.Errorf("message %d: %w", i, err)
		}
		p.Messages = append(p.Messages, msgs...)
	}
	for _, spec := range req.ToolSpecs {
		fn := shared.FunctionDefinitionParam{Name: spec.Name}
		if spec.Description != "" {
			fn.Description = openai.String(spec.Description)
		}
		params, err := schemaParams(spec.InputSchema)
		if err != nil {
			return p, fmt.Errorf("tool %s: %w", spec.Name, err)
		}
		fn.Parameters = params
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(fn))
	}
	return p, nil
}

// schemaParams decodes a tool's input schema as function parameters.
func schemaParams(schema json.RawMessage) (shared.FunctionParameters, error) {
	if len(bytes.TrimSpace(schema)) == 0 || string(bytes.TrimSpace(schema)) == "null" {
		return shared.FunctionParameters{"type": "object"}, nil
	}
	// Numbers decode as float64 (the SDK's encoder writes a json.Number as
	// a string), exact for the integers a schema holds (up to 2^53).
	var params shared.FunctionParameters
	if err := json.Unmarshal(schema, &params); err != nil || params == nil {
		return nil, fmt.Errorf("the input schema is not a JSON object: %s", schema)
	}
	return params, nil
}

func userMessages(m flow.Message) ([]openai.ChatCompletionMessageParamUnion, error) {
	if m.Blocks == nil {
		return []openai.ChatCompletionMessageParamUnion{openai.UserMessage(m.Text)}, nil
	}
	var msgs []openai.ChatCompletionMessageParamUnion
	var texts []string
	for j, b := range m.Blocks {
		switch b.Type {
		case "text":
			texts = append(texts, b.Text)
		case "tool_result":
			if b.ToolUseID == "" {
				return nil, fmt.Errorf("block %d: tool_result has no tool_use_id", j)
			}
			msgs = append(msgs, openai.ToolMessage(toolResultText(b), b.ToolUseID))
		default:
			return nil, fmt.Errorf("block %d: a user message cannot carry a %q block", j, b.Type)
		}
	}
	switch {
	case len(texts) == 1:
		msgs = append(msgs, openai.UserMessage(texts[0]))
	case len(texts) > 1:
		parts := make([]openai.ChatCompletionContentPartUnionParam, len(texts))
		for i, t := range texts {
			parts[i] = openai.TextContentPart(t)
		}
		msgs = append(msgs, openai.UserMessage(parts))
	case len(msgs) == 0:
		msgs = append(msgs, openai.UserMessage(""))
	}
	return msgs, nil
}

// toolResultText is a tool message's content: the result's JSON as text,
// or for an error ErrorPrefix and the error's message.
func toolResultText(b flow.Block) string {
	content := string(bytes.TrimSpace(b.Content))
	if !b.IsError {
		return content
	}
	var s string
	if json.Unmarshal(b.Content, &s) == nil {
		content = s
	}
	return ErrorPrefix + content
}

func assistantMessage(m flow.Message) ([]openai.ChatCompletionMessageParamUnion, error) {
	var a openai.ChatCompletionAssistantMessageParam
	if m.Blocks == nil {
		a.Content.OfString = openai.String(m.Text)
		return []openai.ChatCompletionMessageParamUnion{{OfAssistant: &a}}, nil
	}
	var texts []string
	for j, b := range m.Blocks {
		switch b.Type {
		case "text":
			texts = append(texts, b.Text)
		case "tool_use":
			if b.ID == "" || b.Name == "" {
				return nil, fmt.Errorf("block %d: tool_use needs an id and a name", j)
			}
			args := string(bytes.TrimSpace(b.Input))
			if args == "" {
				args = "{}"
			}
			a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID:       b.ID,
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: b.Name, Arguments: args},
				},
			})
		default:
			return nil, fmt.Errorf("block %d: an assistant message cannot carry a %q block", j, b.Type)
		}
	}
	switch {
	case len(texts) == 1:
		a.Content.OfString = openai.String(texts[0])
	case len(texts) > 1:
		for _, t := range texts {
			a.Content.OfArrayOfContentParts = append(a.Content.OfArrayOfContentParts,
				openai.ChatCompletionAssistantMessageParamContentArrayOfContentPartUnion{
					OfText: &openai.ChatCompletionContentPartTextParam{Text: t}})
		}
	case len(a.ToolCalls) == 0:
		a.Content.OfString = openai.String("")
	}
	return []openai.ChatCompletionMessageParamUnion{{OfAssistant: &a}}, nil
}

// stopReasons maps finish_reason to flow's (Anthropic's) stop reasons;
// others pass through.
var stopReasons = map[string]string{
	"stop":           "end_turn",
	"tool_calls":     "tool_use",
	"length":         "max_tokens",
	"content_filter": "refusal",
}

// convertResponse maps the first choice to a flow answer: a text block when
// the content (else the refusal) is not empty, then a tool_use block per
// function tool call (type "function", or none given; the call's id kept, Input its arguments, "{}" when
// empty). Usage is always set: InputTokens is prompt_tokens less
// cached_tokens, CacheReadInputTokens cached_tokens.
func convertResponse(out *openai.ChatCompletion) (flow.ModelResponse, error) {
	if out == nil || len(out.Choices) == 0 {
		return flow.ModelResponse{}, errors.New("the answer has no choices")
	}
	choice := out.Choices[0]
	msg := choice.Message
	resp := flow.ModelResponse{Role: "assistant", Content: []flow.Block{}}
	switch {
	case msg.Content != "":
		resp.Content = append(resp.Content, flow.TextBlock(msg.Content))
	case msg.Refusal != "":
		resp.Content = append(resp.Content, flow.TextBlock(msg.Refusal))
	}
	for i, tc := range msg.ToolCalls {
		if tc.Type != "function" && tc.Type != "" { // some compatible servers omit it
			return flow.ModelResponse{}, fmt.Errorf("tool call %d is of type %q, not function", i, tc.Type)
		}
		if tc.ID == "" || tc.Function.Name == "" {
			return flow.ModelResponse{}, fmt.Errorf("tool call %d has no id or no name", i)
		}
		args := strings.TrimSpace(tc.Function.Arguments)
		if args == "" {
			args = "{}"
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal([]byte(args), &obj); err != nil || obj == nil {
			return flow.ModelResponse{}, fmt.Errorf("tool call %d (%s): the arguments are not a JSON object", i, tc.Function.Name)
		}
		resp.Content = append(resp.Content, flow.Block{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name, Input: json.RawMessage(args)})
	}
	resp.StopReason = choice.FinishReason
	if r, ok := stopReasons[choice.FinishReason]; ok {
		resp.StopReason = r
	}
	u := out.Usage
	cached := u.PromptTokensDetails.CachedTokens
	resp.Usage = &flow.Usage{
		InputTokens:          max(u.PromptTokens-cached, 0),
		OutputTokens:         u.CompletionTokens,
		CacheReadInputTokens: cached,
	}
	return resp, nil
}
