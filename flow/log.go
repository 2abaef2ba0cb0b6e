package flow

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/pyrula/caseworker/bundle"
)

// Log is the persistence the runtime needs: the journals of runs, each named
// by its run id. The journal package adapts its Valkey and Postgres journals
// to it; MemLog is the in-memory implementation.
//
// A run's journal is its events, numbered by run_seq (1, 2, 3, … in the order
// they were appended), and its result records, at most one per (kind, key).
// The runtime writes one run at a time from one goroutine; children of a run
// (Child, Gather, sub-agent tools) are runs of their own, with their own run
// ids, and may be written concurrently with their parent.
type Log interface {
	// Load returns the run's events in run_seq order and all its result
	// records. A run that has no journal yet is not an error: Load returns
	// an empty Recorded. Errors are the backend's (wrapped).
	Load(ctx context.Context, runID string) (Recorded, error)

	// Append appends b.Events to the run's journal and stores b.Results,
	// atomically: either all of them are durable or none is. The Log assigns
	// each event the next run_seq (setting Event.RunSeq; the caller leaves it
	// 0) and returns the run_seq of the last event appended (the run's last
	// run_seq if there were none). A run with no journal is created by its
	// first Append. Errors: ErrFinished if the run has a terminal event,
	// ErrResultExists if a result with the same (kind, key) is already
	// stored (nothing is appended then), else the backend's.
	Append(ctx context.Context, runID string, b Batch) (lastSeq int64, err error)

	// Finish appends terminal, a run:complete, run:error or run:cancelled
	// event, with the next run_seq, and marks the run finished: later Appends
	// and Finishes fail with ErrFinished. It returns the event's run_seq.
	Finish(ctx context.Context, runID string, terminal Event) (seq int64, err error)
}

// Recorded is what Load returns: a run's journal.
type Recorded struct {
	// Events are the run's events in run_seq order, terminal event included.
	Events []Event
	// Results are the run's result records, in no particular order.
	Results []bundle.Result
}

// Batch is what one Append writes atomically.
type Batch struct {
	// Target is the run's target name (set by the runtime on every Append),
	// so that a Log that keeps run metadata can create the run on its first
	// Append.
	Target string
	// Events to append, in order, without run_seq.
	Events []Event
	// Results to store, each {key, kind, fingerprint, result|error}.
	Results []bundle.Result
}

// MemLog is an in-memory Log for tests and embedded use. It keeps events as
// JSON, so every Load decodes what Append encoded, as a real journal would.
// It is safe for concurrent use.
type MemLog struct {
	mu   sync.Mutex
	runs map[string]*memRun
}

type memRun struct {
	events   []json.RawMessage
	results  []bundle.Result
	keys     map[string]bool
	finished bool
}

var _ Log = (*MemLog)(nil)

// NewMemLog returns an empty MemLog.
func NewMemLog() *MemLog { return &MemLog{runs: make(map[string]*memRun)} }

// Load implements Log.
func (m *MemLog) Load(ctx context.Context, runID string) (Recorded, error) {
	if err := ctx.Err(); err != nil {
		return Recorded{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.runs[runID]
	if r == nil {
		return Recorded{}, nil
	}
	var rec Recorded
	for _, raw := range r.events {
		var ev Event
		if err := json.Unmarshal(raw, &ev); err != nil {
			return Recorded{}, fmt.Errorf("memlog: load %s: %w", runID, err)
		}
		rec.Events = append(rec.Events, ev)
	}
	rec.Results = slices.Clone(r.results)
	return rec, nil
}

// Append implements Log.
func (m *MemLog) Append(ctx context.Context, runID string, b Batch) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.runs[runID]
	if r == nil {
		r = &memRun{keys: make(map[string]bool)}
	}
	if r.finished {
		return 0, fmt.Errorf("memlog: append %s: %w", runID, ErrFinished)
	}
	added := make(map[string]bool, len(b.Results))
	for _, res := range b.Results {
		k := res.Kind + ":" + res.Key
		if r.keys[k] || added[k] {
			return 0, fmt.Errorf("memlog: append %s: %s: %w", runID, k, ErrResultExists)
		}
		added[k] = true
	}
	encoded, err := m.encode(r, b.Events)
	if err != nil {
		return 0, fmt.Errorf("memlog: append %s: %w", runID, err)
	}
	m.runs[runID] = r
	r.events = append(r.events, encoded...)
	for _, res := range b.Results {
		r.keys[res.Kind+":"+res.Key] = true
		r.results = append(r.results, cloneResult(res))
	}
	return int64(len(r.events)), nil
}

// Finish implements Log.
func (m *MemLog) Finish(ctx context.Context, runID string, terminal Event) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if !terminal.Kind.Terminal() {
		return 0, fmt.Errorf("memlog: finish %s: %s is not a terminal event", runID, terminal.Kind)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.runs[runID]
	if r == nil {
		r = &memRun{keys: make(map[string]bool)}
	}
	if r.finished {
		return 0, fmt.Errorf("memlog: finish %s: %w", runID, ErrFinished)
	}
	encoded, err := m.encode(r, []Event{terminal})
	if err != nil {
		return 0, fmt.Errorf("memlog: finish %s: %w", runID, err)
	}
	m.runs[runID] = r
	r.events = append(r.events, encoded...)
	r.finished = true
	return int64(len(r.events)), nil
}

func (m *MemLog) encode(r *memRun, events []Event) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, 0, len(events))
	for i, ev := range events {
		ev.RunSeq = int64(len(r.events) + i + 1)
		// MarshalJSON directly: json.Marshal would validate and compact its
		// output once more.
		raw, err := ev.MarshalJSON()
		if err != nil {
			return nil, err
		}
		out = append(out, raw)
	}
	return out, nil
}

// Events returns a copy of the run's events (nil for an unknown run).
func (m *MemLog) Events(runID string) []Event {
	rec, err := m.Load(context.Background(), runID)
	if err != nil {
		panic(err) // MemLog decodes only what it encoded
	}
	return rec.Events
}

// EventsJSON returns the run's events as the JSON the Log stored.
func (m *MemLog) EventsJSON(runID string) []json.RawMessage {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.runs[runID]
	if r == nil {
		return nil
	}
	return slices.Clone(r.events)
}

// Results returns a copy of the run's result records, in the order they were
// stored.
func (m *MemLog) Results(runID string) []bundle.Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.runs[runID]
	if r == nil {
		return nil
	}
	out := make([]bundle.Result, len(r.results))
	for i, res := range r.results {
		out[i] = cloneResult(res)
	}
	return out
}

// RunIDs returns the ids of the runs the log holds, sorted.
func (m *MemLog) RunIDs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := make([]string, 0, len(m.runs))
	for id := range m.runs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func cloneResult(r bundle.Result) bundle.Result {
	r.Result = slices.Clone(r.Result)
	r.Error = slices.Clone(r.Error)
	return r
}
