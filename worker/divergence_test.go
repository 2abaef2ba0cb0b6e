package worker_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
)

// A run_case from a run's journal forked right after run:start, with a
// changed input: the run:error event's divergence and the case:outcome
// name the first call after the fork and the field that changed, which the
// capture kept from the journal.
func TestRunCaseDivergenceNamesTheField(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	src := e.record("checkout")
	run, err := e.journalOf().Run(t.Context(), src)
	if err != nil {
		t.Fatal(err)
	}
	var fork int64
	for _, ev := range run.Events {
		if ev.Kind == runevent.RunStart {
			fork = ev.RunSeq
		}
	}
	e.send("d1", "run_case", map[string]any{"target_name": "checkout",
		"source":  map[string]any{"journal": map[string]any{"run_id": src, "fork_after_seq": fork}},
		"options": map[string]any{"replay_only": true, "inputs": map[string]any{"qty": 5}}})
	events := e.waitRun(runResult(t, e.waitReplies(1)[0]).RunID, 20*time.Second)
	kind, code := last(t, events)
	if kind != runevent.RunError || code != messages.ReplayDiverged {
		t.Fatalf("run ended %s %s, want run:error replay_diverged", kind, code)
	}
	type div struct {
		Call string `json:"call"`
		Role string `json:"role"`
		Diff *struct {
			Changed []string `json:"changed"`
		} `json:"diff"`
	}
	var stop div
	if ok, err := events[len(events)-1].Field("divergence", &stop); !ok || err != nil || stop.Call != "step:quote:0" ||
		stop.Role != "cause" || stop.Diff == nil || !slices.Equal(stop.Diff.Changed, []string{"$.qty"}) {
		t.Fatalf("run:error divergence = %+v (%v, %v), want step:quote:0 changed $.qty", stop, ok, err)
	}
	for _, ev := range events {
		if ev.Kind != runevent.CaseOutcome {
			continue
		}
		var cause string
		var axes []string
		var d div
		if _, err := ev.Field("cause", &cause); err != nil {
			t.Fatal(err)
		}
		if _, err := ev.Field("changed_axes", &axes); err != nil {
			t.Fatal(err)
		}
		if _, err := ev.Field("divergence", &d); err != nil {
			t.Fatal(err)
		}
		if cause != "step:quote:0" || !slices.Equal(axes, []string{"inputs"}) || d.Diff == nil || !slices.Equal(d.Diff.Changed, []string{"$.qty"}) {
			raw, _ := json.Marshal(ev.Extra)
			t.Fatalf("case:outcome %s, want cause step:quote:0, axes [inputs] and the field", raw)
		}
		return
	}
	t.Fatal("no case:outcome")
}
