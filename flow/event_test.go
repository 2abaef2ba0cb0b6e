package flow

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/pyrula/caseworker/runevent"
)

// TestFieldsEventOf: an event given to a journal as its kind, at and
// Fields, and read back with EventOf, is the event its JSON gives: the
// object of run_seq, kind, at and Fields is the event's JSON, and EventOf
// on its members is UnmarshalJSON on it.
func TestFieldsEventOf(t *testing.T) {
	checked := 0
	for i, ev := range memEventCases() {
		ev.RunSeq = int64(i + 1)
		whole, err := json.Marshal(ev)
		if err != nil || json.Unmarshal(whole, new(Event)) != nil {
			continue // not an event a journal would take
		}
		fields, err := ev.Fields()
		if err != nil {
			t.Errorf("case %d: Fields: %v", i, err)
			continue
		}
		for _, name := range []string{"run_seq", "kind", "at"} {
			if _, ok := fields[name]; ok {
				t.Errorf("case %d: Fields has %s", i, name)
			}
		}
		obj := map[string]any{"run_seq": ev.RunSeq, "kind": ev.Kind, "at": runevent.FormatTime(ev.At)}
		for name, v := range fields {
			obj[name] = v
		}
		raw, err := json.Marshal(obj)
		if err != nil {
			t.Errorf("case %d: %v", i, err)
			continue
		}
		if string(raw) != string(whole) {
			t.Errorf("case %d: Fields give\n%s\nthe event is\n%s", i, raw, whole)
		}
		var want Event
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		var stored map[string]json.RawMessage
		if err := json.Unmarshal(raw, &stored); err != nil {
			t.Fatal(err)
		}
		delete(stored, "run_seq")
		delete(stored, "kind")
		delete(stored, "at")
		n := len(stored)
		got, err := EventOf(want.RunSeq, want.Kind, want.At, stored)
		if err != nil {
			t.Errorf("case %d: EventOf: %v", i, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("case %d: EventOf\n got %#v\nwant %#v", i, got, want)
		}
		if len(stored) != n {
			t.Errorf("case %d: EventOf changed its fields", i)
		}
		checked++
	}
	if checked < 20 {
		t.Errorf("only %d events checked", checked)
	}
}
