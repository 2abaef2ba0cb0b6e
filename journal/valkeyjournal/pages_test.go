package valkeyjournal_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
	"github.com/pyrula/caseworker/runevent"
)

// oneCallRun is a journal of namespace ns on c holding run_1: its
// run:submitted, then one call:done with its result step:a.
func oneCallRun(t *testing.T, c valkey.Client, ns string) *valkeyjournal.Journal {
	t.Helper()
	ctx := context.Background()
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
	return j
}

// TestPagesSeeKeysGo: a run whose live keys go after its pages were opened
// (its completed TTL ran out, or a hand deleted them) gives
// journal.ErrRunChanged from the pages that read them, not a shorter run;
// its first page of events, read with its meta, is whole.
func TestPagesSeeKeysGo(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	ns := testenv.UniqueName(t, "pages")
	cleanup(t, c, ns)
	j := oneCallRun(t, c, ns)
	lease, err := j.Acquire(ctx, journal.AcquireParams{RunID: "run_1", Owner: "w"})
	if err != nil {
		t.Fatal(err)
	}
	more := make([]journal.Event, journal.PageSize)
	for i := range more {
		more[i] = journal.Event{Kind: "note:x"}
	}
	if _, err := j.Append(ctx, lease, journal.Batch{Events: more}); err != nil {
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
	var read int
	err = pg.Events(ctx, func(evs []journal.Event) error { read += len(evs); return nil })
	if !errors.Is(err, journal.ErrRunChanged) {
		t.Errorf("Events after the events key went: %v, want ErrRunChanged", err)
	}
	if read != journal.PageSize {
		t.Errorf("%d events read before the events key was found gone, want the first page's %d", read, journal.PageSize)
	}
	if _, err := pg.Results(ctx, pg.ResultIDs()); !errors.Is(err, journal.ErrRunChanged) {
		t.Errorf("Results after the results key went: %v, want ErrRunChanged", err)
	}
}

// TestPagesWithoutHKEYS: a Valkey user whose ACL refuses HKEYS (the
// worker's line before saves read in pages) still pages a run: read whole.
func TestPagesWithoutHKEYS(t *testing.T) {
	ctx := context.Background()
	admin := newClient(t)
	ns := testenv.UniqueName(t, "pagesacl")
	cleanup(t, admin, ns)
	user := ns + "-user"
	if err := admin.Do(ctx, admin.B().Arbitrary("ACL", "SETUSER", user, "on", "nopass", "~*", "+@all", "-hkeys").Build()).Error(); err != nil {
		t.Skipf("ACL SETUSER: %v", err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), admin.B().Arbitrary("ACL", "DELUSER", user).Build()) })
	opt, err := valkey.ParseURL(testenv.ValkeyURL(t))
	if err != nil {
		t.Fatal(err)
	}
	opt.Username, opt.DisableCache = user, true
	c, err := valkey.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	j := oneCallRun(t, c, ns)
	if err := c.Do(ctx, c.B().Hkeys().Key("x").Build()).Error(); err == nil {
		t.Fatal("HKEYS allowed to a user without it")
	}
	pg, err := j.RunPages(ctx, "run_1")
	if err != nil {
		t.Fatalf("RunPages without HKEYS: %v", err)
	}
	if ids := pg.ResultIDs(); len(ids) != 1 || ids[0] != "step:a" || pg.Meta().LastSeq != 2 {
		t.Fatalf("pages: ids %v, last_seq %d", ids, pg.Meta().LastSeq)
	}
}
