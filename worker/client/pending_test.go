package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
	"github.com/pyrula/caseworker/worker/client"
)

// secretBody is the body of the test's messages: Pending must never return
// it.
const secretBody = `{"inputs":{"card":"s3cr3t-4242"}}`

// streamOps are the stream commands a test plays the worker with.
type streamOps struct {
	t *testing.T
	c valkey.Client
}

func (s streamOps) do(cmd valkey.Completed) valkey.ValkeyResult {
	s.t.Helper()
	r := s.c.Do(context.Background(), cmd)
	if err := r.Error(); err != nil && !valkey.IsValkeyNil(err) {
		s.t.Fatal(err)
	}
	return r
}

// group creates group on stream at id (MKSTREAM).
func (s streamOps) group(stream, group, id string) {
	s.t.Helper()
	s.do(s.c.B().XgroupCreate().Key(stream).Group(group).Id(id).Mkstream().Build())
}

// add adds an entry of fields to stream and returns its id.
func (s streamOps) add(stream string, fields ...string) string {
	s.t.Helper()
	cmd := s.c.B().Xadd().Key(stream).Id("*").FieldValue()
	for i := 0; i < len(fields); i += 2 {
		cmd = cmd.FieldValue(fields[i], fields[i+1])
	}
	id, err := s.do(cmd.Build()).ToString()
	if err != nil {
		s.t.Fatal(err)
	}
	return id
}

// message adds a message envelope of id and type to stream.
func (s streamOps) message(stream, id string, typ messages.MessageType) string {
	s.t.Helper()
	env, err := json.Marshal(messages.Envelope{MessageID: id, Type: typ, Body: json.RawMessage(secretBody)})
	if err != nil {
		s.t.Fatal(err)
	}
	return s.add(stream, messages.MessageField, string(env))
}

// read delivers the next n new entries of stream to consumer of group and
// returns their ids.
func (s streamOps) read(stream, group, consumer string, n int64) []string {
	s.t.Helper()
	res, err := s.do(s.c.B().Xreadgroup().Group(group, consumer).Count(n).Streams().Key(stream).Id(">").Build()).AsXRead()
	if err != nil {
		s.t.Fatal(err)
	}
	var ids []string
	for _, e := range res[stream] {
		ids = append(ids, e.ID)
	}
	if int64(len(ids)) != n {
		s.t.Fatalf("read %d entries of %s, want %d", len(ids), stream, n)
	}
	return ids
}

// claim makes entry id pending to consumer, idle for idle, delivered n
// times (XCLAIM IDLE RETRYCOUNT).
func (s streamOps) claim(stream, group, consumer, id string, idle time.Duration, n int64) {
	s.t.Helper()
	s.do(s.c.B().Xclaim().Key(stream).Group(group).Consumer(consumer).MinIdleTime("0").Id(id).
		Idle(idle.Milliseconds()).Retrycount(n).Justid().Build())
}

// pending lists what Pending returns for p.
func pending(t *testing.T, cl *client.Client, p client.PendingParams) []client.PendingEntry {
	t.Helper()
	var got []client.PendingEntry
	if err := cl.Pending(context.Background(), p, func(e client.PendingEntry) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, e := range got {
		raw, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), "s3cr3t") {
			t.Fatalf("a pending entry shows the message body: %s", raw)
		}
	}
	return got
}

// ids are the entry ids of entries.
func ids(entries []client.PendingEntry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.EntryID
	}
	return out
}

// near reports whether a and b are within a minute of each other.
func near(a, b time.Time) bool { return a.Sub(b).Abs() < time.Minute }

