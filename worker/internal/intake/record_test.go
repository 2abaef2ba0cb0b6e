package intake

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

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
		s := recordOf(strings.Repeat("ab", 32), raw)
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
		if _, replyJSON, err := decodeRecord(recordOf(strings.Repeat("0", 64), raw)); err != nil || replyJSON == "" {
			t.Errorf("%s: quick path not taken (%v)", raw, err)
		}
	}
}

// TestRecordStrings: the strings finish writes, built in one allocation by
// encode and answerDelete, are the started prefix and answered records
// (startedPrefix, startedRecord, recordOf) of the replies they hold.
func TestRecordStrings(t *testing.T) {
	h := strings.Repeat("ab", 32)
	in := &Intake{}
	for _, id := range []string{"m-1", "m<1>", "m-é"} { // "<" and "é": json.Marshal's path
		out, _, err := in.answerDelete(outcome{reply: messages.Reply{MessageID: id}}, "ns:msg:{"+id+"}", h)
		if err != nil {
			t.Fatal(err)
		}
		r := messages.Reply{MessageID: id, Type: messages.DeleteCaseBundle, Status: messages.StatusOK, Result: json.RawMessage(`{"deleted":false}`)}
		raw, _ := json.Marshal(r)
		r.Result = json.RawMessage(`{"deleted":true}`)
		alt, _ := json.Marshal(r)
		for _, c := range [][2]string{
			{out.prefix, startedPrefix(h)}, {out.record, recordOf(h, raw)}, {out.replyJSON, string(raw)},
			{out.alt.over, startedRecord(h, true)}, {out.alt.record, recordOf(h, alt)}, {out.alt.replyJSON, string(alt)},
			{string(out.alt.result), `{"deleted":true}`},
		} {
			if c[0] != c[1] {
				t.Errorf("%s: %s, want %s", id, c[0], c[1])
			}
		}
		if !out.unclaimed || out.key == "" || out.bodyHash != h {
			t.Errorf("%s: outcome %+v", id, out)
		}

		o := outcome{reply: messages.Reply{MessageID: id, Type: messages.SaveCase, Status: messages.StatusOK, Result: json.RawMessage(`{"a":1}`)}, key: "k", bodyHash: h}
		if err := o.encode(); err != nil {
			t.Fatal(err)
		}
		raw, _ = json.Marshal(o.reply)
		if o.prefix != startedPrefix(h) || o.record != recordOf(h, raw) || o.replyJSON != string(raw) {
			t.Errorf("%s: encode gave %s, %s, %s", id, o.prefix, o.record, o.replyJSON)
		}
		o = outcome{reply: o.reply, replyJSON: string(raw)} // no record: the reply alone
		if err := o.encode(); err != nil || o.replyJSON != string(raw) || o.record != "" {
			t.Errorf("%s: encode without a key gave %s, %s (%v)", id, o.replyJSON, o.record, err)
		}
	}
}
