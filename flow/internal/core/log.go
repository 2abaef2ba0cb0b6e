package core

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/internal/callkeys"
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
	// Deferrable says the batch is an answered call's (its call:start,
	// call:done and result record, or a case run's case:call line for it,
	// or its case:outcome, which its terminal event follows), or the run's
	// run:start: nothing ran outside the run to make it, and a run resumed
	// after a crash makes it again (its run:start with the code that
	// resumes it). A Log may then hold it and write it
	// with the run's next batch (still in run_seq order, and returning the
	// run_seq it will have), so that a run of answered calls costs one write
	// per many calls; a crash loses only such batches, and the journal is
	// always a prefix of the run. A Log may as well write it at once.
	Deferrable bool
	// Acts says the run acts on the batch outside the journal as soon as
	// Append returns: it is the call:start of a live model call or of a
	// live write, which is made next (or a case run's case:charge of a
	// model call it makes again). A Log whose writes a failover can
	// lose (a worker waiting for replicas) makes the batch, and everything
	// before it, durable before it returns, so that the paid or written call
	// is never made by a run the journal then forgets.
	Acts bool
}

// MemLog is an in-memory Log for tests and embedded use. Load returns
// exactly what a journal returns for the same appends: each event as
// decoding its JSON gives it (Event.RoundTrip: At in UTC to the
// microsecond, raw values canonical, fields not of its kind dropped). But
// Append only numbers and keeps the events it is given, as Go values: the
// round trip is made by Load, and the encoding by EventsJSON. So Load fails
// (and Events and EventsJSON panic) for a run holding an event a journal
// would have refused at Append (Event.AppendJSON fails: no kind, a raw value
// that is not valid JSON, …). As the Log contract allows, Append keeps the
// raw values, Call and Extra of the events and the raw values of the
// results it is given: callers must not change them afterwards. Load returns
// copies. It is safe for concurrent use.
type MemLog struct {
	mu   sync.Mutex
	runs map[string]*memRun
	// lastID and last are the run of the last Append, found without the
	// map while one run appends call after call.
	lastID string
	last   *memRun
}

type memRun struct {
	events   chunked[memEvent]
	results  chunked[bundle.Result]
	keys     callkeys.Set // the results' (kind, key)
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
	rec := Recorded{Events: make([]Event, 0, r.events.n)}
	seq := int64(0)
	for me := range r.events.all() {
		seq++
		ev, err := me.value(seq).RoundTrip()
		if err != nil {
			return Recorded{}, fmt.Errorf("memlog: load %s: %w", runID, err)
		}
		rec.Events = append(rec.Events, cloneEvent(ev))
	}
	if r.results.n > 0 {
		rec.Results = make([]bundle.Result, 0, r.results.n)
	}
	for res := range r.results.all() {
		rec.Results = append(rec.Results, cloneResult(*res))
	}
	return rec, nil
}

// Append implements Log.
func (m *MemLog) Append(ctx context.Context, runID string, b Batch) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.last
	if r == nil || runID != m.lastID {
		if r = m.runs[runID]; r == nil {
			r = &memRun{}
		}
	}
	if r.finished {
		return 0, fmt.Errorf("memlog: append %s: %w", runID, ErrFinished)
	}
	switch len(b.Results) {
	case 0:
	case 1:
		// One set operation where a lookup and an insert were two: a call
		// appends one result, and a long case run appends millions.
		if res := b.Results[0]; !r.keys.Add(res.Kind, res.Key) {
			return 0, fmt.Errorf("memlog: append %s: %s:%s: %w", runID, res.Kind, res.Key, ErrResultExists)
		}
	default:
		var added callkeys.Set
		for _, res := range b.Results {
			if r.keys.Has(res.Kind, res.Key) || !added.Add(res.Kind, res.Key) {
				return 0, fmt.Errorf("memlog: append %s: %s:%s: %w", runID, res.Kind, res.Key, ErrResultExists)
			}
		}
	}
	r.store(b.Events)
	if r != m.last {
		m.runs[runID] = r
		m.lastID, m.last = runID, r
	}
	for _, res := range b.Results {
		if len(b.Results) > 1 {
			r.keys.Add(res.Kind, res.Key)
		}
		r.results.add(res)
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
		r = &memRun{}
	}
	if r.finished {
		return 0, fmt.Errorf("memlog: finish %s: %w", runID, ErrFinished)
	}
	r.store([]Event{terminal})
	m.runs[runID] = r
	r.finished = true
	return int64(r.events.n), nil
}

// store numbers events after r's and adds them to r.
func (r *memRun) store(events []Event) {
	for i := range events {
		r.events.add(compact(&events[i]))
	}
}

// Events returns a copy of the run's events, as Load gives them (nil for an
// unknown run); it panics where Load fails.
func (m *MemLog) Events(runID string) []Event {
	rec, err := m.Load(context.Background(), runID)
	if err != nil {
		panic(err) // an event a journal would have refused
	}
	return rec.Events
}

// EventsJSON returns the run's events as canonical JSON, Event.AppendJSON:
// the bytes a journal stores and prints for the same events (nil for an
// unknown run). It panics, as Events does, for a run holding an event a
// journal would have refused.
func (m *MemLog) EventsJSON(runID string) []json.RawMessage {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.runs[runID]
	if r == nil {
		return nil
	}
	out := make([]json.RawMessage, 0, r.events.n)
	seq := int64(0)
	for me := range r.events.all() {
		seq++
		raw, err := me.value(seq).AppendJSON(nil)
		if err != nil {
			panic(fmt.Errorf("memlog: run %s: %w", runID, err))
		}
		out = append(out, raw)
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
