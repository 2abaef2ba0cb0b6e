package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
	"github.com/pyrula/caseworker/memvalkey"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
	"github.com/pyrula/caseworker/worker/client"
)

// TestMain checks for leaked goroutines, but for valkey-go's own delayed
// retry of a closed client's connection, which sleeps out its backoff, and
// its cluster client's delayed close (5 s) of connections a slot map
// refresh replaced.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*call).DelayDo.func1"),
		goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient)._refresh.func2"))
}

// servers runs f against real Valkey, a Valkey Cluster and the embedded
// server, each with a namespace of its own. Here the test plays the
// worker: it reads the case stream and writes replies and journal events
// itself.
func servers(t *testing.T, f func(t *testing.T, c valkey.Client, ns string)) {
	t.Run("valkey", func(t *testing.T) {
		t.Parallel()
		ns := testenv.UniqueName(t, "cl")
		f(t, testenv.ValkeyClientAt(t, testenv.ValkeyURL(t), ns), ns)
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		ns := testenv.UniqueName(t, "cl")
		c := testenv.ValkeyClientAt(t, testenv.ValkeyClusterURL(t), ns)
		if c.Mode() != valkey.ClientModeCluster {
			t.Fatalf("%s is not a cluster", testenv.EnvValkeyClusterURL)
		}
		f(t, c, ns)
	})
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		s, err := memvalkey.Start()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		c, err := s.NewClient()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		f(t, c, testenv.UniqueName(t, "cl"))
	})
}

// publish adds reply r to stream, as the worker does.
func publish(c valkey.Client, stream string, r messages.Reply) error {
	raw, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return c.Do(context.Background(), c.B().Xadd().Key(stream).Id("*").FieldValue().FieldValue(messages.ReplyField, string(raw)).Build()).Error()
}

func reply(t *testing.T, c valkey.Client, stream string, r messages.Reply) {
	t.Helper()
	if err := publish(c, stream, r); err != nil {
		t.Fatal(err)
	}
}

