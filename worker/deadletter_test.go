package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pyrula/caseworker/internal/testwait"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store/memstore"
)

// TestDeadLetterAfterFailedReply: the work succeeds and its reply is
// recorded, but publishing the reply fails on every delivery (reply_to is a
// string key: WRONGTYPE). Once the deliveries are used up and the reply
// stream works again, the message is dead-lettered with the real last error
// (not "unknown"), and its only reply is the recorded ok reply, never an
// error reply beside it.
func TestDeadLetterAfterFailedReply(t *testing.T) {
	t.Parallel()
	e := setup(t, memstore.New(memstore.Options{}), nil) // MaxDeliveries 3, ClaimIdle 100ms
	ctx := context.Background()
	replyTo := e.cfg.Namespace + ":my-replies"
	if err := e.client.Do(ctx, e.client.B().Set().Key(replyTo).Value("not a stream").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	msg, _ := json.Marshal(map[string]any{"message_id": "f1", "type": "delete_case_bundle", "reply_to": replyTo,
		"body": map[string]string{"fixture_hash": zeroHash}})
	e.sendRaw(string(msg))
	// Wait until the third delivery has failed: delivered 3 times and idle
	// since (a delivery takes milliseconds; the dead letter waits 400 ms).
	testwait.Eventually(t, 10*time.Second, "the third delivery failed", func() bool {
		rows, err := e.client.Do(ctx, e.client.B().Xpending().Key(e.cfg.CaseStream).Group(e.cfg.ConsumerGroup).
			Start("-").End("+").Count(10).Build()).ToArray()
		if err != nil || len(rows) != 1 {
			return false
		}
		f, _ := rows[0].ToArray()
		idle, _ := f[2].AsInt64()
		n, _ := f[3].AsInt64()
		return n >= 3 && idle >= 50
	})
	if err := e.client.Do(ctx, e.client.B().Del().Key(replyTo).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	var dead []map[string]string
	testwait.Eventually(t, 10*time.Second, "the dead letter", func() bool {
		entries, err := e.client.Do(ctx, e.client.B().Xrange().Key(e.cfg.CaseStream+":dead").Start("-").End("+").Build()).AsXRange()
		dead = dead[:0]
		for _, en := range entries {
			dead = append(dead, en.FieldValues)
		}
		return err == nil && len(dead) > 0 && e.pending() == 0
	})
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1: %v", len(dead), dead)
	}
	if got := dead[0]["error"]; !strings.Contains(got, "WRONGTYPE") || !strings.Contains(got, "publish the reply") {
		t.Errorf("dead letter error %q, want the failed publish", got)
	}
	if got := dead[0]["reply_status"]; got != "ok" {
		t.Errorf("dead letter reply_status %q, want ok (the recorded reply)", got)
	}
	entries, err := e.client.Do(ctx, e.client.B().Xrange().Key(replyTo).Start("-").End("+").Build()).AsXRange()
	if err != nil || len(entries) != 1 {
		t.Fatalf("replies %v, %v; want exactly one", entries, err)
	}
	var r messages.Reply
	if err := json.Unmarshal([]byte(entries[0].FieldValues["reply"]), &r); err != nil {
		t.Fatal(err)
	}
	wantReply(t, r, messages.StatusOK, "")
	if string(r.Result) != `{"deleted":false}` {
		t.Errorf("result %s", r.Result)
	}
	// A resend gets that same reply.
	e.sendRaw(string(msg))
	testwait.Eventually(t, 10*time.Second, "the resend's reply", func() bool {
		n, err := e.client.Do(ctx, e.client.B().Xlen().Key(replyTo).Build()).AsInt64()
		return err == nil && n == 2 && e.pending() == 0
	})
	entries, _ = e.client.Do(ctx, e.client.B().Xrange().Key(replyTo).Start("-").End("+").Build()).AsXRange()
	if entries[1].FieldValues["reply"] != entries[0].FieldValues["reply"] {
		t.Errorf("resend reply %s, want %s", entries[1].FieldValues["reply"], entries[0].FieldValues["reply"])
	}
}
