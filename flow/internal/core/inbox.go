package core

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
)

// Signals delivers signals between runs: the live side of SendSignal and
// ReceiveSignal. Signals sent to a run under one name form a list; the n-th
// receive of that name (key "<name>:<n>") reads the n-th signal, so a
// receive that runs again after a crash reads the same signal.
type Signals interface {
	// Send appends a signal to the run's list for the name.
	Send(ctx context.Context, s SignalParams) error
	// Receive returns the payload of the n-th (0-based) signal sent to the
	// run under name, blocking until it has been sent or ctx is done (then
	// it returns context.Cause(ctx)). A signal that is already there is
	// returned even when ctx is done.
	Receive(ctx context.Context, runID, name string, n int) (json.RawMessage, error)
}

// SignalParams is one signal: its target run, name and payload.
type SignalParams struct {
	// RunID is the run the signal is for.
	RunID string `json:"run_id"`
	// Name is the signal's name.
	Name string `json:"name"`
	// Payload is the signal's JSON payload; SendSignal encodes it.
	Payload any `json:"payload"`
}

// Interrupts holds the answers people give to a run's interrupts: the live
// side of Interrupt.
type Interrupts interface {
	// Answer returns the answer to the run's interrupt with the key
	// "<name>:<n>", and false when there is none yet (the run then
	// suspends). It does not block.
	Answer(ctx context.Context, runID, key string) (InterruptAnswer, bool, error)
}

// Streams reads external streams: the live side of ReadStream.
type Streams interface {
	// Read returns the next item of the stream for the read with the key
	// "<name>:<n>", blocking until there is one or ctx is done.
	Read(ctx context.Context, r StreamRead) (json.RawMessage, error)
}

// StreamRead is one external stream read.
type StreamRead struct {
	// RunID is the run that reads.
	RunID string
	// Name is the stream's name.
	Name string
	// N is the 0-based count of reads of this stream by the run.
	N int
	// Input is the canonical JSON of the read's input.
	Input json.RawMessage
}

// MemInbox is an in-memory Signals, Interrupts and Streams, safe for
// concurrent use. A stream named s holds the items pushed with PushStream;
// the n-th read of s by any run returns the n-th item.
type MemInbox struct {
	mu         sync.Mutex
	changed    chan struct{} // closed and replaced on every change
	signals    map[[2]string][]json.RawMessage
	interrupts map[[2]string]InterruptAnswer
	streams    map[string][]json.RawMessage
}

var (
	_ Signals    = (*MemInbox)(nil)
	_ Interrupts = (*MemInbox)(nil)
	_ Streams    = (*MemInbox)(nil)
)

// NewMemInbox returns an empty MemInbox.
func NewMemInbox() *MemInbox {
	return &MemInbox{
		changed:    make(chan struct{}),
		signals:    make(map[[2]string][]json.RawMessage),
		interrupts: make(map[[2]string]InterruptAnswer),
		streams:    make(map[string][]json.RawMessage),
	}
}

func (m *MemInbox) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// Send implements Signals.
func (m *MemInbox) Send(ctx context.Context, s SignalParams) error {
	raw, err := json.Marshal(s.Payload)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [2]string{s.RunID, s.Name}
	m.signals[k] = append(m.signals[k], raw)
	m.notifyLocked()
	return nil
}

// Receive implements Signals.
func (m *MemInbox) Receive(ctx context.Context, runID, name string, n int) (json.RawMessage, error) {
	for {
		m.mu.Lock()
		list := m.signals[[2]string{runID, name}]
		changed := m.changed
		m.mu.Unlock()
		if n < len(list) {
			return slices.Clone(list[n]), nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// SetAnswer stores the answer to the run's interrupt with the key
// "<name>:<n>".
func (m *MemInbox) SetAnswer(runID, key string, a InterruptAnswer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.interrupts[[2]string{runID, key}] = a
	m.notifyLocked()
}

// Answer implements Interrupts.
func (m *MemInbox) Answer(ctx context.Context, runID, key string) (InterruptAnswer, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.interrupts[[2]string{runID, key}]
	return a, ok, nil
}

// PushStream appends an item (encoded as JSON) to the named stream.
func (m *MemInbox) PushStream(name string, item any) error {
	raw, err := json.Marshal(item)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.streams[name] = append(m.streams[name], raw)
	m.notifyLocked()
	return nil
}

// Read implements Streams.
func (m *MemInbox) Read(ctx context.Context, r StreamRead) (json.RawMessage, error) {
	for {
		m.mu.Lock()
		list := m.streams[r.Name]
		changed := m.changed
		m.mu.Unlock()
		if r.N < len(list) {
			return slices.Clone(list[r.N]), nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}
