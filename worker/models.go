package worker

import (
	"cmp"
	"sync"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/llm"
	"github.com/pyrula/caseworker/llm/resolve"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store"
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

// fixtureStore returns the worker's store checked against the one a
// message expects: no_fixture_store without a store, binding_mismatch when
// they differ. The intake and the run executor both use it.
func (w *Worker) fixtureStore(expected string) (store.Store, error) {
	if w.store == nil {
		return nil, messages.Errorf(messages.NoFixtureStore, "this worker has no fixture store (set PYRULA_FIXTURE_STORE or PYRULA_POSTGRES_DSN)")
	}
	if err := store.CheckBinding(w.store, expected); err != nil {
		return nil, err
	}
	return w.store, nil
}
