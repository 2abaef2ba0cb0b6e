package intake

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/memvalkey"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/worker/internal/envelope"
)

// FuzzDecodeRecord: an answered record as the worker writes it decodes to
// what encoding/json makes of it, quick path or not, and the reply bytes
// the quick path returns are the recorded reply's.
func FuzzDecodeRecord(f *testing.F) {
	f.Add("m-1", "delete_case_bundle", "ok", "", "", "", `{"deleted":true}`)
	f.Add("m-2", "save_case", "ok", "", "", "", `{"fixture_hash":"ab","manifest_summary":{"calls":3,"note":"a \"quoted\" word"}}`)
	f.Add("m 3", "run_case", "refused", "invalid_overrides", `message_id "m" reused`, "", "")
	f.Add("m4", "start_run", "error", "runtime_error", "dead-lettered", "1-0", "")
	f.Fuzz(func(t *testing.T, id, typ, status, code, msg, entryID, result string) {
		r := messages.Reply{MessageID: id, Type: messages.MessageType(typ), Status: messages.ReplyStatus(status),
			Code: messages.Code(code), Message: msg, EntryID: entryID, Result: json.RawMessage(result)}
		raw, err := envelope.EncodeReply(r)
		if err != nil {
			return // not a reply the worker can record
		}
		s := recordOf(strings.Repeat("ab", 32), string(raw))
		var want record
		if err := json.Unmarshal([]byte(s), &want); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		got, replyJSON, err := decodeRecord(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if replyJSON != "" && replyJSON != string(raw) {
			t.Fatalf("%s: reply bytes %s, want %s", s, replyJSON, raw)
		}
		if string(got.Reply.Result) != string(want.Reply.Result) {
			t.Fatalf("%s: result %s, want %s", s, got.Reply.Result, want.Reply.Result)
		}
		got.Reply.Result, want.Reply.Result = nil, nil
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n got %+v\nwant %+v", s, got, want)
		}
	})
}

// TestDecodeRecordQuickPath: the records the worker writes for its usual
// replies take the quick path.
func TestDecodeRecordQuickPath(t *testing.T) {
	for _, r := range []messages.Reply{
		{MessageID: "m-1", Type: messages.DeleteCaseBundle, Status: messages.StatusOK, Result: json.RawMessage(`{"deleted":false}`)},
		{MessageID: "m-2", Type: messages.SaveCase, Status: messages.StatusRefused, Code: messages.InvalidOverrides, Message: "run_id is missing"},
	} {
		raw, _ := envelope.EncodeReply(r)
		if _, replyJSON, err := decodeRecord(recordOf(strings.Repeat("0", 64), string(raw))); err != nil || replyJSON == "" {
			t.Errorf("%s: quick path not taken (%v)", raw, err)
		}
	}
}

