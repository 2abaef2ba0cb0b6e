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
	// stored (nothing is appended then), else the backend's. Append must
	// not keep the slices b.Events and b.Results after it returns (the
	// runtime reuses them); it may keep what they hold.
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

// MemLog is an in-memory Log for tests and embedded use. Load returns
// exactly what a journal that stores events as JSON would return (every
// Load gives what decoding the encoded event gives, and fails where that
// would fail), but events are kept as Go values, normalised at Append to
// what the JSON round trip yields, and encoded only when EventsJSON asks;
// an event the normalisation cannot vouch for (invalid UTF-8, raw values
// with white space around them, Extra fields that the round trip would
// move) is kept as its JSON, as before. As the Log contract allows, Append
// keeps the raw values, Call and Extra of the events it is given: callers
// must not change them afterwards. Load returns copies. It is safe for
// concurrent use.
type MemLog struct {
	mu   sync.Mutex
	runs map[string]*memRun
}

type memRun struct {
	events   chunked[memEvent]
	results  chunked[bundle.Result]
	keys     map[resultKey]bool
	finished bool
}

// resultKey is a result's (kind, key).
type resultKey struct{ kind, key string }

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
	rec := Recorded{Events: make([]Event, 0, r.events.n)}
	for me := range r.events.all() {
		ev, err := me.event()
		if err != nil {
			return Recorded{}, fmt.Errorf("memlog: load %s: %w", runID, err)
		}
		rec.Events = append(rec.Events, ev)
	}
	if r.results.n > 0 {
		rec.Results = make([]bundle.Result, 0, r.results.n)
	}
	for res := range r.results.all() {
		rec.Results = append(rec.Results, *res)
	}
	return rec, nil
}

// event returns a copy of the stored event that shares nothing mutable with
// the log.
func (me *memEvent) event() (Event, error) {
	if me.enc != nil {
		var ev Event
		err := json.Unmarshal(me.enc, &ev)
		return ev, err
	}
	ev := me.value()
	if !validJSON(&ev) {
		// What decoding the event's JSON would say.
		raw, _ := ev.MarshalJSON()
		return Event{}, json.Unmarshal(raw, new(Event))
	}
	return cloneEvent(ev), nil
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
		r = &memRun{keys: make(map[resultKey]bool)}
	}
	if r.finished {
		return 0, fmt.Errorf("memlog: append %s: %w", runID, ErrFinished)
	}
	switch len(b.Results) {
	case 0:
	case 1:
		if res := b.Results[0]; r.keys[resultKey{res.Kind, res.Key}] {
			return 0, fmt.Errorf("memlog: append %s: %s:%s: %w", runID, res.Kind, res.Key, ErrResultExists)
		}
	default:
		added := make(map[resultKey]bool, len(b.Results))
		for _, res := range b.Results {
			k := resultKey{res.Kind, res.Key}
			if r.keys[k] || added[k] {
				return 0, fmt.Errorf("memlog: append %s: %s:%s: %w", runID, res.Kind, res.Key, ErrResultExists)
			}
			added[k] = true
		}
	}
	if err := r.store(b.Events); err != nil {
		return 0, fmt.Errorf("memlog: append %s: %w", runID, err)
	}
	if m.runs[runID] != r {
		m.runs[runID] = r
	}
	for _, res := range b.Results {
		r.keys[resultKey{res.Kind, res.Key}] = true
		r.results.add(cloneResult(res))
	}
	return int64(r.events.n), nil
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
		r = &memRun{keys: make(map[resultKey]bool)}
	}
	if r.finished {
		return 0, fmt.Errorf("memlog: finish %s: %w", runID, ErrFinished)
	}
	if err := r.store([]Event{terminal}); err != nil {
		return 0, fmt.Errorf("memlog: finish %s: %w", runID, err)
	}
	m.runs[runID] = r
	r.finished = true
	return int64(r.events.n), nil
}

// store numbers events after r's and adds them to r, all or none.
func (r *memRun) store(events []Event) error {
	var stored [2]memEvent // the runtime appends one or two events at a time
	out := stored[:0]
	for i, ev := range events {
		ev.RunSeq = int64(r.events.n + i + 1)
		if norm, ok := roundTripped(ev); ok {
			out = append(out, compact(norm))
			continue
		}
		// MarshalJSON directly: json.Marshal would validate and compact its
		// output once more.
		raw, err := ev.MarshalJSON()
		if err != nil {
			return err
		}
		out = append(out, memEvent{enc: raw})
	}
	for _, me := range out {
		r.events.add(me)
	}
	return nil
}

// Events returns a copy of the run's events (nil for an unknown run).
func (m *MemLog) Events(runID string) []Event {
	rec, err := m.Load(context.Background(), runID)
	if err != nil {
		panic(err) // MemLog decodes only what it encoded
	}
	return rec.Events
}

// EventsJSON returns the run's events as canonical JSON: for each, the
// bytes Event.MarshalJSON gives with keys sorted and no white space, which
// is how a journal stores and prints the same event (nil for an unknown
// run).
func (m *MemLog) EventsJSON(runID string) []json.RawMessage {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.runs[runID]
	if r == nil {
		return nil
	}
	out := make([]json.RawMessage, 0, r.events.n)
	for me := range r.events.all() {
		raw := me.enc
		if raw == nil {
			var err error
			if raw, err = me.value().MarshalJSON(); err != nil {
				panic(err) // roundTripped vouched for the event
			}
		}
		canon, err := canonical(raw)
		if err != nil {
			canon = slices.Clone(raw) // kept as given: it was not valid canonical JSON
		}
		out = append(out, canon)
	}
	return out
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
	out := make([]bundle.Result, 0, r.results.n)
	for res := range r.results.all() {
		out = append(out, cloneResult(*res))
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
