package flowtest

import (
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/runevent"
)

// Trace returns a compact form of events, one string per event: the kind,
// then for call events the call's identity, e.g. "call:start step:quote:0",
// and for run:error its code, e.g. "run:error replay_input_changed".
func Trace(events []host.Event) []string {
	out := make([]string, len(events))
	for i, ev := range events {
		s := string(ev.Kind)
		switch {
		case ev.Call != nil:
			s += " " + ev.Call.ID()
		case ev.Kind == runevent.RunError:
			s += " " + string(ev.Code)
		}
		out[i] = s
	}
	return out
}