// TestRecordScripts: the records the one-script paths write (finishLua,
// claimLua), which the scripts build from the body hash, are byte for byte
// those of startedRecord and recordOf, and their replies those of
// json.Marshal; a duplicate's claim repeats the recorded reply.
func TestRecordScripts(t *testing.T) {
	srv, err := memvalkey.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	opt := memvalkey.ClientOption(srv.Addr())
	opt.ForceSingleClient = true // a single server: the one-script paths
	c, err := valkey.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close) // before srv.Close
	reg, _ := fuzzTargets(t)
	in := newTestIntake(t, c, reg, Config{Namespace: "rec", CaseStream: "rec:case", ReplyStream: "rec:replies",
		ConsumerGroup: "g", ConsumerName: "c1", MaxMessageBytes: 4096})
	if !in.oneWrite {
		t.Fatal("one script per message expected on a single server")
	}
	ctx := context.Background()
	do := func(cmd valkey.Completed) valkey.ValkeyResult { return c.Do(ctx, cmd) }
	if err := do(c.B().XgroupCreate().Key("rec:case").Group("g").Id("0").Mkstream().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	get := func(key string) string {
		s, _ := do(c.B().Get().Key(key).Build()).ToString()
		return s
	}
	lastReply := func() string {
		e, err := do(c.B().Xrevrange().Key("rec:replies").End("+").Start("-").Count(1).Build()).AsXRange()
		if err != nil || len(e) != 1 {
			t.Fatalf("last reply: %v %v", e, err)
		}
		return e[0].FieldValues[messages.ReplyField]
	}
	h := strings.Repeat("ab", 32)
	for i, id := range []string{"m-1", "m<1>", "m-é"} { // "<" and "é": json.Marshal's path
		key := in.recordKey(id)
		r := messages.Reply{MessageID: id, Type: messages.DeleteCaseBundle, Status: messages.StatusOK, Result: json.RawMessage(`{"deleted":false}`)}
		absent, _ := json.Marshal(r)
		r.Result = json.RawMessage(`{"deleted":true}`)
		present, _ := json.Marshal(r)
		answer := func() outcome {
			out, _, err := in.answerDelete(outcome{reply: messages.Reply{MessageID: id}, replyTo: "rec:replies", idKey: key}, key, h)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		// No record: deleted false is recorded and replied.
		out := answer()
		if done, err := in.finishInOne(ctx, "1-0", &out); !done || err != nil {
			t.Fatalf("%s: finish %v %v", id, done, err)
		}
		if got := get(key); got != recordOf(h, string(absent)) {
			t.Errorf("%s: record %s, want %s", id, got, recordOf(h, string(absent)))
		}
		if ttl, err := do(c.B().Pttl().Key(key).Build()).AsInt64(); err != nil || ttl <= 0 {
			t.Errorf("%s: record's TTL %d ms (%v), want PYRULA_IDEMPOTENCY_TTL's", id, ttl, err)
		}
		if got := lastReply(); got != string(absent) {
			t.Errorf("%s: reply %s, want %s", id, got, absent)
		}
		// Over the started record noting the bundle: deleted true.
		do(c.B().Set().Key(key).Value(startedRecord(h, true)).Build())
		out = answer()
		if done, err := in.finishInOne(ctx, "1-0", &out); !done || err != nil {
			t.Fatalf("%s: finish %v %v", id, done, err)
		}
		if got := get(key); got != recordOf(h, string(present)) {
			t.Errorf("%s: record %s, want %s", id, got, recordOf(h, string(present)))
		}
		if got := lastReply(); got != string(present) || out.replyJSON != string(present) || string(out.reply.Result) != `{"deleted":true}` {
			t.Errorf("%s: reply %s (outcome %s %s), want %s", id, got, out.replyJSON, out.reply.Result, present)
		}
		// A claim: the started record; over the answered one, a duplicate
		// answered by the claim with the recorded reply.
		key2 := in.recordKey(id + "-claim")
		cl, err := in.claimRecord(ctx, key2, h, i%2 == 1, "rec:replies", "1-0")
		if err != nil || cl.found {
			t.Fatalf("%s: claim %+v %v", id, cl, err)
		}
		if got := get(key2); got != startedRecord(h, i%2 == 1) {
			t.Errorf("%s: started record %s, want %s", id, got, startedRecord(h, i%2 == 1))
		}
		do(c.B().Set().Key(key2).Value(recordOf(h, string(present))).Build())
		cl, err = in.claimRecord(ctx, key2, h, false, "rec:replies", "1-0")
		if err != nil || !cl.found || !cl.answered || cl.rec.BodyHash != h || cl.rec.Reply.Status != messages.StatusOK ||
			cl.rec.Reply.MessageID != id || cl.rec.Reply.Type != messages.DeleteCaseBundle || cl.rec.Reply.Result != nil || cl.replyJSON != "" {
			t.Fatalf("%s: duplicate's claim %+v %v", id, cl, err)
		}
		if got := lastReply(); got != string(present) {
			t.Errorf("%s: duplicate's reply %s, want %s", id, got, present)
		}
		// Another body's answered record is returned, not answered.
		cl, err = in.claimRecord(ctx, key2, strings.Repeat("cd", 32), false, "rec:replies", "1-0")
		if err != nil || !cl.found || cl.answered || cl.rec.BodyHash != h {
			t.Fatalf("%s: claim over another body's record %+v %v", id, cl, err)
		}
	}
}
