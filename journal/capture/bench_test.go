package capture_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/capture"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
	"github.com/pyrula/caseworker/runevent"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/filestore"
)

// BenchmarkSave10kCalls: `case save` of a finished run of 10,000 calls from
// local Valkey — read the run, capture it at its last event, canonicalise,
// hash, compress and write it to a file store. docs/performance.md: ≤ 0.5 s.
//
//	PYRULA_TEST_VALKEY_URL=redis://127.0.0.1:6379/0 go test -run '^$' -bench Save10k ./journal/capture/
func BenchmarkSave10kCalls(b *testing.B) {
	ctx := context.Background()
	client, err := valkey.NewClient(valkey.MustParseURL(testenv.ValkeyURL(b)))
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	ns := testenv.UniqueName(b, "bench")
	j, err := valkeyjournal.New(client, valkeyjournal.Options{Namespace: ns})
	if err != nil {
		b.Fatal(err)
	}
	const calls = 10_000
	runID := "run_bench_save"
	lease, err := j.Create(ctx, journal.CreateParams{RunID: runID, TargetName: "bench", CodeVersion: "v1", Inputs: json.RawMessage(`{"n":10000}`), Owner: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		for _, k := range []string{"meta", "events", "results"} {
			client.Do(ctx, client.B().Del().Key(fmt.Sprintf("%s:{%s}:%s", ns, runID, k)).Build())
		}
	}()
	for i := range calls {
		c := map[string]string{"kind": "step", "key": fmt.Sprintf("fetch:%d", i), "fingerprint": fp(fmt.Sprint(i)), "effect": "read"}
		start, _ := journal.NewEvent(runevent.CallStart, map[string]any{"call": c, "input": map[string]any{"id": i, "query": "select * from orders where id = $1"}})
		done, _ := journal.NewEvent(runevent.CallDone, map[string]any{"call": c})
		res := bundle.Result{Kind: "step", Key: c["key"], Fingerprint: c["fingerprint"],
			Result: json.RawMessage(fmt.Sprintf(`{"id":%d,"status":"shipped","total":%d.5,"items":["a","b","c"]}`, i, i))}
		if _, err := j.Append(ctx, lease, journal.Batch{Events: []journal.Event{start, done}, Results: []bundle.Result{res}}); err != nil {
			b.Fatal(err)
		}
	}
	end, _ := journal.NewEvent(runevent.RunComplete, map[string]any{"result": "ok"})
	last, err := j.Finish(ctx, lease, journal.Batch{Events: []journal.Event{end}})
	if err != nil {
		b.Fatal(err)
	}
	s, err := filestore.Open(ctx, b.TempDir(), filestore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var size int64
	for range b.N {
		c, err := capture.FromJournal(ctx, j, capture.FromJournalParams{Target: "bench", RunID: runID,
			Params: capture.Params{ForkAfterSeq: &last, PyrulaVersion: "bench"}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := store.Save(ctx, s, c); err != nil {
			b.Fatal(err)
		}
		size = c.Size()
	}
	b.ReportMetric(float64(size), "bundle-bytes")
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/save")
}
