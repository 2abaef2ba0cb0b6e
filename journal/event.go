package journal

import (
	"encoding/json"
	"fmt"

	"github.com/pyrula/caseworker/journal/internal/wire"
	"github.com/pyrula/caseworker/runevent"
)

// Kind is the kind of an event: runevent.Kind.
type Kind = runevent.Kind

// The event kinds are runevent's constants (runevent.CallDone, …), spelled
// only there. A journal stores any non-empty kind. run:submitted is written
// by Create: its fields are target_name plus whatever the submitter adds
// (CreateParams.Fields).

// IsTerminal reports whether kind ends a run (run:complete, run:error,
// run:cancelled). Only Finish writes terminal events, always last.
func IsTerminal(kind Kind) bool { return kind.Terminal() }

// TerminalStatus is the status a run ends in after a terminal event of kind,
// and false when kind is not terminal.
func TerminalStatus(kind Kind) (Status, bool) {
	switch kind {
	case runevent.RunComplete:
		return StatusComplete, true
	case runevent.RunError:
		return StatusError, true
	case runevent.RunCancelled:
		return StatusCancelled, true
	}
	return "", false
}

// TimeLayout is how an event's at is written: runevent.TimeLayout, RFC 3339
// in UTC with exactly six fractional digits, e.g.
// "2025-01-02T03:04:05.678901Z". At is truncated to the microsecond when
// the event is written.
const TimeLayout = runevent.TimeLayout

// Event is one journal event: runevent.Event, the one type of run events
// (the runtime's host.Event is the same type). On the wire (Valkey stream
// entries, the archive, bundles, `pyrula events`) it is one canonical JSON
// object (docs/bundle-format.md: names sorted, no whitespace), which
// AppendJSON and JSON write: run_seq, kind and at, then the members of its
// kind in typed fields (call:start's Call and Input, run:error's Code and
// Message, …) and every other member in Extra. Field decodes one member by
// name, wherever it is held.
//
// Events read from a journal decode exactly, so JSON returns exactly the
// stored bytes. To append, build an Event with Kind, its fields and Extra,
// and optionally At (NewEvent builds one from named members); the journal
// assigns RunSeq. In an event given to Append, RunSeq must be 0 (the
// journal assigns the next number) or the number the journal would assign
// (else ErrSeqConflict), which lets a writer append at an exact position.
// Append refuses (ErrInvalid) an event AppendJSON cannot write.
type Event = runevent.Event

// Call is the "call" member of call:start and call:done events:
// runevent.Call (Kind, Key, Fingerprint, Effect; ID is "kind:key").
type Call = runevent.Call

// NewEvent returns an event of kind whose members are exactly those of the
// JSON object that fields marshals to (a struct or a map; nil for none):
// runevent.FromMembers, so that the event's JSON has those members and no
// others. At is left zero, to be stamped by the journal.
func NewEvent(kind Kind, fields any) (Event, error) {
	var members map[string]json.RawMessage
	if fields != nil {
		raw, err := json.Marshal(fields)
		if err != nil {
			return Event{}, fmt.Errorf("journal: fields of a %s event: %w", kind, err)
		}
		if err := json.Unmarshal(raw, &members); err != nil || members == nil {
			return Event{}, fmt.Errorf("%w: fields of a %s event are not a JSON object", ErrInvalid, kind)
		}
	}
	e, err := runevent.FromMembers(kind, members)
	if err != nil {
		return Event{}, fmt.Errorf("%w: journal: %w", ErrInvalid, err)
	}
	return e, nil
}

// CallOf decodes the "call" member of e, the identity of the call a
// call:start or call:done event (or a case run's case:call line) is
// about. ok is false when e has no call member or it is not a call object
// with a kind and a key.
func CallOf(e Event) (c Call, ok bool) {
	if e.Call != nil && (e.Kind == runevent.CallStart || e.Kind == runevent.CallDone) {
		c = *e.Call
		return c, c.Kind != "" && c.Key != ""
	}
	found, err := e.Field("call", &c)
	return c, found && err == nil && c.Kind != "" && c.Key != ""
}

// ResultID is the identity "kind:key" of a call result.
func ResultID(kind, key string) string { return wire.ResultID(kind, key) }
