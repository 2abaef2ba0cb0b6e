package messages_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/pyrula/caseworker/messages"
)

// TestForkPointJSON: a journal source's fork_after_seq tells a key not
// given from an explicit null, and encodes back as it was read: no key, null
// or the run_seq. Anything but an integer or null is a type error that
// names the field.
func TestForkPointJSON(t *testing.T) {
	seven := int64(7)
	for _, c := range []struct {
		in    string
		given bool
		seq   *int64
	}{
		{`{"run_id":"r"}`, false, nil},
		{`{"run_id":"r","fork_after_seq":null}`, true, nil},
		{`{"run_id":"r","fork_after_seq":7}`, true, &seven},
	} {
		var s messages.JournalSource
		if err := json.Unmarshal([]byte(c.in), &s); err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		f := s.ForkAfterSeq
		if f.Given != c.given || (f.Seq == nil) != (c.seq == nil) || f.Seq != nil && *f.Seq != *c.seq {
			t.Errorf("%s: read %+v", c.in, f)
		}
		if out, err := json.Marshal(s); err != nil || string(out) != c.in {
			t.Errorf("%s: encodes as %s (%v)", c.in, out, err)
		}
	}
	for _, bad := range []string{`1.5`, `99999999999999999999`, `"7"`, `true`, `[]`, `{}`} {
		var s messages.JournalSource
		err := json.Unmarshal([]byte(`{"run_id":"r","fork_after_seq":`+bad+`}`), &s)
		var te *json.UnmarshalTypeError
		if !errors.As(err, &te) || te.Field != "fork_after_seq" {
			t.Errorf("fork_after_seq %s: error %v, want a type error naming the field", bad, err)
		}
	}
	for _, c := range []struct {
		fork messages.ForkPoint
		want string
	}{
		{messages.ForkPoint{}, `{"run_id":"r","events":"e"}`},
		{messages.InputsOnly(), `{"run_id":"r","events":"e","fork_after_seq":null}`},
		{messages.ForkAfter(0), `{"run_id":"r","events":"e","fork_after_seq":0}`},
	} {
		if out, _ := json.Marshal(messages.RunResult{RunID: "r", Events: "e", ForkAfterSeq: c.fork}); string(out) != c.want {
			t.Errorf("result %s, want %s", out, c.want)
		}
	}
}
