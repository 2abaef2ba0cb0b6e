package core

import (
	"testing"

	"github.com/pyrula/caseworker/runevent"
)

// TestEventIsRunevent: flow's event, call and kinds are runevent's, so
// that the runtime's events go to a journal and come back from it without
// translation.
func TestEventIsRunevent(t *testing.T) {
	var ev Event = runevent.Event{Kind: runevent.CallDone, Call: &runevent.Call{Kind: KindStep, Effect: Read}}
	var ref *CallRef = ev.Call
	if ev.Kind != runevent.CallDone || ref.Kind != runevent.CallKind("step") || ref.Effect != runevent.EffectRead || !Pure.Valid() {
		t.Errorf("%+v", ev)
	}
	if TimeFormat != runevent.TimeLayout {
		t.Error("TimeFormat is not runevent's")
	}
}
