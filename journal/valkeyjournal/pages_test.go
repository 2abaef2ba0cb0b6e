package valkeyjournal_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
	"github.com/pyrula/caseworker/runevent"
)

// TestPagesSeeKeysGo: a run whose live keys go after its pages were opened
// (its completed TTL ran out, or a hand deleted them) gives
// journal.ErrRunChanged from the pages that read them, not a shorter run.
func TestPagesSeeKeysGo(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	ns := testenv.UniqueName(t, "pages")
	cleanup(t, c, ns)
	j, err := valkeyjournal.New(c, valkeyjournal.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := j.Create(ctx, journal.CreateParams{RunID: "run_1", TargetName: "t", Owner: "w"})
	if err != nil {
		t.Fatal(err)
	}
	call := json.RawMessage(`{"kind":"step","key":"a","fingerprint":"f","effect":"read"}`)
	done, err := runevent.FromMembers(runevent.CallDone, map[string]json.RawMessage{"call": call})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append(ctx, lease, journal.Batch{Events: []journal.Event{done},
		Results: []bundle.Result{{Kind: "step", Key: "a", Fingerprint: "f", Result: json.RawMessage(`1`)}}}); err != nil {
		t.Fatal(err)
	}
	pg, err := j.RunPages(ctx, "run_1")
	if err != nil {
		t.Fatal(err)
	}
	_, events, results := valkeyjournal.Keys(ns, "run_1")
	for _, key := range []string{events, results} {
		if err := c.Do(ctx, c.B().Del().Key(key).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	err = pg.Events(ctx, func([]journal.Event) error { return nil })
	if !errors.Is(err, journal.ErrRunChanged) {
		t.Errorf("Events after the events key went: %v, want ErrRunChanged", err)
	}
	if _, err := pg.Results(ctx, pg.ResultIDs()); !errors.Is(err, journal.ErrRunChanged) {
		t.Errorf("Results after the results key went: %v, want ErrRunChanged", err)
	}
}