func TestPendingMessages(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, c valkey.Client, ns string) {
		s := streamOps{t, c}
		cl, err := client.New(c, client.Options{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		stream := ns + ":case-messages"
		ctx := context.Background()
		nothing := func(client.PendingEntry) error { return nil }

		// No stream or group yet.
		err = cl.Pending(ctx, client.PendingParams{}, nothing)
		if !errors.Is(err, client.ErrGroupNotFound) || !strings.Contains(err.Error(), stream) || !strings.Contains(err.Error(), "case-workers") {
			t.Fatalf("pending without a group: %v", err)
		}
		s.group(stream, client.DefaultConsumerGroup, "0")
		if got := pending(t, cl, client.PendingParams{}); len(got) != 0 {
			t.Fatalf("pending of an empty stream: %+v", got)
		}

		m1 := s.message(stream, "m1", messages.RunCase)
		m2 := s.message(stream, "m2", messages.SaveCase)
		m3 := s.message(stream, "m3", messages.DeleteCaseBundle)
		garbled := s.add(stream, messages.MessageField, "not json")
		gone := s.message(stream, "m-gone", messages.StartRun)
		unread := s.message(stream, "m-unread", messages.StartRun)
		if got := s.read(stream, client.DefaultConsumerGroup, "pod-a", 2); got[0] != m1 || got[1] != m2 {
			t.Fatalf("pod-a read %v", got)
		}
		s.read(stream, client.DefaultConsumerGroup, "pod-b", 3) // m3, garbled, gone
		s.do(c.B().Xack().Key(stream).Group(client.DefaultConsumerGroup).Id(m2).Build())
		s.do(c.B().Xdel().Key(stream).Id(gone).Build())
		s.claim(stream, client.DefaultConsumerGroup, "pod-a", m1, 2*time.Hour, 3)
		s.claim(stream, client.DefaultConsumerGroup, "pod-b", m3, time.Hour, 2)

		got := pending(t, cl, client.PendingParams{})
		if want := []string{m1, m3, garbled, gone}; fmt.Sprint(ids(got)) != fmt.Sprint(want) {
			t.Fatalf("pending %v, want %v (m2 acked, %s never read)", ids(got), want, unread)
		}
		now := time.Now()
		e := got[0]
		if e.Consumer != "pod-a" || e.Deliveries != 3 || e.MessageID != "m1" || e.Type != messages.RunCase || e.Problem != "" ||
			e.Idle < 7200 || e.Idle > 7260 || !near(e.IdleSince, now.Add(-2*time.Hour)) || e.RunID != "" || e.Lease != "" || e.LastSeq != nil {
			t.Errorf("m1: %+v", e)
		}
		if e := got[1]; e.Consumer != "pod-b" || e.Deliveries != 2 || e.MessageID != "m3" || e.Type != messages.DeleteCaseBundle ||
			e.Idle < 3600 || e.Idle > 3660 || e.Problem != "" {
			t.Errorf("m3: %+v", e)
		}
		if e := got[2]; e.Consumer != "pod-b" || e.Deliveries != 1 || e.MessageID != "" || e.Type != "" ||
			e.Problem != "its message is not a JSON envelope" || e.Idle > 60 || !near(e.IdleSince, now) {
			t.Errorf("garbled: %+v", e)
		}
		if e := got[3]; e.Consumer != "pod-b" || e.MessageID != "" || !strings.Contains(e.Problem, "no longer in the stream") {
			t.Errorf("gone: %+v", e)
		}
		raw, err := json.Marshal(got[0])
		if err != nil {
			t.Fatal(err)
		}
		var line map[string]any
		if err := json.Unmarshal(raw, &line); err != nil {
			t.Fatal(err)
		}
		if _, ok := line["idle"].(float64); !ok || line["idle_since"] == nil || line["run_id"] != nil || line["problem"] != nil {
			t.Errorf("line %s", raw)
		}

		// --min-idle.
		if got := pending(t, cl, client.PendingParams{MinIdle: 30 * time.Minute}); fmt.Sprint(ids(got)) != fmt.Sprint([]string{m1, m3}) {
			t.Errorf("min idle 30m: %v", ids(got))
		}
		if got := pending(t, cl, client.PendingParams{MinIdle: 90 * time.Minute}); fmt.Sprint(ids(got)) != fmt.Sprint([]string{m1}) {
			t.Errorf("min idle 90m: %v", ids(got))
		}
		if got := pending(t, cl, client.PendingParams{MinIdle: 3 * time.Hour}); len(got) != 0 {
			t.Errorf("min idle 3h: %v", ids(got))
		}
		if err := cl.Pending(ctx, client.PendingParams{MinIdle: -time.Second}, nothing); err == nil {
			t.Error("a negative minimum idle time was taken")
		}

		// An error of fn stops the listing.
		stop := errors.New("stop")
		n := 0
		if err := cl.Pending(ctx, client.PendingParams{}, func(client.PendingEntry) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
			t.Errorf("stopped listing: %v after %d entries", err, n)
		}

		// Another group (PYRULA_CONSUMER_GROUP), read a page at a time.
		s.group(stream, "bulk", "$")
		var bulk []string
		for i := range 130 {
			bulk = append(bulk, s.message(stream, fmt.Sprintf("b%d", i), messages.SaveCase))
		}
		s.read(stream, "bulk", "pod-c", 130)
		got = pending(t, cl, client.PendingParams{Group: "bulk"})
		if fmt.Sprint(ids(got)) != fmt.Sprint(bulk) || got[129].MessageID != "b129" || got[0].Consumer != "pod-c" {
			t.Fatalf("group bulk: %d entries %v", len(got), ids(got))
		}
		if got := pending(t, cl, client.PendingParams{}); len(got) != 4 {
			t.Errorf("the default group has %d pending entries, want 4 still", len(got))
		}
		if err := cl.Pending(ctx, client.PendingParams{Group: "nope"}, nothing); !errors.Is(err, client.ErrGroupNotFound) {
			t.Errorf("an unknown group: %v", err)
		}
	})
}

