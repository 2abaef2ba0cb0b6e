// Package backend is what the journal backends share: the checks and the
// encoding of what they are asked to write (so that every backend refuses
// the same inputs and stores the same bytes), the decoding of what they
// read, and the archive fallback of reads.
//
// backend imports journal, bundle, runevent and journal/internal/wire,
// nothing else of the project.
package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/internal/wire"
	"github.com/pyrula/caseworker/runevent"
)

// Options are the backends' common options with the defaults applied.
type Options struct {
	// Namespace of the runs' keys.
	Namespace string
	// CompletedTTL is how long a finished run stays live.
	CompletedTTL time.Duration
	// LeaseTTL is the lease time to live when a call gives none.
	LeaseTTL time.Duration
	// Archive, when set, receives finished runs and serves reads of runs
	// that left the live journal.
	Archive journal.Archive
	// Now is the clock that stamps events.
	Now func() time.Time
}

// Defaults fills in zero fields and checks the namespace.
func (o Options) Defaults() (Options, error) {
	if o.Namespace == "" {
		o.Namespace = journal.DefaultNamespace
	}
	if o.CompletedTTL <= 0 {
		o.CompletedTTL = journal.DefaultCompletedTTL
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = journal.DefaultLeaseTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o, journal.CheckNamespace(o.Namespace)
}

// AppendRecord is one event encoded for an append, not an event: the
// event's canonical JSON cut where the run_seq digits go (a backend assigns
// the sequence number as it stores it), with the kind, stamp and expected
// run_seq the backend checks.
type AppendRecord struct {
	// Kind is the event's kind.
	Kind journal.Kind
	// At is the event's stamp, as written.
	At time.Time
	// Expect is the run_seq the caller asked for, 0 for any.
	Expect int64
	// Head and Tail are the event's canonical JSON before and after the
	// run_seq digits.
	Head, Tail []byte
}

// JSON is the event's bytes once it has run_seq seq.
func (e AppendRecord) JSON(seq int64) []byte {
	out := make([]byte, 0, len(e.Head)+20+len(e.Tail))
	out = append(out, e.Head...)
	out = strconv.AppendInt(out, seq, 10)
	return append(out, e.Tail...)
}

// Result is a result record ready to be stored under ID ("kind:key").
type Result struct {
	// ID is "kind:key".
	ID string
	// Record is the canonical JSON of the bundle.Result.
	Record []byte
}

// Batch is a checked and encoded journal.Batch.
type Batch struct {
	// Events are the batch's events, in order.
	Events []AppendRecord
	// Results are the batch's result records.
	Results []Result
	// Status is the terminal status of a Finish batch, "" for Append.
	Status journal.Status
	// FinishedAt is the at of a Finish batch's terminal event.
	FinishedAt time.Time

	// scratch holds what Events and Results slice, from batchScratch;
	// Release gives it back.
	scratch *batchScratch
}

// batchScratch is the memory of one prepared Batch: the events' records
// and bytes, where each event is cut, and the results' records and bytes.
// It is recycled (batchScratch's pool): a case run's last write encodes
// hundreds of events and results, and making them anew for each write was
// much of what a worker's case run allocated.
type batchScratch struct {
	events  []AppendRecord
	buf     []byte
	cuts    []int
	results []Result
	rbuf    []byte
}

var scratchPool = sync.Pool{New: func() any { return new(batchScratch) }}

// maxKeptScratch bounds the bytes of the scratch Release keeps for reuse.
const maxKeptScratch = 4 << 20

// Release gives the memory of p's events and results back for reuse: their
// Head, Tail and Record must not be used after it (nor anything made from
// them without a copy, such as a valkey.BinaryString). A backend calls it
// once it is done with them; a Batch not released is garbage collected.
func (p *Batch) Release() {
	sc := p.scratch
	if sc == nil {
		return
	}
	p.scratch, p.Events, p.Results = nil, nil, nil
	if cap(sc.buf)+cap(sc.rbuf) > maxKeptScratch {
		return
	}
	clear(sc.events[:cap(sc.events)])
	clear(sc.results[:cap(sc.results)])
	sc.events, sc.buf, sc.cuts, sc.results, sc.rbuf = sc.events[:0], sc.buf[:0], sc.cuts[:0], sc.results[:0], sc.rbuf[:0]
	scratchPool.Put(sc)
}

// PrepareBatch checks and encodes b for Append (finish false) or Finish,
// stamping events without an At with now. The Batch's memory is recycled
// by its Release.
func PrepareBatch(b journal.Batch, finish bool, now time.Time) (Batch, error) {
	var p Batch
	if finish && (len(b.Events) == 0 || !journal.IsTerminal(b.Events[len(b.Events)-1].Kind)) {
		return p, fmt.Errorf("%w: Finish needs a terminal event (run:complete, run:error or run:cancelled) last", journal.ErrInvalid)
	}
	sc := scratchPool.Get().(*batchScratch)
	p.scratch = sc
	sc.events = slices.Grow(sc.events[:0], len(b.Events))[:len(b.Events)]
	p.Events = sc.events
	// The events are encoded one after another into buf, and their pieces
	// sliced out of it once it has stopped growing.
	buf, cuts := sc.buf[:0], slices.Grow(sc.cuts[:0], 2*len(b.Events))
	for i, e := range b.Events {
		last := i == len(b.Events)-1
		switch {
		case journal.IsTerminal(e.Kind) && !(finish && last):
			if finish {
				return p, fmt.Errorf("%w: a terminal %s event can only be the last event of Finish", journal.ErrInvalid, e.Kind)
			}
			return p, fmt.Errorf("%w: a terminal %s event can only be written by Finish", journal.ErrInvalid, e.Kind)
		case e.Kind == runevent.RunSubmitted:
			return p, fmt.Errorf("%w: run:submitted is written by Create only", journal.ErrInvalid)
		case e.RunSeq < 0:
			return p, fmt.Errorf("%w: negative run_seq %d", journal.ErrInvalid, e.RunSeq)
		}
		at := e.At
		if at.IsZero() {
			at = now
		}
		at = wire.Truncate(at)
		e.At = at
		var cut int
		var err error
		if buf, cut, err = e.AppendSplitJSON(buf); err != nil {
			return p, fmt.Errorf("%w: event %d of the batch: %w", journal.ErrInvalid, i, err)
		}
		cuts = append(cuts, cut, len(buf))
		p.Events[i] = AppendRecord{Kind: e.Kind, At: at, Expect: e.RunSeq}
		if finish && last {
			p.Status, _ = journal.TerminalStatus(e.Kind)
			p.FinishedAt = at
		}
	}
	sc.buf, sc.cuts = buf, cuts
	start := 0
	for i := range p.Events {
		cut, end := cuts[2*i], cuts[2*i+1]
		p.Events[i].Head, p.Events[i].Tail = buf[start:cut:cut], buf[cut:end:end]
		start = end
	}
	// The results likewise, into rbuf.
	sc.results = slices.Grow(sc.results[:0], len(b.Results))[:len(b.Results)]
	p.Results = sc.results
	rbuf, ends := sc.rbuf[:0], cuts[:0] // the cuts are used: their memory takes the results' ends
	seen := make(map[string]bool, len(b.Results))
	for _, r := range b.Results {
		var err error
		if rbuf, err = wire.AppendResult(rbuf, r); err != nil {
			return p, err
		}
		ends = append(ends, len(rbuf))
		id := wire.ResultID(r.Kind, r.Key)
		if seen[id] {
			return p, fmt.Errorf("%w: result %s is given twice", journal.ErrInvalid, id)
		}
		seen[id] = true
		p.Results[len(ends)-1].ID = id
	}
	sc.rbuf = rbuf
	start = 0
	for i, end := range ends {
		p.Results[i].Record = rbuf[start:end:end]
		start = end
	}
	return p, nil
}

// Create is a checked and encoded journal.CreateParams.
type Create struct {
	// Event is the run:submitted event with run_seq 1.
	Event []byte
	// Inputs is the canonical inputs object.
	Inputs []byte
	// CreatedAt is the run:submitted event's at.
	CreatedAt time.Time
	// LeaseTTL is the lease's time to live.
	LeaseTTL time.Duration
}

// PrepareCreate checks and encodes p; leaseTTL is the journal's default.
func PrepareCreate(p journal.CreateParams, now time.Time, leaseTTL time.Duration) (Create, error) {
	var c Create
	if err := journal.CheckRunID(p.RunID); err != nil {
		return c, err
	}
	if p.TargetName == "" || !utf8.ValidString(p.TargetName) || !utf8.ValidString(p.CodeVersion) {
		return c, fmt.Errorf("%w: a run needs a target name, and the target name and code version must be valid UTF-8", journal.ErrInvalid)
	}
	inputs, err := wire.CanonicalObject(p.Inputs)
	if err != nil {
		return c, fmt.Errorf("inputs: %w", err)
	}
	at := p.At
	if at.IsZero() {
		at = now
	}
	at = wire.Truncate(at)
	ev := journal.Event{RunSeq: 1, Kind: runevent.RunSubmitted, At: at, Extra: make(map[string]json.RawMessage, len(p.Fields)+1)}
	for k, v := range p.Fields {
		if k == "target_name" {
			return c, fmt.Errorf("%w: field target_name of run:submitted is set by Create", journal.ErrInvalid)
		}
		ev.Extra[k] = v
	}
	if ev.Extra["target_name"], err = json.Marshal(p.TargetName); err != nil {
		return c, fmt.Errorf("%w: target name: %w", journal.ErrInvalid, err)
	}
	c.Event, err = ev.JSON()
	if err != nil {
		return c, fmt.Errorf("%w: %w", journal.ErrInvalid, err)
	}
	c.Inputs = inputs
	c.CreatedAt = at
	c.LeaseTTL = leaseTTL
	if p.LeaseTTL > 0 {
		c.LeaseTTL = p.LeaseTTL
	}
	return c, nil
}

// CheckLease refuses a lease that cannot be the lease of any run.
func CheckLease(l journal.Lease) error {
	if err := journal.CheckRunID(l.RunID); err != nil {
		return err
	}
	if l.Owner == "" || l.Epoch < 1 {
		return fmt.Errorf("%w: the lease has no owner (the run was created without one; Acquire it)", journal.ErrLeaseLost)
	}
	return nil
}

// LeaseTTL is ttl, or def when ttl is not positive.
func LeaseTTL(ttl, def time.Duration) time.Duration {
	if ttl > 0 {
		return ttl
	}
	return def
}

// DecodeEvent reads a stored event (runevent.Decode; a stored event has a
// run_seq). Its raw values are sub-slices of raw, which the caller gives
// up (pass a copy of bytes it keeps).
func DecodeEvent(raw []byte) (journal.Event, error) {
	e, err := runevent.Decode(raw)
	if err == nil && e.RunSeq < 1 {
		err = fmt.Errorf("event %.60s has no run_seq", raw)
	}
	if err != nil {
		return journal.Event{}, fmt.Errorf("%w: %w", journal.ErrInvalid, err)
	}
	return e, nil
}

// DecodeResult reads a stored result record. Its value is a sub-slice of
// raw, which the caller gives up.
func DecodeResult(raw []byte) (bundle.Result, error) { return wire.DecodeResult(raw) }

// SortResults sorts results by (kind, key).
func SortResults(rs []bundle.Result) { wire.SortResults(rs) }

// ReadThrough returns live's answer with OriginValkey, or, when live reports
// ErrRunNotFound and an archive is configured, archived's answer with
// OriginArchive.
func ReadThrough[T any](ctx context.Context, arch journal.Archive, live func() (T, error), archived func(journal.Archive) (T, error)) (T, journal.Origin, error) {
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, "", err
	}
	v, err := live()
	if err == nil {
		return v, journal.OriginValkey, nil
	}
	if !errors.Is(err, journal.ErrRunNotFound) || arch == nil {
		return v, "", err
	}
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, "", err
	}
	v, err = archived(arch)
	if err != nil {
		return v, "", err
	}
	return v, journal.OriginArchive, nil
}

// IsNotFound reports whether err means the run does not exist.
func IsNotFound(err error) bool { return errors.Is(err, journal.ErrRunNotFound) }
