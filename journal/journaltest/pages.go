package journaltest

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/runevent"
)

// testPages: a run read in pages (journal.ReadPages: the journal's own
// pages where it has them) gives the meta, result ids, events and results
// a whole read (Run) gives, over several pages of events; events appended
// after the pages were opened are not given (Meta().LastSeq is the last);
// a finished run gone to the archive pages too.
func testPages(t *testing.T, h *Harness) {
	f := setup(t, h)
	id, l := f.create(t, "w", 0)
	const calls = 1300 // 2,601 events: three pages of a journal's 1,024
	for n := 0; n < calls; n += 100 {
		var b journal.Batch
		for k := n; k < n+100; k++ {
			b.Events = append(b.Events, callStart(k), callDone(k))
			b.Results = append(b.Results, result(k))
		}
		f.appendOK(t, l, b)
	}
	pg, err := journal.ReadPages(f.ctx, f.j, id)
	if err != nil {
		t.Fatalf("ReadPages: %v", err)
	}
	f.appendOK(t, l, journal.Batch{Events: []journal.Event{callStart(calls)}}) // after the pages opened
	whole, err := f.j.Run(f.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	whole.Events = whole.Events[:len(whole.Events)-1]
	whole.Meta.LastSeq--
	samePages(t, f, pg, whole)

	if _, err := f.j.Finish(f.ctx, l, journal.Batch{Events: []journal.Event{mkEvent(runevent.RunComplete, map[string]any{"result": "ok"})}}); err != nil {
		t.Fatal(err)
	}
	if !h.Archived {
		return
	}
	if h.Expire != nil {
		h.Expire(t, id)
	} else {
		h.Advance(h.CompletedTTL)
	}
	if pg, err = journal.ReadPages(f.ctx, f.j, id); err != nil {
		t.Fatalf("ReadPages of an archived run: %v", err)
	}
	if whole, err = f.j.Run(f.ctx, id); err != nil {
		t.Fatal(err)
	}
	if pg.Meta().Origin != journal.OriginArchive {
		t.Errorf("archived run paged with origin %q", pg.Meta().Origin)
	}
	samePages(t, f, pg, whole)
}

// samePages checks that pg pages run r.
func samePages(t *testing.T, f fixture, pg journal.RunPages, r *journal.Run) {
	t.Helper()
	m := pg.Meta()
	if m.RunID != r.Meta.RunID || m.LastSeq != r.Meta.LastSeq || m.Status != r.Meta.Status || m.TargetName != r.Meta.TargetName ||
		m.CodeVersion != r.Meta.CodeVersion || !bytes.Equal(m.Inputs, r.Meta.Inputs) {
		t.Errorf("pages' meta = %+v, want %+v", m, r.Meta)
	}
	var want []string
	for _, res := range r.Results {
		want = append(want, journal.ResultID(res.Kind, res.Key))
	}
	ids := pg.ResultIDs()
	if !reflect.DeepEqual(ids, want) {
		t.Fatalf("result ids: %d, want the %d of the whole run in (kind, key) order", len(ids), len(want))
	}
	pages, i := 0, 0
	err := pg.Events(f.ctx, func(evs []journal.Event) error {
		pages++
		for _, e := range evs {
			if i >= len(r.Events) {
				t.Fatalf("event run_seq %d past the run's %d", e.RunSeq, len(r.Events))
			}
			got, _ := e.JSON()
			exp, _ := r.Events[i].JSON()
			if !bytes.Equal(got, exp) {
				t.Fatalf("event %d = %s, want %s", i+1, got, exp)
			}
			i++
		}
		return nil
	})
	if err != nil || i != len(r.Events) || pages < 2 {
		t.Fatalf("Events: %v after %d events in %d pages, want %d events", err, i, pages, len(r.Events))
	}
	rs, err := pg.Results(f.ctx, ids[len(ids)-5:])
	if err != nil {
		t.Fatalf("Results: %v", err)
	}
	if !reflect.DeepEqual(rs, r.Results[len(r.Results)-5:]) {
		t.Errorf("Results = %s, want %s", dumpResults(rs), dumpResults(r.Results[len(r.Results)-5:]))
	}
	if _, err := pg.Results(f.ctx, []string{"step:nothing"}); err == nil {
		t.Error("Results of an id the run has not: no error")
	}
}