// Pending runs say from their journal whether a live worker holds them or
// their lease lapsed (their worker died) and another will resume them.
func TestPendingRuns(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, c valkey.Client, ns string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s := streamOps{t, c}
		cl, err := client.New(c, client.Options{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		j, err := valkeyjournal.New(c, valkeyjournal.Options{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		create := func(runID, owner string, ttl time.Duration) journal.Lease {
			fields := map[string]json.RawMessage{"message_id": json.RawMessage(`"msg_` + runID + `"`), "request": json.RawMessage(secretBody)}
			lease, err := j.Create(ctx, journal.CreateParams{RunID: runID, TargetName: "checkout", Owner: owner, LeaseTTL: ttl,
				Inputs: json.RawMessage(`{"card":"s3cr3t-4242"}`), Fields: fields})
			if err != nil {
				t.Fatal(err)
			}
			return lease
		}
		create("run_live", "pod-a/1a2b3c", time.Hour)
		create("run_dead", "pod-b/4d5e6f", 50*time.Millisecond)
		create("run_free", "", 0)
		done := create("run_done", "pod-a/1a2b3c", time.Hour)
		ev, err := journal.NewEvent(runevent.RunError, map[string]any{"code": "runtime_error", "message": "failed"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := j.Finish(ctx, done, journal.Batch{Events: []journal.Event{ev}}); err != nil {
			t.Fatal(err)
		}

		runs := cl.RunsStream()
		if runs != ns+":runs" {
			t.Fatalf("runs stream %s", runs)
		}
		s.group(runs, client.RunsGroup, "0")
		var entries []string
		for _, id := range []string{"run_live", "run_dead", "run_free", "run_done", "run_gone", "bad id"} {
			entries = append(entries, s.add(runs, "run_id", id))
		}
		s.read(runs, client.RunsGroup, "pod-a", 1)
		s.read(runs, client.RunsGroup, "pod-b", 5)
		s.claim(runs, client.RunsGroup, "pod-b", entries[1], 10*time.Minute, 1)
		time.Sleep(100 * time.Millisecond) // run_dead's lease lapses

		if err := cl.Pending(ctx, client.PendingParams{Runs: true}, func(client.PendingEntry) error { return nil }); err == nil {
			t.Fatal("pending runs without a journal")
		}
		got := pending(t, cl, client.PendingParams{Runs: true, Journal: j})
		if fmt.Sprint(ids(got)) != fmt.Sprint(entries) {
			t.Fatalf("pending runs %v, want %v", ids(got), entries)
		}
		now := time.Now()
		byRun := map[string]client.PendingEntry{}
		for _, e := range got {
			byRun[e.RunID] = e
			if e.MessageID != "" || e.Type != "" {
				t.Errorf("a run's entry has a message: %+v", e)
			}
		}
		seq := func(e client.PendingEntry) int64 {
			if e.LastSeq == nil {
				return -1
			}
			return *e.LastSeq
		}
		if e := byRun["run_live"]; e.Consumer != "pod-a" || e.Status != journal.StatusRunning || e.Lease != client.LeaseHeld ||
			e.LeaseOwner != "pod-a/1a2b3c" || e.LeaseUntil == nil || !near(*e.LeaseUntil, now.Add(time.Hour)) || seq(e) != 1 || e.Problem != "" {
			t.Errorf("run_live: %+v", e)
		}
		if e := byRun["run_dead"]; e.Consumer != "pod-b" || e.Status != journal.StatusRunning || e.Lease != client.LeaseLapsed ||
			e.LeaseOwner != "pod-b/4d5e6f" || e.LeaseUntil == nil || !e.LeaseUntil.Before(now) || !near(*e.LeaseUntil, now) ||
			e.Idle < 600 || e.Problem != "" {
			t.Errorf("run_dead: %+v", e)
		}
		if e := byRun["run_free"]; e.Status != journal.StatusRunning || e.Lease != client.LeaseNone || e.LeaseOwner != "" || e.LeaseUntil != nil {
			t.Errorf("run_free: %+v", e)
		}
		if e := byRun["run_done"]; e.Status != journal.StatusError || e.Lease != client.LeaseNone || e.LeaseOwner != "" ||
			e.LeaseUntil != nil || seq(e) != 2 {
			t.Errorf("run_done: %+v", e)
		}
		if e := byRun["run_gone"]; e.Status != "" || e.Lease != "" || e.LastSeq != nil || !strings.Contains(e.Problem, "neither Valkey nor the archive") {
			t.Errorf("run_gone: %+v", e)
		}
		if e := got[5]; e.RunID != "" || !strings.Contains(e.Problem, "run_id") {
			t.Errorf("bad run id: %+v", e)
		}
		if got := pending(t, cl, client.PendingParams{Runs: true, Journal: j, MinIdle: 5 * time.Minute}); len(got) != 1 || got[0].RunID != "run_dead" {
			t.Errorf("min idle 5m: %+v", got)
		}
		// The message stream's group is another.
		if err := cl.Pending(ctx, client.PendingParams{}, func(client.PendingEntry) error { return nil }); !errors.Is(err, client.ErrGroupNotFound) {
			t.Errorf("the message stream: %v", err)
		}
	})
}
