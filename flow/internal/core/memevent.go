package core

import (
	"encoding/json"
	"iter"
	"maps"
	"slices"
	"time"

	"github.com/pyrula/caseworker/runevent"
)

// cloneEvent returns a copy of ev that shares no memory with it.
func cloneEvent(ev Event) Event {
	if ev.Call != nil {
		cp := *ev.Call
		ev.Call = &cp
	}
	ev.Inputs, ev.Input, ev.Result = slices.Clone(ev.Inputs), slices.Clone(ev.Input), slices.Clone(ev.Result)
	if ev.Extra != nil {
		ev.Extra = maps.Clone(ev.Extra)
		for name, v := range ev.Extra {
			ev.Extra[name] = slices.Clone(v)
		}
	}
	return ev
}

// memEvent is one stored event, as Append was given it (with its run_seq),
// in the smaller of two forms (a long run holds millions): full, when set,
// is the event; else the event is a call:start without wait or tool, a
// call:done, a case:call, or an event of a kind without fields of its own
// (run:submitted, …), held in the fields below.
type memEvent struct {
	runSeq int64
	kind   EventKind
	at     time.Time
	call   *CallRef
	input  json.RawMessage // call:start
	prov   string          // call:done, case:call
	seq    int64           // case:call
	extra  map[string]json.RawMessage
	full   *Event
}

// compact stores ev with run_seq seq.
func compact(ev *Event, seq int64) memEvent {
	me := memEvent{runSeq: seq, kind: ev.Kind, at: ev.At, call: ev.Call, extra: ev.Extra}
	// Only the fields the compact form holds may be set; a member the event
	// lacks (Event.Lacks, of an event decoded from JSON) is zero in its field.
	others := len(ev.Inputs) != 0 || ev.CodeVersion != "" || !ev.WakeAt.IsZero() || ev.Tool != "" ||
		len(ev.Result) != 0 || ev.Code != "" || ev.Message != "" || ev.StopKey != "" || ev.StopToken != "" ||
		ev.CallSeq != 0 && ev.Kind != runevent.CaseCall
	switch ev.Kind {
	case runevent.CallStart:
		if others || ev.Provenance != "" || ev.Call == nil && ev.Lacks("call") || ev.Input == nil && ev.Lacks("input") {
			break
		}
		me.input = ev.Input
		return me
	case runevent.CallDone:
		if others || len(ev.Input) != 0 || ev.Call == nil && ev.Lacks("call") {
			break
		}
		me.prov = ev.Provenance
		return me
	case runevent.CaseCall:
		if others || len(ev.Input) != 0 || ev.Lacks("call") || ev.Lacks("seq") {
			break
		}
		me.prov, me.seq = ev.Provenance, ev.CallSeq
		return me
	case runevent.RunStart, runevent.RunComplete, runevent.RunError:
	default:
		if !others && ev.Call == nil && len(ev.Input) == 0 && ev.Provenance == "" {
			return me // only run_seq, kind, at and Extra
		}
	}
	full := *ev // only this branch allocates
	full.RunSeq = seq
	return memEvent{full: &full}
}

// value returns the stored event, sharing its memory.
func (me *memEvent) value() Event {
	if me.full != nil {
		return *me.full
	}
	return Event{RunSeq: me.runSeq, Kind: me.kind, At: me.at, Call: me.call, Input: me.input,
		Provenance: me.prov, CallSeq: me.seq, Extra: me.extra}
}

// chunked is a list kept in chunks that never move once written, so that
// appending to a long run copies nothing (an event is large, and a run may
// hold millions of events and results).
type chunked[T any] struct {
	chunks [][]T
	n      int
}

func (l *chunked[T]) add(v T) {
	last := len(l.chunks) - 1
	if last < 0 || len(l.chunks[last]) == cap(l.chunks[last]) {
		size := 16
		if last >= 0 {
			size = min(2*cap(l.chunks[last]), 1024)
		}
		l.chunks = append(l.chunks, make([]T, 0, size))
		last++
	}
	l.chunks[last] = append(l.chunks[last], v)
	l.n++
}

// all yields pointers to the values, in order.
func (l *chunked[T]) all() iter.Seq[*T] {
	return func(yield func(*T) bool) {
		for _, c := range l.chunks {
			for i := range c {
				if !yield(&c[i]) {
					return
				}
			}
		}
	}
}
