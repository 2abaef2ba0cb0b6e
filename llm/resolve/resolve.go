// Package resolve picks a run's live model client from its name: the
// --llm-ref flag of the CLI, llm_ref of a worker message and the worker's
// PYRULA_LLM_REF default. It is the one place that knows the built-in
// clients (llm/anthropicllm, llm/openaillm) beside the ones a binary
// registers (flow.Registry.RegisterModelClient).
package resolve

import (
	"fmt"
	"strings"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/llm"
	"github.com/pyrula/caseworker/llm/anthropicllm"
	"github.com/pyrula/caseworker/llm/openaillm"
)

// Built-in client names.
const (
	Anthropic = "anthropic"
	OpenAI    = "openai"
)

// Names returns every name Open accepts with reg: the built-in clients and
// reg's registered ones.
func Names(reg *flow.Registry) []string {
	return append([]string{Anthropic, OpenAI}, reg.ModelClientNames()...)
}

// Open returns the model client name names: "anthropic" (the Anthropic
// Messages API, configured from ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL),
// "openai" (OpenAI Chat Completions or a compatible server, from
// OPENAI_API_KEY and OPENAI_BASE_URL), or a client reg registered under
// name. getenv reads the environment; p bounds each call of a built-in
// client. An unknown name, or a built-in client whose settings are missing,
// is an error that says what to set (never a key's value).
func Open(name string, reg *flow.Registry, getenv func(string) string, p llm.Policy) (flow.ModelClient, error) {
	switch name {
	case Anthropic:
		c, err := anthropicllm.FromEnv(getenv, p)
		if err != nil {
			return nil, fmt.Errorf("llm ref %s: %w", name, err)
		}
		return c, nil
	case OpenAI:
		c, err := openaillm.FromEnv(getenv, p)
		if err != nil {
			return nil, fmt.Errorf("llm ref %s: %w", name, err)
		}
		return c, nil
	}
	if c, ok := reg.ModelClient(name); ok {
		return c, nil
	}
	return nil, Check(name, reg)
}

// Check returns the error Open returns for a name it does not know, or nil
// for a name it does, without opening the client: a built-in client's
// settings (its API key) are not read. A caller that names a client but
// sends no model call (a replay-only case run) checks the name with it.
func Check(name string, reg *flow.Registry) error {
	if name == Anthropic || name == OpenAI {
		return nil
	}
	if _, ok := reg.ModelClient(name); ok {
		return nil
	}
	return fmt.Errorf("llm ref %q names no model client (have %s)", name, strings.Join(Names(reg), ", "))
}
