package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pyrula/caseworker/flow/examples"
	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/internal/testwait"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
)

// A runs entry whose run's run:submitted event has no readable
// message_type (missing, not a JSON string, or a type that is not a run)
// is not executed as start_run: it is dead-lettered to <ns>:runs:dead at
// once (failures 0) and the run ends run:error runtime_error naming the
// field, without ever starting.
func TestRunWithoutReadableTypeDeadLettered(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	j := e.journalOf()
	ctx := context.Background()
	cases := []struct {
		name   string
		fields map[string]json.RawMessage
		want   string
	}{
		{"missing", map[string]json.RawMessage{"message_id": json.RawMessage(`"u1"`)}, "has no message_type"},
		{"number", map[string]json.RawMessage{"message_type": json.RawMessage(`42`)}, "not a JSON string"},
		{"object", map[string]json.RawMessage{"message_type": json.RawMessage(`{"type":"start_run"}`)}, "not a JSON string"},
		{"unknown", map[string]json.RawMessage{"message_type": json.RawMessage(`"save_case"`)}, `is "save_case", not start_run, run_case or run_suite`},
	}
	ids := make([]string, len(cases))
	runs := map[string]bool{}
	for i, tc := range cases {
		runID := testenv.UniqueName(t, "run")
		ids[i], runs[runID] = runID, true
		if _, err := j.Create(ctx, journal.CreateParams{RunID: runID, TargetName: examples.Checkout,
			CodeVersion: examples.CodeVersion, Fields: tc.fields}); err != nil {
			t.Fatal(err)
		}
		if err := e.client.Do(ctx, e.client.B().Xadd().Key(e.cfg.Namespace+":runs").Id("*").FieldValue().FieldValue("run_id", runID).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	for i, tc := range cases {
		events := e.waitRun(ids[i], 20*time.Second)
		kind, code := last(t, events)
		msg := events[len(events)-1].Message
		if kind != runevent.RunError || code != messages.RuntimeError || !strings.Contains(msg, tc.want) || !strings.Contains(msg, ":runs:dead") {
			t.Errorf("%s: ended %s %s %q; want run:error runtime_error naming the dead letter and %q", tc.name, kind, code, msg, tc.want)
		}
		if n := count(events, runevent.RunStart); n != 0 {
			t.Errorf("%s: %d run:start events; it must not run", tc.name, n)
		}
	}
	dead, err := e.client.Do(ctx, e.client.B().Xrange().Key(e.cfg.Namespace+":runs:dead").Start("-").End("+").Build()).AsXRange()
	if err != nil || len(dead) != len(cases) {
		t.Fatalf("runs dead letters %+v, %v; want %d", dead, err, len(cases))
	}
	for _, d := range dead {
		f := d.FieldValues
		if !runs[f["run_id"]] || f["failures"] != "0" || f["entry_id"] == "" || !strings.Contains(f["error"], "message_type") {
			t.Errorf("dead letter %v", f)
		}
	}
	testwait.Eventually(t, 10*time.Second, "nothing pending on the runs stream", func() bool { return e.runsPending() == 0 })
}
