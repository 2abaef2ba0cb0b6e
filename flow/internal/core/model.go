package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ModelClient calls a language model: the live side of Model. The real
// provider client implements it; examples use deterministic local ones.
type ModelClient interface {
	// Call sends one request and returns the model's answer. Errors are
	// recorded as the model call's error.
	Call(ctx context.Context, req ModelRequest) (ModelResponse, error)
}

// ModelClientFunc adapts a function to ModelClient.
type ModelClientFunc func(ctx context.Context, req ModelRequest) (ModelResponse, error)

// Call implements ModelClient.
func (f ModelClientFunc) Call(ctx context.Context, req ModelRequest) (ModelResponse, error) {
	return f(ctx, req)
}

// ModelRequest is a model call's input; its JSON form is what the call's
// fingerprint is computed from: {"model", "system", "messages", "tools"}.
// Model and System are part of the request, so a case run can change them
// (RunParams.Model, RunParams.System) and see the fingerprint change.
type ModelRequest struct {
	// Model is the model id. Empty means the agent's (or the run's override).
	Model string `json:"model"`
	// System is the system prompt. Empty means the agent's (or the run's
	// override).
	System string `json:"system"`
	// Messages is the conversation so far.
	Messages []Message `json:"messages"`
	// Tools names the tools offered. Nil means every tool of the agent.
	Tools []string `json:"tools"`
	// ToolSpecs describe the offered tools for a provider client; the
	// runtime fills them from the agent. They are not part of the input.
	ToolSpecs []ToolSpec `json:"-"`
	// MaxTokens bounds the answer's tokens: the agent's MaxTokens (default
	// DefaultMaxTokens). Provider clients send it; a case run under a cost
	// ceiling prices a live call's worst case with it. It is not part of
	// the input (the fingerprint), so recorded cases stay valid when it
	// changes.
	MaxTokens int64 `json:"-"`
}

// DefaultMaxTokens is the answer bound of an agent that sets no MaxTokens.
const DefaultMaxTokens = 4096

// ToolSpec describes a tool offered to the model.
type ToolSpec struct {
	// Name is the tool's name, as tool_use blocks name it.
	Name string
	// Description tells the model what the tool does.
	Description string
	// Writes is false for read-only tools and sub-agents.
	Writes bool
	// InputSchema is the JSON Schema of the tool's input object, derived
	// from the tool's Go input type (a sub-agent's: from its inputs).
	InputSchema json.RawMessage
}

// ModelErrorKind classifies a failed model call, so that a recorded error
// and a case run that fails on it say which failure it was.
type ModelErrorKind string

// The kinds of model call failure. RateLimited, Overloaded, ServerError,
// Timeout and Connection are transient (clients retry them with backoff
// before giving up); the others are not retried.
const (
	ModelRateLimited    ModelErrorKind = "rate_limited"    // HTTP 429
	ModelOverloaded     ModelErrorKind = "overloaded"      // HTTP 529 (Anthropic) or 503
	ModelServerError    ModelErrorKind = "server_error"    // other HTTP 5xx
	ModelTimeout        ModelErrorKind = "timeout"         // no answer within the per-call timeout
	ModelConnection     ModelErrorKind = "connection"      // the request did not reach the provider
	ModelInvalidRequest ModelErrorKind = "invalid_request" // HTTP 400, 404, 413, 422
	ModelAuthentication ModelErrorKind = "authentication"  // HTTP 401, 403
	ModelBadResponse    ModelErrorKind = "bad_response"    // an answer that is not the wire format
)

// Transient reports whether a call failing with this kind may succeed if
// sent again.
func (k ModelErrorKind) Transient() bool {
	switch k {
	case ModelRateLimited, ModelOverloaded, ModelServerError, ModelTimeout, ModelConnection:
		return true
	}
	return false
}

// ModelError is a failed model call as a provider client reports it. It
// is recorded as the call's error with type "model_<kind>" (ErrorType), and
// its message never holds credentials.
type ModelError struct {
	// Kind classifies the failure.
	Kind ModelErrorKind
	// Client names the client that failed, e.g. "anthropic".
	Client string
	// Status is the HTTP status of the last attempt, 0 when there was none.
	Status int
	// Attempts is how many times the request was sent.
	Attempts int
	// Message is the provider's error message, or what went wrong.
	Message string
}

// Error implements error.
func (e *ModelError) Error() string {
	status := ""
	if e.Status != 0 {
		status = fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	return fmt.Sprintf("%s: model call failed after %d attempt(s): %s%s: %s", e.Client, e.Attempts, e.Kind, status, e.Message)
}

// ErrorType is the recorded call error's type: "model_" and the kind.
func (e *ModelError) ErrorType() string { return "model_" + string(e.Kind) }

// Message is one message of a conversation. Its content is a plain string
// (Text, when Blocks is nil) or a list of blocks.
type Message struct {
	// Role is "user" or "assistant".
	Role string
	// Text is the content when it is a plain string.
	Text string
	// Blocks is the content when it is a list of blocks.
	Blocks []Block
}

// UserText returns a user message with plain text content.
func UserText(text string) Message { return Message{Role: "user", Text: text} }

// MarshalJSON implements json.Marshaler: {"role", "content"}, content a
// string or an array of blocks.
func (m Message) MarshalJSON() ([]byte, error) {
	var content any = m.Text
	if m.Blocks != nil {
		content = m.Blocks
	}
	return json.Marshal(struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	}{m.Role, content})
}

