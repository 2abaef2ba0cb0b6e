package worker

import (
	"encoding/json"

	"github.com/pyrula/caseworker/messages"
)

// encodeReply is json.Marshal(r), byte for byte, without reflection when
// every string of r is plain (printable ASCII that encoding/json writes as
// it is) and its result is canonical JSON (canonicalJSON, so compacting it
// changes nothing): the case of nearly every reply.
func encodeReply(r messages.Reply) ([]byte, error) {
	if !plain(r.MessageID) || !plain(string(r.Type)) || !plain(string(r.Status)) || !plain(string(r.Code)) ||
		!plain(r.Message) || !plain(r.EntryID) || len(r.Result) > 0 && !canonicalJSON(r.Result) {
		return json.Marshal(r)
	}
	b := make([]byte, 0, 64+len(r.MessageID)+len(r.Type)+len(r.Code)+len(r.Message)+len(r.EntryID)+len(r.Result))
	b = append(b, `{"message_id":"`...)
	b = append(b, r.MessageID...)
	b = append(b, `","type":"`...)
	b = append(b, r.Type...)
	b = append(b, `","status":"`...)
	b = append(b, r.Status...)
	b = append(b, '"')
	if r.Code != "" {
		b = append(b, `,"code":"`...)
		b = append(b, r.Code...)
		b = append(b, '"')
	}
	if r.Message != "" {
		b = append(b, `,"message":"`...)
		b = append(b, r.Message...)
		b = append(b, '"')
	}
	if r.EntryID != "" {
		b = append(b, `,"entry_id":"`...)
		b = append(b, r.EntryID...)
		b = append(b, '"')
	}
	if len(r.Result) > 0 {
		b = append(b, `,"result":`...)
		b = append(b, r.Result...)
	}
	return append(b, '}'), nil
}

// plain reports whether encoding/json writes s as it is between quotes.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
