package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
	"github.com/pyrula/caseworker/store/memstore"
)

// TestRunCaseJournalForkRequired: a run_case from the journal names its
// fork: a source without fork_after_seq is refused invalid_overrides on
// its first delivery, saying what to give (a run_seq, or null for the
// inputs only), as a case that kept only the inputs would send every call
// down the ladder without the sender having asked for it. A source with a
// run_seq or null is submitted, and the reply's result says which fork the
// case uses, as the run:submitted event's request does; a bundle source's
// result has no fork_after_seq.
func TestRunCaseJournalForkRequired(t *testing.T) {
	t.Parallel()
	st := memstore.New(memstore.Options{})
	hash := saveSample(t, st, "checkout-recorded.json")
	e := setup(t, st, nil)
	src := e.record("checkout")
	m, err := e.journalOf().Meta(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	send := func(id string, source map[string]any) {
		e.send(id, "run_case", map[string]any{"target_name": "checkout", "source": source, "options": map[string]any{"replay_only": true}})
	}
	send("no-fork", map[string]any{"journal": map[string]any{"run_id": src}})
	send("no-fork-expected", map[string]any{"journal": map[string]any{"run_id": src, "expected_hash": zeroHash}})
	send("inputs-only", map[string]any{"journal": map[string]any{"run_id": src, "fork_after_seq": nil}})
	send("forked", map[string]any{"journal": map[string]any{"run_id": src, "fork_after_seq": m.LastSeq}})
	send("bundle", map[string]any{"bundle": map[string]any{"fixture_hash": hash}})
	got := byID(e.waitReplies(5))

	for _, id := range []string{"no-fork", "no-fork-expected"} {
		r := got[id]
		wantReply(t, r, messages.StatusRefused, messages.InvalidOverrides)
		for _, want := range []string{"source.journal.fork_after_seq is missing", "pyrula events " + src + " --fork-points", "or null to keep only the inputs"} {
			if !strings.Contains(r.Message, want) {
				t.Errorf("%s: message %q, want it to say %q", id, r.Message, want)
			}
		}
		e.noTransientError(id)
	}

	for id, want := range map[string]string{"inputs-only": "null", "forked": fmt.Sprint(m.LastSeq), "bundle": ""} {
		res := runResult(t, got[id])
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(got[id].Result, &fields); err != nil {
			t.Fatal(err)
		}
		if fork, ok := fields["fork_after_seq"]; string(fork) != want || ok != (want != "") {
			t.Errorf("%s: result %s, want fork_after_seq %q", id, got[id].Result, want)
		}
		events := e.waitRun(res.RunID, 20*time.Second)
		if id == "bundle" {
			continue
		}
		// The run:submitted event keeps the request as it was sent.
		var req struct {
			Source struct {
				Journal map[string]json.RawMessage `json:"journal"`
			} `json:"source"`
		}
		if err := json.Unmarshal(events[0].Extra["request"], &req); err != nil || string(req.Source.Journal["fork_after_seq"]) != want {
			t.Errorf("%s: run:submitted request %s, want fork_after_seq %s (%v)", id, events[0].Extra["request"], want, err)
		}
		if kind, _ := last(t, events); id == "forked" && kind != runevent.RunComplete || count(events, runevent.CaseOutcome) != 1 {
			t.Errorf("%s ended %s with %d case:outcome", id, kind, count(events, runevent.CaseOutcome))
		}
	}
}
