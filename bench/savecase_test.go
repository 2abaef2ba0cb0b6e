package bench_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/flow/journallog"
	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/journal/capture"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/replay/replaytest"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/version"
)

var flagSaveCalls = flag.Int("save-calls", 1000, "calls of each finished run BenchmarkSaveCase saves")

// BenchmarkSaveCase measures save_case of a finished run of -save-calls
// calls in the Valkey journal, on one idle worker with a file store: from
// the XADD of the message to its ok reply, which the worker sends only once
// the bundle is stored (p50 and p99 over the iteration's messages, each of
// another run, so each stores a new bundle). Its anchor, timed in the same
// iteration, is the same save in this process, as `pyrula case save` makes
// it: read the run from Valkey, capture it, encode the bundle and store it.
// Both fork after the run's last event (the bundle holds the whole run),
// and each is timed after a garbage collection (collect).
//
//	go test -run '^$' -bench SaveCase -benchtime 20x .
func BenchmarkSaveCase(b *testing.B) {
	reg, err := replaytest.Registry()
	if err != nil {
		b.Fatal(err)
	}
	c := newClient(b)
	ns := testenv.UniqueName(b, "bsave")
	b.Cleanup(func() { dropKeys(c, ns+":*") })
	j, err := valkeyjournal.New(c, valkeyjournal.Options{Namespace: ns})
	if err != nil {
		b.Fatal(err)
	}
	// Two runs per iteration: one the worker saves, one the anchor does.
	runs := recordRuns(b, j, reg, 2*b.N, *flagSaveCalls)
	st := benchStore(b, "file")
	startBenchWorker(b, c, ns, reg, st)
	info, _ := reg.Lookup(replaytest.Target)
	cfg := names(ns)
	var latencies, anchors []time.Duration
	b.ResetTimer()
	for i := range b.N {
		// The anchor: the same save in this process.
		collect(b)
		start := time.Now()
		m, err := j.Meta(context.Background(), runs[2*i+1])
		if err != nil {
			b.Fatal(err)
		}
		fork := m.LastSeq
		cb, err := capture.FromJournal(context.Background(), j, capture.FromJournalParams{Target: m.TargetName, RunID: m.RunID,
			Params: capture.Params{ForkAfterSeq: &fork, Registration: info.Registration, PyrulaVersion: version.Version}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := store.Save(context.Background(), st, cb); err != nil {
			b.Fatal(err)
		}
		anchors = append(anchors, time.Since(start))

		// The same save by the worker, of the other run: forked after
		// its last event too, so that its bundle holds the whole run.
		id := "save-" + strconv.Itoa(i)
		b.StopTimer()
		wm, err := j.Meta(context.Background(), runs[2*i])
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		last := lastEntry(b, c, cfg.ReplyStream)
		collect(b)
		start = time.Now()
		fill(b, c, cfg.CaseStream, 1, func(int) string {
			return envelope(id, messages.SaveCase, map[string]any{"target_name": replaytest.Target, "run_id": runs[2*i], "fork_after_seq": wm.LastSeq})
		})
		reply := waitReply(b, c, cfg.ReplyStream, last, id, time.Minute)
		latencies = append(latencies, time.Since(start))
		if reply.Status != messages.StatusOK {
			b.Fatalf("save_case %s: %+v", id, reply)
		}
		sameSave(b, reply, cb.Summary())
	}
	b.StopTimer()
	p50 := percentile(latencies, 50)
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(percentile(latencies, 99).Microseconds())/1000, "p99_ms")
	b.ReportMetric(float64(p50)/float64(percentile(anchors, 50)), "p50/in_process")
	b.ReportMetric(loadAverage(), "load")
}

// recordRuns records n finished runs of replaytest.Target with calls
// calls each in journal j, and returns their ids.
func recordRuns(b *testing.B, j *valkeyjournal.Journal, reg *flow.Registry, n, calls int) []string {
	b.Helper()
	log, err := journallog.New(j, journallog.Options{Owner: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	rt, err := host.NewRuntime(host.Config{Registry: reg, Log: log})
	if err != nil {
		b.Fatal(err)
	}
	inputs := map[string]json.RawMessage{"n": json.RawMessage(strconv.Itoa(calls))}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("rec-%05d", i)
		out, err := rt.Run(context.Background(), host.RunParams{RunID: ids[i], Target: replaytest.Target, Inputs: inputs})
		if err != nil || out.Status != host.StatusComplete {
			b.Fatalf("record %s: %v %+v", ids[i], err, out)
		}
	}
	return ids
}

// sameSave fails b unless the bundle the save_case reply describes holds as
// many history events and results as the anchor's (want): the two time the
// same save.
func sameSave(b *testing.B, reply messages.Reply, want bundle.Summary) {
	b.Helper()
	var res messages.SaveCaseResult
	var got bundle.Summary
	if err := json.Unmarshal(reply.Result, &res); err != nil {
		b.Fatalf("save_case %s: result %s: %v", reply.MessageID, reply.Result, err)
	}
	if err := json.Unmarshal(res.ManifestSummary, &got); err != nil {
		b.Fatalf("save_case %s: manifest summary %s: %v", reply.MessageID, res.ManifestSummary, err)
	}
	if got.HistoryCount != want.HistoryCount || got.ResultCount != want.ResultCount {
		b.Fatalf("save_case %s saved %d history events and %d results, the anchor %d and %d: not the same save",
			reply.MessageID, got.HistoryCount, got.ResultCount, want.HistoryCount, want.ResultCount)
	}
}

// lastEntry is the id of stream's last entry ("0" when it has none).
func lastEntry(b *testing.B, c valkey.Client, stream string) string {
	b.Helper()
	res, err := c.Do(context.Background(), c.B().Xrevrange().Key(stream).End("+").Start("-").Count(1).Build()).AsXRange()
	if err != nil && !valkey.IsValkeyNil(err) {
		b.Fatal(err)
	}
	if len(res) == 0 {
		return "0"
	}
	return res[0].ID
}

// waitReply reads stream after entry last until the reply to message id.
func waitReply(b *testing.B, c valkey.Client, stream, last, id string, limit time.Duration) messages.Reply {
	b.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		res, err := c.Do(context.Background(), c.B().Xread().Count(100).Block(200).Streams().Key(stream).Id(last).Build()).AsXRead()
		if err != nil && !valkey.IsValkeyNil(err) {
			b.Fatalf("XREAD %s: %v", stream, err)
		}
		for _, e := range res[stream] {
			last = e.ID
			var r messages.Reply
			if err := json.Unmarshal([]byte(e.FieldValues[messages.ReplyField]), &r); err == nil && r.MessageID == id {
				return r
			}
		}
	}
	b.Fatalf("no reply to %s within %v", id, limit)
	return messages.Reply{}
}