func TestSendAndReply(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, c valkey.Client, ns string) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cl, err := client.New(c, client.Options{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		replies := ns + ":case-replies"
		// A reply of the same id sent before ours must not count.
		reply(t, c, replies, messages.Reply{MessageID: "m1", Status: messages.StatusError})
		sent, err := cl.Send(ctx, client.Message{MessageID: "m1", Type: messages.StartRun, Body: json.RawMessage(`{"target_name":"x"}`)})
		if err != nil {
			t.Fatal(err)
		}
		entries, err := c.Do(ctx, c.B().Xrange().Key(ns+":case-messages").Start("-").End("+").Build()).AsXRange()
		if err != nil || len(entries) != 1 || entries[0].ID != sent.EntryID {
			t.Fatalf("case stream %+v (%v), sent %+v", entries, err, sent)
		}
		var env messages.Envelope
		if err := json.Unmarshal([]byte(entries[0].FieldValues[messages.MessageField]), &env); err != nil {
			t.Fatal(err)
		}
		if env.MessageID != "m1" || env.Type != messages.StartRun || env.ReplyTo != replies || string(env.Body) != `{"target_name":"x"}` {
			t.Fatalf("envelope %+v", env)
		}
		go func() { // replies arrive while Reply waits; a failure shows as a timeout
			time.Sleep(100 * time.Millisecond)
			_ = publish(c, replies, messages.Reply{MessageID: "other", Status: messages.StatusOK})
			_ = publish(c, replies, messages.Reply{MessageID: "m1", Type: messages.StartRun, Status: messages.StatusRefused, Code: messages.InvalidOverrides})
		}()
		r, err := cl.Reply(ctx, sent)
		if err != nil {
			t.Fatal(err)
		}
		if r.MessageID != "m1" || r.Status != messages.StatusRefused {
			t.Fatalf("reply %+v", r)
		}
		// A message refused before its id was read is matched by entry id.
		sent2, err := cl.Send(ctx, client.Message{Type: messages.SaveCase, Body: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		reply(t, c, replies, messages.Reply{EntryID: sent2.EntryID, Status: messages.StatusRefused, Code: messages.InvalidOverrides})
		if r, err := cl.Reply(ctx, sent2); err != nil || r.EntryID != sent2.EntryID {
			t.Fatalf("reply %+v, %v", r, err)
		}
		// No reply: the context ends the wait.
		sent3, err := cl.Send(ctx, client.Message{Type: messages.SaveCase, Body: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		short, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer scancel()
		if _, err := cl.Reply(short, sent3); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("wait without a reply: %v", err)
		}
		if _, err := cl.Send(ctx, client.Message{Type: messages.SaveCase, Body: json.RawMessage(`{`)}); err == nil {
			t.Fatal("a body that is not JSON was sent")
		}
	})
}

// TestSendCarriesTraceContext: a message sent under a span context carries
// it as the entry's traceparent and tracestate fields; one sent without
// carries neither.
func TestSendCarriesTraceContext(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, c valkey.Client, ns string) {
		ctx := context.Background()
		cl, err := client.New(c, client.Options{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
		sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
		state, _ := trace.ParseTraceState("vendor=abc")
		traced := trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
			TraceFlags: trace.FlagsSampled, TraceState: state, Remote: true}))
		body := json.RawMessage(`{"target_name":"x"}`)
		a, err := cl.Send(traced, client.Message{Type: messages.StartRun, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		b, err := cl.Send(ctx, client.Message{Type: messages.StartRun, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		entries, err := c.Do(ctx, c.B().Xrange().Key(ns+":case-messages").Start("-").End("+").Build()).AsXRange()
		if err != nil || len(entries) != 2 || entries[0].ID != a.EntryID || entries[1].ID != b.EntryID {
			t.Fatalf("case stream %+v (%v)", entries, err)
		}
		if f := entries[0].FieldValues; f["traceparent"] != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" || f["tracestate"] != "vendor=abc" {
			t.Errorf("the traced message's fields: %v", f)
		}
		if f := entries[1].FieldValues; len(f) != 1 {
			t.Errorf("the untraced message's fields: %v", f)
		}
	})
}

func TestFollow(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, c valkey.Client, ns string) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cl, err := client.New(c, client.Options{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		j, err := valkeyjournal.New(c, valkeyjournal.Options{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		ev := func(kind journal.Kind, fields any) journal.Event {
			e, err := journal.NewEvent(kind, fields)
			if err != nil {
				t.Fatal(err)
			}
			return e
		}
		// A run that fails while it is followed.
		lease, err := j.Create(ctx, journal.CreateParams{RunID: "r1", TargetName: "t", Owner: "w"})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(200 * time.Millisecond)
			j.Append(ctx, lease, journal.Batch{Events: []journal.Event{ev(runevent.RunStart, nil)}})
			time.Sleep(200 * time.Millisecond)
			j.Finish(ctx, lease, journal.Batch{Events: []journal.Event{ev(runevent.RunError, map[string]any{"code": "prefix_diverged"})}})
		}()
		var kinds []journal.Kind
		end, err := cl.Follow(ctx, valkeyjournal.EventsKey(ns, "r1"), func(e journal.Event) error {
			kinds = append(kinds, e.Kind)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if end.Status != journal.StatusError || end.Code != messages.PrefixDiverged || len(kinds) != 3 || kinds[2] != runevent.RunError {
			t.Fatalf("end %+v after %v", end, kinds)
		}
		// A suspended run ends the follow with no terminal event.
		lease, err = j.Create(ctx, journal.CreateParams{RunID: "r2", TargetName: "t", Owner: "w"})
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Release(ctx, lease, journal.StatusSuspended); err != nil {
			t.Fatal(err)
		}
		end, err = cl.Follow(ctx, valkeyjournal.EventsKey(ns, "r2"), func(journal.Event) error { return nil })
		if err != nil || end.Status != journal.StatusSuspended || end.Last.Kind != runevent.RunSubmitted {
			t.Fatalf("suspended run: end %+v, %v", end, err)
		}
		// fn's error stops Follow.
		stop := errors.New("enough")
		if _, err := cl.Follow(ctx, valkeyjournal.EventsKey(ns, "r1"), func(journal.Event) error { return stop }); !errors.Is(err, stop) {
			t.Fatalf("Follow returned %v, want fn's error", err)
		}
		// A run that is not there, and a key that is not an events key.
		if _, err := cl.Follow(ctx, valkeyjournal.EventsKey(ns, "gone"), func(journal.Event) error { return nil }); !errors.Is(err, client.ErrRunGone) {
			t.Fatalf("missing run: %v", err)
		}
		if _, err := cl.Follow(ctx, ns+":whatever", func(journal.Event) error { return nil }); err == nil {
			t.Fatal("followed a key that is not an events key")
		}
	})
}

func TestNewOptions(t *testing.T) {
	t.Parallel()
	cl, err := client.New(nil, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if o := cl.Options(); o.Namespace != "pyrula" || o.CaseStream != "pyrula:case-messages" || o.ReplyStream != "pyrula:case-replies" {
		t.Fatalf("defaults %+v", o)
	}
	if _, err := client.New(nil, client.Options{CaseStream: "s", ReplyStream: "s"}); err == nil {
		t.Fatal("equal case and reply streams accepted")
	}
	if _, err := client.New(nil, client.Options{Namespace: "bad ns"}); err == nil {
		t.Fatal("a bad namespace accepted")
	}
}
