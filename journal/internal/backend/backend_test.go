package backend

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/runevent"
)

func BenchmarkPrepareBatch(b *testing.B) {
	c := journal.Call{Kind: "step", Key: "quote:1", Fingerprint: fmt.Sprintf("%064x", 1), Effect: "read"}
	s, _ := journal.NewEvent(runevent.CallStart, map[string]any{"call": c, "input": map[string]any{"sku": "SKU-42", "qty": 1}})
	d, _ := journal.NewEvent(runevent.CallDone, map[string]any{"call": c})
	r := bundle.Result{Kind: string(c.Kind), Key: c.Key, Fingerprint: c.Fingerprint, Result: []byte(`{"price":1.25,"currency":"EUR"}`)}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		p, err := PrepareBatch(journal.Batch{Events: []journal.Event{s, d}, Results: []bundle.Result{r}}, false, now)
		if err != nil {
			b.Fatal(err)
		}
		p.Release()
	}
}

// batchOf is a batch of n answered calls named after tag: a call:start and
// a call:done each, and a result.
func batchOf(t *testing.T, tag string, n int) journal.Batch {
	t.Helper()
	var b journal.Batch
	for i := range n {
		c := journal.Call{Kind: "step", Key: fmt.Sprintf("%s:%d", tag, i), Fingerprint: fmt.Sprintf("%064x", i), Effect: "read"}
		s, err := journal.NewEvent(runevent.CallStart, map[string]any{"call": c, "input": map[string]any{"tag": tag, "i": i}})
		if err != nil {
			t.Fatal(err)
		}
		d, err := journal.NewEvent(runevent.CallDone, map[string]any{"call": c})
		if err != nil {
			t.Fatal(err)
		}
		b.Events = append(b.Events, s, d)
		b.Results = append(b.Results, bundle.Result{Kind: string(c.Kind), Key: c.Key, Fingerprint: c.Fingerprint,
			Result: []byte(fmt.Sprintf(`{"tag":%q,"i":%d}`, tag, i))})
	}
	return b
}

// encoded is what a prepared batch stores: each event with run_seq 1, 2, …
// and each result's id and record.
func encoded(p Batch) []string {
	var out []string
	for i, e := range p.Events {
		out = append(out, string(e.JSON(int64(i+1))))
	}
	for _, r := range p.Results {
		out = append(out, r.ID+" "+string(r.Record))
	}
	return out
}

// A batch prepared in the memory another released gives the same bytes as
// one prepared afresh, and preparing it leaves a batch not yet released
// as it was.
func TestPreparedBatchesReuseMemory(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	prepare := func(b journal.Batch) Batch {
		t.Helper()
		p, err := PrepareBatch(b, false, now)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	large, small, other := batchOf(t, "large", 40), batchOf(t, "small", 3), batchOf(t, "other", 7)
	want := map[string][]string{}
	for name, b := range map[string]journal.Batch{"large": large, "small": small, "other": other} {
		want[name] = encoded(prepare(b)) // never released: memory of its own
	}
	first := prepare(large)
	first.Release()
	if first.Events != nil || first.Results != nil {
		t.Errorf("a released batch still has %d events and %d results", len(first.Events), len(first.Results))
	}
	for round := range 3 {
		held := prepare(other) // not released while the next is prepared
		p := prepare(small)
		if got := encoded(p); !slices.Equal(got, want["small"]) {
			t.Fatalf("round %d: the batch prepared in reused memory gives\n%q\nwant\n%q", round, got, want["small"])
		}
		if got := encoded(held); !slices.Equal(got, want["other"]) {
			t.Fatalf("round %d: preparing another batch changed one not released:\n%q\nwant\n%q", round, got, want["other"])
		}
		p.Release()
		q := prepare(large)
		if got := encoded(q); !slices.Equal(got, want["large"]) {
			t.Fatalf("round %d: the large batch prepared in reused memory gives\n%q\nwant\n%q", round, got, want["large"])
		}
		q.Release()
		held.Release()
	}
}
