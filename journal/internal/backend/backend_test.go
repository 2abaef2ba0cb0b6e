package backend

import (
	"fmt"
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
		if _, err := PrepareBatch(journal.Batch{Events: []journal.Event{s, d}, Results: []bundle.Result{r}}, false, now); err != nil {
			b.Fatal(err)
		}
	}
}
