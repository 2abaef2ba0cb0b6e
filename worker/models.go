package worker

import (
	"cmp"
	"sync"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/llm"
	"github.com/pyrula/caseworker/llm/resolve"
	"github.com/pyrula/caseworker/messages"
)

// modelClients opens the live model clients that llm_ref and
// PYRULA_LLM_REF name, once each, and keeps them for every run.
type modelClients struct {
	reg    *flow.Registry
	getenv func(string) string

	mu      sync.Mutex
	clients map[string]flow.ModelClient
}

// open returns the client named name; a name that names none, or a
// built-in client whose settings are missing, is invalid_overrides.
func (m *modelClients) open(name string) (flow.ModelClient, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.clients[name]; ok {
		return c, nil
	}
	c, err := resolve.Open(name, m.reg, m.getenv, llm.Policy{})
	if err != nil {
		return nil, messages.Errorf(messages.InvalidOverrides, "%v", err)
	}
	if m.clients == nil {
		m.clients = map[string]flow.ModelClient{}
	}
	m.clients[name] = c
	return c, nil
}

// llmRef is the model client name of a message: its own, else
// PYRULA_LLM_REF ("" for none).
func (w *Worker) llmRef(own string) string { return cmp.Or(own, w.cfg.LLMRef) }

// modelClient returns the client of name, nil for "".
func (w *Worker) modelClient(name string) (flow.ModelClient, error) {
	if name == "" {
		return nil, nil
	}
	return w.models.open(name)
}

// caseModelClient is modelClient for a case run: a replay-only one sends
// no model call, so the name is only checked (resolve.Check: no key is
// needed) and no client is opened.
func (w *Worker) caseModelClient(name string, replayOnly bool) (flow.ModelClient, error) {
	if name == "" || !replayOnly {
		return w.modelClient(name)
	}
	if err := resolve.Check(name, w.reg); err != nil {
		return nil, messages.Errorf(messages.InvalidOverrides, "%v", err)
	}
	return nil, nil
}
