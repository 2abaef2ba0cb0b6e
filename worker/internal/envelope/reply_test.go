package envelope

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/pyrula/caseworker/messages"
)

// FuzzEncodeReply: EncodeReply writes the bytes json.Marshal writes, for
// any reply, whether it takes its quick path or not.
func FuzzEncodeReply(f *testing.F) {
	f.Add("m-1", "delete_case_bundle", "ok", "", "", "", `{"deleted":true}`)
	f.Add("m 2", "save_case", "refused", "invalid_overrides", `message_id m reused with "another" <body> & more`, "", "")
	f.Add("", "", "error", "runtime_error", "dead-lettered after 3 deliveries; last error: x\n\u2028", "1-0", ``)
	f.Add("m\xff", "run_case", "ok", "", "", "", `{"run_id":"run_1", "events_stream":"a<b"}`)
	f.Add("m", "run_case", "ok", "", "", "", `{"a":[1,2,{"b":null}],"c":"é"}`)
	f.Add("m", "run_case", "ok", "", "", "", `{"a":`)
	f.Fuzz(func(t *testing.T, id, typ, status, code, msg, entryID, result string) {
		r := messages.Reply{MessageID: id, Type: messages.MessageType(typ), Status: messages.ReplyStatus(status),
			Code: messages.Code(code), Message: msg, EntryID: entryID, Result: json.RawMessage(result)}
		want, wantErr := json.Marshal(r)
		got, err := EncodeReply(r)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("EncodeReply %+v:\n got %s (%v)\nwant %s (%v)", r, got, err, want, wantErr)
		}
	})
}