// UnmarshalJSON implements json.Unmarshaler.
func (m *Message) UnmarshalJSON(data []byte) error {
	var w struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	text, blocks, err := decodeContent(w.Content)
	if err != nil {
		return err
	}
	*m = Message{Role: w.Role, Text: text, Blocks: blocks}
	return nil
}

func decodeContent(raw json.RawMessage) (string, []Block, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, errors.New("message content is missing")
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, nil, err
	}
	var blocks []Block
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", nil, fmt.Errorf("message content must be a string or a list of blocks: %w", err)
	}
	if blocks == nil {
		blocks = []Block{}
	}
	return "", blocks, nil
}

// Block is one content block: "text" (Text), "tool_use" (ID, Name, Input) or
// "tool_result" (ToolUseID, Content, IsError).
type Block struct {
	// Type is "text", "tool_use" or "tool_result".
	Type string `json:"type"`
	// Text is a text block's text.
	Text string `json:"text,omitempty"`
	// ID is a tool_use block's tool-use id, the key of its tool call.
	ID string `json:"id,omitempty"`
	// Name is a tool_use block's tool name.
	Name string `json:"name,omitempty"`
	// Input is a tool_use block's input, the tool call's input.
	Input json.RawMessage `json:"input,omitempty"`
	// ToolUseID is the id of the tool_use a tool_result answers.
	ToolUseID string `json:"tool_use_id,omitempty"`
	// Content is a tool_result's content: the tool's JSON result, or the
	// error's text as a JSON string.
	Content json.RawMessage `json:"content,omitempty"`
	// IsError marks a tool_result of a failed tool call.
	IsError bool `json:"is_error,omitempty"`
}

// TextBlock returns a text block.
func TextBlock(text string) Block { return Block{Type: "text", Text: text} }

// ToolUseBlock returns a tool_use block; input is encoded as JSON.
func ToolUseBlock(id, name string, input any) Block {
	raw, err := json.Marshal(input)
	if err != nil {
		raw = json.RawMessage("{}")
	}
	return Block{Type: "tool_use", ID: id, Name: name, Input: raw}
}

// ModelResponse is a model call's result: {"role": "assistant", "content":
// [...]} with optional stop_reason and usage. A plain string decodes as an
// assistant answer with one text block.
type ModelResponse struct {
	// Role is "assistant".
	Role string `json:"role"`
	// Content is the answer's blocks: text and tool_use.
	Content []Block `json:"content"`
	// StopReason is why the model stopped, when the client says.
	StopReason string `json:"stop_reason,omitempty"`
	// Usage is the tokens the call used, when the client knows them.
	Usage *Usage `json:"usage,omitempty"`
}

// Usage counts a model call's tokens.
type Usage struct {
	// InputTokens counts the prompt's uncached tokens.
	InputTokens int64 `json:"input_tokens"`
	// OutputTokens counts the answer's tokens.
	OutputTokens int64 `json:"output_tokens"`
	// CacheCreationInputTokens counts prompt tokens written to a cache.
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens,omitempty"`
	// CacheReadInputTokens counts prompt tokens read from a cache.
	CacheReadInputTokens int64 `json:"cache_read_input_tokens,omitempty"`
}

// UnmarshalJSON implements json.Unmarshaler, accepting a string or an
// object whose role is "assistant" and whose content is a list of blocks.
func (r *ModelResponse) UnmarshalJSON(data []byte) error {
	data = []byte(strings.TrimSpace(string(data)))
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		*r = ModelResponse{Role: "assistant", Content: []Block{TextBlock(s)}}
		return nil
	}
	type plain ModelResponse
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return fmt.Errorf(`model answer must be a string or {"role": "assistant", "content": [...]}: %w`, err)
	}
	if p.Role != "assistant" || p.Content == nil {
		return errors.New(`model answer must be a string or {"role": "assistant", "content": [...]}`)
	}
	*r = ModelResponse(p)
	return nil
}

// Message returns the answer as an assistant message for the conversation.
func (r ModelResponse) Message() Message {
	blocks := r.Content
	if blocks == nil {
		blocks = []Block{}
	}
	return Message{Role: "assistant", Blocks: blocks}
}

// Text returns the answer's text blocks joined by newlines.
func (r ModelResponse) Text() string {
	var parts []string
	for _, b := range r.Content {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// ToolUses returns the answer's tool_use blocks.
func (r ModelResponse) ToolUses() []Block {
	var uses []Block
	for _, b := range r.Content {
		if b.Type == "tool_use" {
			uses = append(uses, b)
		}
	}
	return uses
}
