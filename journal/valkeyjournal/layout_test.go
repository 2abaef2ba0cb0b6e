package valkeyjournal_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/internal/archivetest"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
	"github.com/pyrula/caseworker/runevent"
)

func TestKeys(t *testing.T) {
	t.Parallel()
	m, e, r := valkeyjournal.Keys("pyrula", "run_abc123")
	if m != "pyrula:{run_abc123}:meta" || e != "pyrula:{run_abc123}:events" || r != "pyrula:{run_abc123}:results" {
		t.Errorf("Keys = %s, %s, %s", m, e, r)
	}
	if got := valkeyjournal.EventsKey("ns", "r"); got != "ns:{r}:events" {
		t.Errorf("EventsKey = %s", got)
	}
}

// TestLayout checks the keys a run leaves in Valkey, which other readers
// (the Cloud following a run's events stream, operators) rely on.
func TestLayout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newClient(t)
	ns := testenv.UniqueName(t, "jt")
	cleanup(t, c, ns)
	j, err := valkeyjournal.New(c, valkeyjournal.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := j.Create(ctx, journal.CreateParams{RunID: "run_abc123", TargetName: "checkout", CodeVersion: "v1", Inputs: json.RawMessage(`{"b":1,"a":2}`), Owner: "w"})
	if err != nil {
		t.Fatal(err)
	}
	start, _ := journal.NewEvent(runevent.CallStart, map[string]any{"call": journal.Call{Kind: "step", Key: "quote:0", Fingerprint: "ab", Effect: "read"}, "input": map[string]int{"n": 1}})
	res := bundle.Result{Kind: "step", Key: "quote:0", Fingerprint: "ab", Result: json.RawMessage(`{"price": 10}`)}
	if _, err := j.Append(ctx, lease, journal.Batch{Events: []journal.Event{start}, Results: []bundle.Result{res}}); err != nil {
		t.Fatal(err)
	}
	mk, ek, rk := valkeyjournal.Keys(ns, "run_abc123")
	for key, typ := range map[string]string{mk: "hash", ek: "stream", rk: "hash"} {
		got, err := c.Do(ctx, c.B().Type().Key(key).Build()).ToString()
		if err != nil || got != typ {
			t.Errorf("TYPE %s = %q, %v; want %s", key, got, err, typ)
		}
	}
	meta, err := c.Do(ctx, c.B().Hgetall().Key(mk).Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	for field, want := range map[string]string{
		"run_id": "run_abc123", "namespace": ns, "target_name": "checkout", "code_version": "v1",
		"inputs": `{"a":2,"b":1}`, "status": "running", "last_seq": "2", "lease_owner": "w", "lease_epoch": "1", "finished_at": "",
	} {
		if meta[field] != want {
			t.Errorf("meta %s = %q, want %q", field, meta[field], want)
		}
	}
	entries, err := c.Do(ctx, c.B().Xrange().Key(ek).Start("-").End("+").Build()).AsXRange()
	if err != nil {
		t.Fatal(err)
	}
	evs, _, err := j.Events(ctx, "run_abc123")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Fatalf("%d stream entries, want 2", len(entries))
	}
	for i, entry := range entries {
		want, _ := evs[i].JSON()
		if entry.ID != fmt.Sprintf("0-%d", i+1) || len(entry.FieldValues) != 1 || entry.FieldValues["event"] != string(want) {
			t.Errorf("entry %d = %s %v, want 0-%d {event: %s}", i, entry.ID, entry.FieldValues, i+1, want)
		}
	}
	rec, err := c.Do(ctx, c.B().Hget().Key(rk).Field("step:quote:0").Build()).ToString()
	if want := `{"fingerprint":"ab","key":"quote:0","kind":"step","result":{"price":10}}`; err != nil || rec != want {
		t.Errorf("results step:quote:0 = %s, %v; want %s", rec, err, want)
	}
	// The server refuses a stream entry out of order: the run_seq ids are
	// enforced by Valkey itself.
	err = c.Do(ctx, c.B().Xadd().Key(ek).Id("0-2").FieldValue().FieldValue("event", "{}").Build()).Error()
	if err == nil || !strings.Contains(err.Error(), "equal or smaller") {
		t.Errorf("XADD of a duplicate run_seq: %v, want a refusal", err)
	}
}

// flakyArchive fails its first Puts, as an unreachable database would.
type flakyArchive struct {
	journal.Archive
	failures atomic.Int32
}

var errDown = errors.New("archive down")

func (a *flakyArchive) Put(ctx context.Context, r *journal.Run) error {
	if a.failures.Add(-1) >= 0 {
		return errDown
	}
	return a.Archive.Put(ctx, r)
}

// TestFinishArchiveDown: when the archive cannot take a finished run, its
// keys get no TTL (they can never expire unarchived); a later Seal archives
// the run and only then sets the TTL.
func TestFinishArchiveDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newClient(t)
	ns := testenv.UniqueName(t, "jt")
	cleanup(t, c, ns)
	arch := &flakyArchive{Archive: archivetest.New(t, ns)}
	arch.failures.Store(1)
	j, err := valkeyjournal.New(c, valkeyjournal.Options{Namespace: ns, Archive: arch, CompletedTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := j.Create(ctx, journal.CreateParams{RunID: "r1", TargetName: "t", Owner: "w"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = j.Finish(ctx, lease, journal.Batch{Events: []journal.Event{{Kind: runevent.RunComplete}}})
	if !errors.Is(err, errDown) {
		t.Fatalf("Finish with the archive down: %v, want its error", err)
	}
	if m, err := j.Meta(ctx, "r1"); err != nil || m.Status != journal.StatusComplete || m.Origin != journal.OriginValkey {
		t.Fatalf("after a Finish whose archiving failed: %+v, %v; want a complete run in Valkey", m, err)
	}
	for i, d := range keyTTLs(t, c, ns, "r1") {
		if d >= 0 {
			t.Errorf("key %d expires in %v before the run is archived", i, d)
		}
	}
	if _, err := arch.Meta(ctx, ns, "r1"); !errors.Is(err, journal.ErrRunNotFound) {
		t.Errorf("archive Meta: %v, want not found", err)
	}
	if err := j.Seal(ctx, "r1"); err != nil {
		t.Fatalf("Seal: %v", err)
	}
	if _, err := arch.Meta(ctx, ns, "r1"); err != nil {
		t.Errorf("archive Meta after Seal: %v", err)
	}
	for i, d := range keyTTLs(t, c, ns, "r1") {
		if d <= 0 || d > time.Hour {
			t.Errorf("key %d expires in %v after Seal, want the completed TTL", i, d)
		}
	}
}
