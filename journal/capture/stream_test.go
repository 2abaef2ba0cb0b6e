package capture_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/capture"
	"github.com/pyrula/caseworker/journal/memjournal"
	"github.com/pyrula/caseworker/runevent"
)

// randomRun records a random run in a memory journal and returns it: calls
// of every kind, some in flight at once, some started again after a
// run:start (a resumed run), some done without a recorded result, model
// calls with a model in their input, a run:submitted with prices and a
// trace context; finished or not.
func randomRun(t *testing.T, seed uint64) *journal.Run {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	ctx := context.Background()
	j, err := memjournal.New(memjournal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]json.RawMessage{
		"traceparent": json.RawMessage(`"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"`),
		"request":     json.RawMessage(`{"options":{"prices":{"m":{"input":1}},"budget_usd":2},"target_name":"t"}`),
	}
	if rng.IntN(2) == 0 {
		fields = nil
	}
	runID := fmt.Sprintf("run_%d", seed)
	lease, err := j.Create(ctx, journal.CreateParams{RunID: runID, TargetName: "t", CodeVersion: "v1", Inputs: json.RawMessage(`{"n":1}`), Owner: "test", Fields: fields})
	if err != nil {
		t.Fatal(err)
	}
	ev, add := eventMaker(t), appender(t, j, lease)
	kinds := []string{"step", "step", "step", "sleep", "model", "tool"}
	if rng.IntN(3) == 0 {
		kinds = []string{"step", "sleep"} // a workflow
	}
	type open struct {
		call  map[string]string
		input json.RawMessage
	}
	var inFlight []open
	n := 1 + rng.IntN(40)
	add(journal.Batch{Events: []journal.Event{ev(runevent.RunStart, map[string]any{"code_version": fmt.Sprintf("v%d", 1+rng.IntN(3))})}})
	for i := 0; i < n || len(inFlight) > 0; {
		switch r := rng.IntN(10); {
		case r < 4 && i < n && (len(inFlight) == 0 || rng.IntN(3) == 0):
			kind := kinds[rng.IntN(len(kinds))]
			key := fmt.Sprintf("k%d", rng.IntN(n+5))
			input := json.RawMessage(fmt.Sprintf(`{"q":%d,"model":"m-%d"}`, i, rng.IntN(3)))
			if rng.IntN(4) == 0 {
				input = nil // a call:start without an input
			}
			c := map[string]string{"kind": kind, "key": key, "fingerprint": fp(key), "effect": "read"}
			fs := map[string]any{"call": c}
			if input != nil {
				fs["input"] = input
			}
			add(journal.Batch{Events: []journal.Event{ev(runevent.CallStart, fs)}})
			inFlight = append(inFlight, open{c, input})
			i++
		case r < 8 && len(inFlight) > 0:
			k := rng.IntN(len(inFlight))
			o := inFlight[k]
			inFlight = append(inFlight[:k], inFlight[k+1:]...)
			b := journal.Batch{Events: []journal.Event{ev(runevent.CallDone, map[string]any{"call": o.call})}}
			if rng.IntN(40) > 0 {
				b.Results = []bundle.Result{{Kind: o.call["kind"], Key: o.call["key"], Fingerprint: o.call["fingerprint"],
					Result: json.RawMessage(fmt.Sprintf(`{"v":%q,"s":"\u00e9 %d"}`, o.call["key"], len(o.call["kind"])))}}
			}
			if _, err := j.Append(ctx, lease, b); err != nil {
				t.Fatal(err)
			}
		case r == 8:
			add(journal.Batch{Events: []journal.Event{ev(runevent.RunStart, map[string]any{"code_version": fmt.Sprintf("v%d", 1+rng.IntN(3))})}})
		case r == 9 && len(inFlight) > 0:
			o := inFlight[rng.IntN(len(inFlight))] // started again, as a resumed run does
			fs := map[string]any{"call": o.call}
			if o.input != nil {
				fs["input"] = o.input
			}
			add(journal.Batch{Events: []journal.Event{ev(runevent.CallStart, fs)}})
		}
	}
	if rng.IntN(4) > 0 {
		if _, err := j.Finish(ctx, lease, journal.Batch{Events: []journal.Event{ev(runevent.RunComplete, map[string]any{"result": "ok"})}}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := j.Run(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// outcome is a capture's hash, or its error's text.
func outcome(c *bundle.Canonical, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return string(c.Hash())
}

// TestStreamIsBuild: for random runs, at every fork (none, 0 and each
// run_seq) and with each --kind, streaming the run (Stream through
// bundle.EncodeStream) gives the bundle the capture of the run held whole
// (the reference BuildWhole, then bundle.Encode) gives, to the hash,
// or the same refusal; in pages of the run held whole, read in memory and
// spilled.
func TestStreamIsBuild(t *testing.T) {
	runs, compared, refused := 40, 0, 0
	if testing.Short() {
		runs = 10
	}
	spill := t.TempDir()
	for seed := range uint64(runs) {
		r := randomRun(t, seed)
		forks := []*int64{nil}
		for s := int64(0); s <= r.Meta.LastSeq; s++ {
			forks = append(forks, seq(s))
		}
		for _, fork := range forks {
			for _, kind := range []bundle.Kind{"", bundle.KindWorkflow, bundle.KindAgent} {
				p := capture.Params{ForkAfterSeq: fork, Kind: kind, PyrulaVersion: "0.1.0",
					Registration: bundle.Registration{Steps: []bundle.Step{{ID: "s", Name: "s", Effect: "read"}}}}
				b, err := capture.BuildWhole(r, p)
				var want string
				if err != nil {
					want = outcome(nil, err)
					refused++
				} else {
					want = outcome(bundle.Encode(b))
				}
				for _, dir := range []string{"", spill} {
					var serr error
					c, err := bundle.EncodeStream(func(w io.Writer) error {
						serr = capture.Stream(context.Background(), journal.PagesOf(r), p, w)
						return serr
					}, bundle.Options{SpillDir: dir})
					if serr != nil {
						err = serr
					}
					if got := outcome(c, err); got != want {
						t.Fatalf("run %d, fork %v, kind %q, spill %q: streamed %s, built %s", seed, fork, kind, dir, got, want)
					}
				}
				compared++
			}
		}
	}
	if refused == 0 || refused == compared {
		t.Fatalf("%d of %d captures refused: the runs do not cover both", refused, compared)
	}
	t.Logf("%d captures compared, %d refused", compared, refused)
}

// changing is a journal whose pages fail as a run's do when its live keys
// go while it is read.
type changing struct{ journal.Journal }

func (c changing) RunPages(ctx context.Context, runID string) (journal.RunPages, error) {
	pg, err := journal.ReadPages(ctx, c.Journal, runID)
	return changedPages{pg}, err
}

type changedPages struct{ journal.RunPages }

func (changedPages) Events(context.Context, func([]journal.Event) error) error {
	return fmt.Errorf("events: %w", journal.ErrRunChanged)
}

// TestFromJournalRereadsAChangedRun: when the run changes under its pages
// (journal.ErrRunChanged), FromJournal reads it again whole and saves the
// same bundle.
func TestFromJournalRereadsAChangedRun(t *testing.T) {
	ctx := context.Background()
	j, err := memjournal.New(memjournal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := j.Create(ctx, journal.CreateParams{RunID: "run_1", TargetName: "t", Owner: "w"})
	if err != nil {
		t.Fatal(err)
	}
	call := map[string]string{"kind": "step", "key": "a", "fingerprint": fp("a"), "effect": "read"}
	start, _ := journal.NewEvent(runevent.CallStart, map[string]any{"call": call, "input": map[string]int{"n": 1}})
	done, _ := journal.NewEvent(runevent.CallDone, map[string]any{"call": call})
	if _, err := j.Append(ctx, lease, journal.Batch{Events: []journal.Event{start, done},
		Results: []bundle.Result{{Kind: "step", Key: "a", Fingerprint: fp("a"), Result: json.RawMessage(`1`)}}}); err != nil {
		t.Fatal(err)
	}
	p := capture.FromJournalParams{Target: "t", RunID: "run_1", Params: capture.Params{ForkAfterSeq: seq(1)}}
	want, err := capture.FromJournal(ctx, j, p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := capture.FromJournal(ctx, changing{j}, p)
	if err != nil || got.Hash() != want.Hash() {
		t.Fatalf("FromJournal over pages that changed: %v, hash %v, want %s", err, got, want.Hash())
	}
}

// TestStreamLongRun: a run whose history and results are many times the
// streamer's 64 KiB buffer, at a fork late in it and early in it, streams
// to the bundle the reference capture of the run held whole gives.
func TestStreamLongRun(t *testing.T) {
	var calls []call
	for i := range 3000 {
		calls = append(calls, call{"step", fmt.Sprintf("fetch:%04d", i), fmt.Sprintf(`{"id":%d,"q":"%0100d"}`, i, i), fmt.Sprintf(`{"n":%d}`, i)})
	}
	r := record(t, "checkout", calls, nil, true)
	for _, fork := range []int64{2, 3002, r.Meta.LastSeq} {
		p := capture.Params{ForkAfterSeq: seq(fork), PyrulaVersion: "0.1.0"}
		b, err := capture.BuildWhole(r, p)
		if err != nil {
			t.Fatal(err)
		}
		want, err := bundle.Encode(b)
		if err != nil {
			t.Fatal(err)
		}
		got, err := capture.Encode(r, p)
		if err != nil || got.Hash() != want.Hash() {
			t.Fatalf("fork %d: streamed %v (%v), built %s", fork, got, err, want.Hash())
		}
	}
}
