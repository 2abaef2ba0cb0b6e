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

// memEvent is one stored event, as Append was given it, in the smaller of
// two forms (a long run holds millions, three per call): full, when set, is
// the event; else the event is a call:start without wait or tool, a
// call:done, a case:call, or an event of a kind without fields of its own
// (run:submitted, …), held in the fields below. Its run_seq is its place in
// the run's list, and its kind and provenance are codes (kinds and
// provenances) when they are among the known ones. At is kept to the
// microsecond in UTC, all that a journal keeps and all that Load and
// EventsJSON give back.
type memEvent struct {
	call  *CallRef
	input json.RawMessage // call:start
	extra map[string]json.RawMessage
	full  *Event
	atUS  int64 // At in microseconds since 1970 UTC
	seq   int64 // case:call
	kind  uint8 // index in kinds
	prov  uint8 // index in provenances
}

// kinds are the event kinds a compact memEvent holds, by code (0 is the
// empty kind).
var kinds = [...]EventKind{1: runevent.CallStart, runevent.CallDone, runevent.CaseCall, runevent.RunSubmitted,
	runevent.RunStart, runevent.CaseOutcome, runevent.CaseCharge, runevent.SuitePlan, runevent.SuiteProgress,
	runevent.SuiteOutcome, runevent.RunComplete, runevent.RunError, runevent.RunCancelled}

// provenances are the provenances a compact memEvent holds, by code (0 is
// none).
var provenances = [...]string{0: "", 1: "reused", 2: "simulated", 3: "live", 4: "changed"}

// codeOf returns the index of v in table; ok is false when it is not there.
func codeOf[T ~string](table []T, v T) (code uint8, ok bool) {
	for i, t := range table {
		if t == v {
			return uint8(i), true
		}
	}
	return 0, false
}

// Seconds since 1970 UTC of the first and last seconds of years 1 and 9999,
// the years an event's time may have: a time outside them (whose
// microseconds may not even fit an int64) keeps its event whole, for Load
// and EventsJSON to refuse as a journal does.
const (
	minAtSec = -62135596800
	maxAtSec = 253402300799
)

// compact stores ev.
func compact(ev *Event) memEvent {
	me := memEvent{call: ev.Call, extra: ev.Extra, atUS: ev.At.UnixMicro()}
	var kindOK, provOK bool
	me.kind, kindOK = codeOf(kinds[:], ev.Kind)
	me.prov, provOK = codeOf(provenances[:], ev.Provenance)
	// Only the fields the compact form holds may be set; a member the event
	// lacks (Event.Lacks, of an event decoded from JSON) is zero in its field.
	sec := ev.At.Unix()
	others := !kindOK || !provOK || sec < minAtSec || sec > maxAtSec ||
		len(ev.Inputs) != 0 || ev.CodeVersion != "" || !ev.WakeAt.IsZero() || ev.Tool != "" ||
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
		return me
	case runevent.CaseCall:
		if others || len(ev.Input) != 0 || ev.Lacks("call") || ev.Lacks("seq") {
			break
		}
		me.seq = ev.CallSeq
		return me
	case runevent.RunStart, runevent.RunComplete, runevent.RunError:
	default:
		if !others && ev.Call == nil && len(ev.Input) == 0 && ev.Provenance == "" {
			return me // only kind, at and Extra
		}
	}
	full := *ev // only this branch allocates
	return memEvent{full: &full}
}

// value returns the stored event, with run_seq seq, sharing its memory.
func (me *memEvent) value(seq int64) Event {
	if me.full != nil {
		ev := *me.full
		ev.RunSeq = seq
		return ev
	}
	return Event{RunSeq: seq, Kind: kinds[me.kind], At: time.UnixMicro(me.atUS).UTC(), Call: me.call, Input: me.input,
		Provenance: provenances[me.prov], CallSeq: me.seq, Extra: me.extra}
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
