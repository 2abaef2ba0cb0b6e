package core

import (
	"github.com/pyrula/caseworker/runevent"
)

// EventKind is the kind of a run event: runevent.Kind. The kinds are
// runevent's constants (runevent.CallDone, …), spelled only there.
type EventKind = runevent.Kind

// TimeFormat is the layout of an event's "at": runevent.TimeLayout, RFC 3339
// in UTC with microseconds, e.g. "2025-03-14T09:26:53.037512Z", the
// precision every journal stores.
const TimeFormat = runevent.TimeLayout

// Event is one event of a run's journal: runevent.Event, the one type of
// events the runtime, the journals, bundles' histories and the CLI share.
// Its typed fields are the members of the kinds the runtime writes
// (run:start: Inputs, CodeVersion; call:start: Call, Input, WakeAt, Tool;
// call:done: Call, Provenance; run:complete: Result; run:error: Code,
// Message, StopKey, StopToken); every other member is in Extra. Its JSON
// (AppendJSON, MarshalJSON) is the canonical object a journal stores:
// run_seq (assigned by the Log; an event not yet appended has RunSeq 0 and
// its JSON no run_seq), kind, at in UTC with microseconds, then its
// members, names sorted.
type Event = runevent.Event
