package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
	"github.com/pyrula/caseworker/worker/client"
)

func TestRedriveID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"m1", "m1.redrive-1"},
		{"m1.redrive-1", "m1.redrive-2"},
		{"m1.redrive-9", "m1.redrive-10"},
		{"a.redrive-x", "a.redrive-x.redrive-1"},
		{"a.redrive-1.b", "a.redrive-1.b.redrive-1"},
		{"a.redrive-01", "a.redrive-01.redrive-1"},
		{"a.redrive-0", "a.redrive-0.redrive-1"},
		{"a.redrive-", "a.redrive-.redrive-1"},
		{"run_1.redrive-3.redrive-4", "run_1.redrive-3.redrive-5"},
	} {
		if got := client.RedriveID(tc.in); got != tc.want {
			t.Errorf("RedriveID(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestCheckEntryID(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"0-0", "1767225600000-0", "18446744073709551615-18446744073709551615"} {
		if err := client.CheckEntryID(id); err != nil {
			t.Errorf("%q: %v", id, err)
		}
	}
	for _, id := range []string{"", "1", "1-", "-1", "1-2-3", "a-0", "1-0 ", "+", "-", "18446744073709551616-0", "１-0"} {
		if err := client.CheckEntryID(id); !errors.Is(err, client.ErrInvalidEntryID) {
			t.Errorf("%q: %v, want ErrInvalidEntryID", id, err)
		}
	}
}

// The redrive marks are kept in the dead-letter stream's cluster slot, under
// the namespace, whatever the stream's name.
func TestRedriveMarksKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ stream, want string }{
		{"", "ns:{ns:case-messages:dead}:redriven"},
		{"{t}:msgs", "ns:{t}:msgs:dead:redriven"},
		{"x{}y", ""},
		{"a}b", ""},
	} {
		cl, err := client.New(nil, client.Options{Namespace: "ns", CaseStream: tc.stream})
		if err != nil {
			t.Fatal(err)
		}
		got, err := cl.RedriveMarksKey(client.DeadMessages)
		if tc.want == "" {
			if err == nil {
				t.Errorf("stream %q: marks %q, want an error", tc.stream, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("stream %q: marks %q, %v; want %q", tc.stream, got, err, tc.want)
		}
	}
	cl, _ := client.New(nil, client.Options{Namespace: "ns"})
	if got, err := cl.RedriveMarksKey(client.DeadRuns); err != nil || got != "ns:{ns:runs:dead}:redriven" {
		t.Errorf("runs marks %q, %v", got, err)
	}
}

// deadLetter adds a dead letter to stream as the worker writes one and
// returns its entry id.
func deadLetter(t *testing.T, c valkey.Client, stream string, fields ...string) string {
	t.Helper()
	cmd := c.B().Xadd().Key(stream).Id("*").FieldValue()
	for i := 0; i < len(fields); i += 2 {
		cmd = cmd.FieldValue(fields[i], fields[i+1])
	}
	id, err := c.Do(context.Background(), cmd.Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// deadMessage is the dead letter of a delete_case_bundle message id with
// reply status status.
func deadMessage(t *testing.T, c valkey.Client, stream, id, replyTo, status string) string {
	t.Helper()
	env, _ := json.Marshal(map[string]any{"message_id": id, "type": "delete_case_bundle", "reply_to": replyTo,
		"body": map[string]string{"fixture_hash": strings.Repeat("0", 64)}})
	return deadLetter(t, c, stream, "message", string(env), "error", "store down: "+id, "deliveries", "3",
		"entry_id", "1-1", "reply_status", status)
}

func TestDeadLetterMessages(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, c valkey.Client, ns string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cl, err := client.New(c, client.Options{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		dead := cl.DeadStream(client.DeadMessages)
		if dead != ns+":case-messages:dead" {
			t.Fatalf("dead stream %s", dead)
		}
		marks, _ := cl.RedriveMarksKey(client.DeadMessages)
		if c.Mode() == valkey.ClientModeCluster {
			for _, kind := range []client.DeadKind{client.DeadMessages, client.DeadRuns} {
				m, _ := cl.RedriveMarksKey(kind)
				s1, err1 := c.Do(ctx, c.B().ClusterKeyslot().Key(cl.DeadStream(kind)).Build()).AsInt64()
				s2, err2 := c.Do(ctx, c.B().ClusterKeyslot().Key(m).Build()).AsInt64()
				if err1 != nil || err2 != nil || s1 != s2 {
					t.Fatalf("%s in slot %d, %s in slot %d (%v, %v)", cl.DeadStream(kind), s1, m, s2, err1, err2)
				}
			}
		}
		replyTo := ns + ":my-replies"
		e1 := deadMessage(t, c, dead, "m1", replyTo, "error")
		e2 := deadMessage(t, c, dead, "m2", replyTo, "ok")
		e3 := deadLetter(t, c, dead, "message", "not json", "error", "boom", "deliveries", "x", "entry_id", "1-3", "reply_status", "error")

		var got []client.DeadLetter
		if err := cl.DeadLetters(ctx, client.DeadMessages, func(l client.DeadLetter) error { got = append(got, l); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 || got[0].EntryID != e1 || got[1].EntryID != e2 || got[2].EntryID != e3 {
			t.Fatalf("dead letters %+v", got)
		}
		l := got[0]
		if l.MessageID != "m1" || l.Type != messages.DeleteCaseBundle || l.Reason != "store down: m1" || l.Deliveries == nil ||
			*l.Deliveries != 3 || l.ReplyStatus != messages.StatusError || l.Redriven != nil || l.RunID != "" || l.Failures != nil ||
			time.Since(l.At) > time.Minute || time.Since(l.At) < -time.Minute {
			t.Errorf("dead letter %+v", l)
		}
		if got[2].MessageID != "" || got[2].Deliveries != nil {
			t.Errorf("garbled dead letter %+v", got[2])
		}

		if _, err := cl.DeadLetterByID(ctx, client.DeadMessages, "x"); !errors.Is(err, client.ErrInvalidEntryID) {
			t.Errorf("bad id: %v", err)
		}
		if _, err := cl.DeadLetterByID(ctx, client.DeadMessages, "1-0"); !errors.Is(err, client.ErrDeadLetterNotFound) {
			t.Errorf("missing id: %v", err)
		}
		if _, err := cl.Redrive(ctx, client.RedriveParams{Kind: client.DeadMessages, EntryID: "1-0"}); !errors.Is(err, client.ErrDeadLetterNotFound) {
			t.Errorf("redrive of a missing id: %v", err)
		}

		// The redrive: the same envelope under the new id, on the case stream.
		r, err := cl.Redrive(ctx, client.RedriveParams{Kind: client.DeadMessages, EntryID: e1})
		if err != nil {
			t.Fatal(err)
		}
		if r.EntryID != e1 || r.MessageID != "m1" || r.Redrive.MessageID != "m1.redrive-1" || r.ReplyTo != replyTo || r.Redrive.EntryID == "" {
			t.Fatalf("redriven %+v", r)
		}
		sent, err := c.Do(ctx, c.B().Xrange().Key(ns+":case-messages").Start(r.Redrive.EntryID).End(r.Redrive.EntryID).Build()).AsXRange()
		if err != nil || len(sent) != 1 {
			t.Fatalf("sent %v, %v", sent, err)
		}
		var env messages.Envelope
		if err := json.Unmarshal([]byte(sent[0].FieldValues["message"]), &env); err != nil {
			t.Fatal(err)
		}
		if env.MessageID != "m1.redrive-1" || env.Type != messages.DeleteCaseBundle || env.ReplyTo != replyTo ||
			string(env.Body) != `{"fixture_hash":"`+strings.Repeat("0", 64)+`"}` {
			t.Errorf("sent %+v", env)
		}
		// Its reply is found by Reply, as for a message sent with Send.
		reply(t, c, replyTo, messages.Reply{MessageID: "m0", Type: messages.DeleteCaseBundle, Status: messages.StatusOK})
		reply(t, c, replyTo, messages.Reply{MessageID: "m1.redrive-1", Type: messages.DeleteCaseBundle, Status: messages.StatusOK})
		if rep, err := cl.Reply(ctx, r.Sent); err != nil || rep.MessageID != "m1.redrive-1" {
			t.Fatalf("reply %+v, %v", rep, err)
		}

		// Once only.
		_, err = cl.Redrive(ctx, client.RedriveParams{Kind: client.DeadMessages, EntryID: e1})
		if !errors.Is(err, client.ErrAlreadyRedriven) || !strings.Contains(err.Error(), "m1.redrive-1") {
			t.Fatalf("second redrive: %v", err)
		}
		l, err = cl.DeadLetterByID(ctx, client.DeadMessages, e1)
		if err != nil || l.Redriven == nil || l.Redriven.MessageID != "m1.redrive-1" || l.Redriven.EntryID != r.Redrive.EntryID {
			t.Fatalf("after the redrive: %+v, %v", l, err)
		}
		// Work done (reply ok) and a garbled message are not redriven.
		for _, id := range []string{e2, e3} {
			if _, err := cl.Redrive(ctx, client.RedriveParams{Kind: client.DeadMessages, EntryID: id}); !errors.Is(err, client.ErrNotRedrivable) {
				t.Errorf("redrive of %s: %v, want ErrNotRedrivable", id, err)
			}
		}
		if n, err := c.Do(ctx, c.B().Xlen().Key(ns+":case-messages").Build()).AsInt64(); err != nil || n != 1 {
			t.Errorf("%d messages sent (%v), want 1", n, err)
		}

		// Inspect: the recorded replies of the message id and of its redrive.
		d, err := cl.InspectDeadLetter(ctx, client.InspectParams{Kind: client.DeadMessages, EntryID: e1})
		if err != nil || d.Reply != nil || d.RedriveReply != nil || d.SourceEntryID != "1-1" || d.ReplyTo != replyTo || d.Stream != dead ||
			!strings.Contains(string(d.Body), "fixture_hash") {
			t.Fatalf("inspect %+v, %v", d, err)
		}
		record := func(id, rep string) {
			if err := c.Do(ctx, c.B().Set().Key(ns+":msg:{"+id+"}").Value(`{"body_hash":"h","reply":`+rep+`}`).Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		record("m1", `{"message_id":"m1","status":"error"}`)
		record("m1.redrive-1", `{"message_id":"m1.redrive-1","status":"ok"}`)
		d, err = cl.InspectDeadLetter(ctx, client.InspectParams{Kind: client.DeadMessages, EntryID: e1})
		if err != nil || string(d.Reply) != `{"message_id":"m1","status":"error"}` || string(d.RedriveReply) != `{"message_id":"m1.redrive-1","status":"ok"}` {
			t.Fatalf("inspect %s %s, %v", d.Reply, d.RedriveReply, err)
		}

		// Redrives at once: exactly one wins, every round.
		for round := range 5 {
			id := deadMessage(t, c, dead, "c"+string(rune('0'+round)), replyTo, "error")
			var wg sync.WaitGroup
			errs := make([]error, 8)
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[i] = cl.Redrive(ctx, client.RedriveParams{Kind: client.DeadMessages, EntryID: id})
				}()
			}
			wg.Wait()
			won := 0
			for _, err := range errs {
				switch {
				case err == nil:
					won++
				case !errors.Is(err, client.ErrAlreadyRedriven):
					t.Errorf("round %d: %v", round, err)
				}
			}
			if won != 1 {
				t.Fatalf("round %d: %d redrives succeeded, want 1: %v", round, won, errs)
			}
		}

		// Purge: the entries and their marks.
		done, err := cl.PurgeDeadLetters(ctx, client.DeadMessages, []string{e1, e2, "9-9"})
		if err != nil || len(done) != 3 || !done[0] || !done[1] || done[2] {
			t.Fatalf("purge %v, %v", done, err)
		}
		if n, err := c.Do(ctx, c.B().Hexists().Key(marks).Field(e1).Build()).AsInt64(); err != nil || n != 0 {
			t.Errorf("the mark of a purged dead letter is left (%d, %v)", n, err)
		}
		if _, err := cl.PurgeDeadLetters(ctx, client.DeadMessages, []string{e3, "x"}); !errors.Is(err, client.ErrInvalidEntryID) {
			t.Errorf("purge with a bad id: %v", err)
		}
		if _, err := cl.DeadLetterByID(ctx, client.DeadMessages, e3); err != nil {
			t.Errorf("a purge refused for a bad id deleted %s: %v", e3, err)
		}
	})
}

// A dead run is redriven as a new run: the message that submitted it, under
// new message and run ids.
func TestDeadLetterRuns(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, c valkey.Client, ns string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cl, err := client.New(c, client.Options{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		j, err := valkeyjournal.New(c, valkeyjournal.Options{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		request := `{"options":{"replay_only":true},"source":{"bundle":{"fixture_hash":"` + strings.Repeat("a", 64) + `"}},"target_name":"checkout"}`
		run := func(runID, typ string, finish bool) {
			fields := map[string]json.RawMessage{"message_id": json.RawMessage(`"msg_` + runID + `"`), "request": json.RawMessage(request)}
			if typ != "" {
				fields["message_type"] = json.RawMessage(`"` + typ + `"`)
			}
			lease, err := j.Create(ctx, journal.CreateParams{RunID: runID, TargetName: "checkout", Owner: "w", Fields: fields})
			if err != nil {
				t.Fatal(err)
			}
			if !finish {
				return
			}
			ev, err := journal.NewEvent(runevent.RunError, map[string]any{"code": "runtime_error", "message": "dead-lettered"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := j.Finish(ctx, lease, journal.Batch{Events: []journal.Event{ev}}); err != nil {
				t.Fatal(err)
			}
		}
		dead := cl.DeadStream(client.DeadRuns)
		if dead != ns+":runs:dead" {
			t.Fatalf("dead stream %s", dead)
		}
		deadRun := func(runID string) string {
			return deadLetter(t, c, dead, "run_id", runID, "entry_id", "1-1", "error", "store down", "failures", "3")
		}
		run("case_a", "run_case", true)
		ea := deadRun("case_a")
		var got []client.DeadLetter
		if err := cl.DeadLetters(ctx, client.DeadRuns, func(l client.DeadLetter) error { got = append(got, l); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].RunID != "case_a" || got[0].MessageID != "msg_case_a" || got[0].Type != messages.RunCase ||
			got[0].Failures == nil || *got[0].Failures != 3 || got[0].Deliveries != nil || got[0].Reason != "store down" {
			t.Fatalf("dead runs %+v", got)
		}
		if _, err := cl.Redrive(ctx, client.RedriveParams{Kind: client.DeadRuns, EntryID: ea}); err == nil {
			t.Fatal("a run redriven without a journal")
		}
		d, err := cl.InspectDeadLetter(ctx, client.InspectParams{Kind: client.DeadRuns, EntryID: ea, Journal: j})
		if err != nil || d.Status != journal.StatusError || d.Target != "checkout" || string(d.Body) != request ||
			!strings.Contains(string(d.Terminal), `"kind":"run:error"`) || d.Reply != nil {
			t.Fatalf("inspect %+v, %v", d, err)
		}
		r, err := cl.Redrive(ctx, client.RedriveParams{Kind: client.DeadRuns, EntryID: ea, Journal: j})
		if err != nil {
			t.Fatal(err)
		}
		if r.RunID != "case_a" || r.MessageID != "msg_case_a" || r.Redrive.MessageID != "msg_case_a.redrive-1" ||
			r.Redrive.RunID != "case_a.redrive-1" || r.ReplyTo != ns+":case-replies" {
			t.Fatalf("redriven %+v", r)
		}
		sent, err := c.Do(ctx, c.B().Xrange().Key(ns+":case-messages").Start("-").End("+").Build()).AsXRange()
		if err != nil || len(sent) != 1 {
			t.Fatalf("sent %v, %v", sent, err)
		}
		var env messages.Envelope
		if err := json.Unmarshal([]byte(sent[0].FieldValues["message"]), &env); err != nil {
			t.Fatal(err)
		}
		var body messages.RunCaseBody
		if err := json.Unmarshal(env.Body, &body); err != nil {
			t.Fatal(err)
		}
		if env.MessageID != "msg_case_a.redrive-1" || env.Type != messages.RunCase || env.ReplyTo != ns+":case-replies" ||
			body.RunID != "case_a.redrive-1" || body.TargetName != "checkout" || body.Source.Bundle == nil || !body.Options.ReplayOnly {
			t.Fatalf("sent %+v, body %s", env, env.Body)
		}
		if _, err := cl.Redrive(ctx, client.RedriveParams{Kind: client.DeadRuns, EntryID: ea, Journal: j}); !errors.Is(err, client.ErrAlreadyRedriven) {
			t.Fatalf("second redrive: %v", err)
		}

		// Not redriven: a run still running, a run gone, a submission of
		// no type the worker executes.
		run("run_b", "start_run", false)
		run("run_c", "", true)
		for _, tc := range []struct{ run, want string }{
			{"run_b", "is running"},
			{"run_gone", "in neither Valkey nor the archive"},
			{"run_c", "names no start_run or run_case"},
		} {
			id := deadRun(tc.run)
			_, err := cl.Redrive(ctx, client.RedriveParams{Kind: client.DeadRuns, EntryID: id, Journal: j})
			if !errors.Is(err, client.ErrNotRedrivable) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("redrive of %s: %v, want ErrNotRedrivable saying %q", tc.run, err, tc.want)
			}
		}
		if n, err := c.Do(ctx, c.B().Xlen().Key(ns+":case-messages").Build()).AsInt64(); err != nil || n != 1 {
			t.Errorf("%d messages sent (%v), want 1", n, err)
		}
	})
}
