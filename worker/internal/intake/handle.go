package intake

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/worker/internal/batch"
	"github.com/pyrula/caseworker/worker/internal/consumer"
	"github.com/pyrula/caseworker/worker/internal/envelope"
)

// finishTimeout bounds the writes that end a message (record, reply, ack),
// which run even when the worker is stopping.
const finishTimeout = 10 * time.Second

// record is the idempotency record of a message id, a JSON string at
// <ns>:msg:{<message_id>}: while the message's work runs, the started
// record {"state":"started","body_hash"[,"bundle_present":true]}; once it
// is answered, {"body_hash","reply"}.
type record struct {
	// State is "started" while the work has not finished; empty once the
	// reply is recorded.
	State string `json:"state,omitempty"`
	// BodyHash is the SHA-256 of the type and the canonical JSON of the body.
	BodyHash string `json:"body_hash"`
	// BundlePresent (delete_case_bundle, started records only) says the
	// bundle was stored when the message was first handled.
	BundlePresent bool           `json:"bundle_present,omitempty"`
	Reply         messages.Reply `json:"reply"`
}

// decodeRecord decodes idempotency record s. An answered record as the
// worker writes it (recordOf) is read without a JSON decoder, and its
// reply's text is returned too (a part of s), to be published as it is
// (replyJSON); any other record is decoded by encoding/json (replyJSON "").
func decodeRecord(s string) (record, string, error) {
	if r, raw, ok := peekRecord(s); ok {
		return r, raw, nil
	}
	var r record // decoded apart, on the heap only on this path
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return record{}, "", err
	}
	return r, "", nil
}

// peekRecord reads an answered record written by recordOf, whose reply was
// encoded by envelope.EncodeReply or json.Marshal (members in the order of
// messages.Reply, result last): {"body_hash":"<64 hex>","reply":{...}}.
// It reports false for anything else, and for a reply whose strings hold
// an escape.
func peekRecord(s string) (r record, reply string, ok bool) {
	const head, mid = `{"body_hash":"`, `","reply":`
	n := len(head) + 64
	if !strings.HasPrefix(s, head) || len(s) < n+len(mid)+3 || s[n:n+len(mid)] != mid || s[len(s)-1] != '}' {
		return record{}, "", false
	}
	r.BodyHash, reply = s[len(head):n], s[n+len(mid):len(s)-1]
	rest, ok := strings.CutPrefix(reply, "{")
	for ok && rest != "}" {
		var name, value string
		if name, rest, ok = cutJSONString(rest); !ok || len(rest) == 0 || rest[0] != ':' {
			return record{}, "", false
		}
		rest = rest[1:]
		if name == "result" {
			if len(rest) < 2 || rest[len(rest)-1] != '}' {
				return record{}, "", false
			}
			r.Reply.Result = json.RawMessage(rest[:len(rest)-1])
			break
		}
		if value, rest, ok = cutJSONString(rest); !ok {
			return record{}, "", false
		}
		switch name {
		case "message_id":
			r.Reply.MessageID = value
		case "type":
			r.Reply.Type = messages.MessageType(value)
		case "status":
			r.Reply.Status = messages.ReplyStatus(value)
		case "code":
			r.Reply.Code = messages.Code(value)
		case "message":
			r.Reply.Message = value
		case "entry_id":
			r.Reply.EntryID = value
		default:
			return record{}, "", false
		}
		if rest, ok = strings.CutPrefix(rest, ","); !ok {
			ok = rest == "}"
		}
	}
	return r, reply, ok && r.Reply.Status != ""
}

// cutJSONString cuts the JSON string that s begins with, when it holds
// neither escapes nor control characters and is valid UTF-8 (so that it
// reads as encoding/json reads it), returning its value and what follows.
func cutJSONString(s string) (value, rest string, ok bool) {
	if len(s) == 0 || s[0] != '"' {
		return "", "", false
	}
	end := strings.IndexByte(s[1:], '"') + 1
	if end == 0 {
		return "", "", false
	}
	value = s[1:end]
	ascii := true
	for i := 0; i < len(value); i++ {
		c := value[i]
		if c < 0x20 || c == '\\' {
			return "", "", false
		}
		ascii = ascii && c < utf8.RuneSelf
	}
	if !ascii && !utf8.ValidString(value) {
		return "", "", false
	}
	return value, s[end+1:], true
}

// reusedIDFormat words the refusal of a message whose id has another body's
// record.
const reusedIDFormat = "message_id %s reused with another body"

// stateStarted is record.State while a message's work runs.
const stateStarted = "started"

// startedHead begins every started record, and answeredHead and
// replyMember every answered record: answeredHead, the body hash,
// replyMember, the reply, "}" (recordOf).
const (
	startedHead  = `{"state":"started","body_hash":"`
	answeredHead = `{"body_hash":"`
	replyMember  = `","reply":`
)

// startedPrefix is how the started record of body hash h begins; the
// record scripts recognise a started record by it.
func startedPrefix(h string) string {
	return startedHead + h + `"`
}

// startedRecord is the started record of body hash h (one allocation).
func startedRecord(h string, bundlePresent bool) string {
	if bundlePresent {
		return startedHead + h + `"` + bundleNoted
	}
	return startedHead + h + `"}`
}

// bundleNoted is how the started record of a delete_case_bundle that
// found its bundle ends, after its started prefix (startedRecord).
const bundleNoted = `,"bundle_present":true}`

// setRecordLua replaces the record at KEYS[1] with ARGV[2] (TTL ARGV[3] ms)
// when there is none or it begins with ARGV[1] (the started record of the
// caller's body hash), and returns nil; otherwise it leaves the record and
// returns it (a reply already recorded, or another body's record). With
// ARGV[4] and ARGV[5], a record that is exactly ARGV[4] is replaced with
// ARGV[5] instead, and the script returns 1 (answerDelete: a bundle noted
// by another delivery).
const setRecordLua = `
local cur = redis.call('GET', KEYS[1])
if ARGV[4] and cur == ARGV[4] then
  redis.call('SET', KEYS[1], ARGV[5], 'PX', ARGV[3])
  return 1
end
if cur and string.sub(cur, 1, string.len(ARGV[1])) ~= ARGV[1] then
  return cur
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return false
`

var setRecordSHA = func() string {
	sum := sha1.Sum([]byte(setRecordLua))
	return hex.EncodeToString(sum[:])
}()

// setRecord runs setRecordLua for key with args (ARGV) through do
// (EVALSHA, then EVAL when the server does not have the script yet).
func (in *Intake) setRecord(do func(valkey.Completed) valkey.ValkeyResult, key string, args []string) valkey.ValkeyResult {
	res := do(in.client.B().Evalsha().Sha1(setRecordSHA).Numkeys(1).Key(key).Arg(args...).Build())
	if ve, ok := valkey.IsValkeyErr(res.Error()); ok && ve.IsNoScript() {
		res = do(in.client.B().Eval().Script(setRecordLua).Numkeys(1).Key(key).Arg(args...).Build())
	}
	return res
}

// ttlArg is PYRULA_IDEMPOTENCY_TTL in milliseconds, the records' PX.
func ttlArg(ttl time.Duration) string { return strconv.FormatInt(ttl.Milliseconds(), 10) }

// finishLua is finish in one script, for a single Valkey (every key on one
// server) without PYRULA_WAIT_REPLICAS: the record of body hash ARGV[1]
// and reply ARGV[2] as setRecordLua writes it (skipped when ARGV[1] is
// empty), then the reply XADDed to KEYS[2] as field ARGV[8], then the XACK
// of entry ARGV[7] of KEYS[3] for group ARGV[6]. The script builds the
// records from the body hash as startedPrefix, startedRecord and recordOf
// do, so that a message's command carries its reply and hash once (the
// bytes a message sends cost its worker CPU). Over the started record of
// the body that ends with ARGV[4] (when set: bundleNoted), the reply is
// ARGV[5] instead, recorded and replied, and the script returns 1; else it
// returns false, or, over a record that setRecordLua would return, that
// record, and nothing is written, replied or acked.
const finishLua = `
local reply, ret = ARGV[2], false
if ARGV[1] ~= '' then
  local prefix = '{"state":"started","body_hash":"' .. ARGV[1] .. '"'
  local cur = redis.call('GET', KEYS[1])
  if ARGV[4] ~= '' and cur == prefix .. ARGV[4] then
    reply, ret = ARGV[5], 1
  elseif cur and string.sub(cur, 1, string.len(prefix)) ~= prefix then
    return cur
  end
  redis.call('SET', KEYS[1], '{"body_hash":"' .. ARGV[1] .. '","reply":' .. reply .. '}', 'PX', ARGV[3])
end
redis.call('XADD', KEYS[2], '*', ARGV[8], reply)
redis.call('XACK', KEYS[3], ARGV[6], ARGV[7])
return ret
`

var finishSHA = func() string {
	sum := sha1.Sum([]byte(finishLua))
	return hex.EncodeToString(sum[:])
}()

// outcome is what handling one delivery decided.
type outcome struct {
	reply   messages.Reply
	replyTo string
	// key and bodyHash, when key is set, are where and what to record.
	key, bodyHash string
	// idKey, once the message id is read, is the key of its idempotency
	// record (key, when key is set): finishInOne names it, unwritten,
	// when there is nothing to record.
	idKey string
	// replyJSON, when set, is reply encoded (by encodeReply, or as
	// recorded), so that it is not encoded again.
	replyJSON string
	// answered says the reply is out and the entry acked already: the
	// claim's script repeated the recorded reply (claimRecord).
	answered bool
	// unclaimed says the message id was not claimed before the work
	// (answerDelete): writing the record is the claim, so another body's
	// record there refuses the message, and this body's recorded reply
	// makes it a duplicate.
	unclaimed bool
	// alt, when alt.replyJSON is set, is recorded and replied instead over
	// the started record of bodyHash that notes the bundle of a
	// delete_case_bundle (startedRecord(bodyHash, true)).
	alt altAnswer
}

// altAnswer is the other answer of an outcome: the outcome's reply with
// another result, encoded.
type altAnswer struct {
	result    json.RawMessage
	replyJSON string
}

// recordOf is the answered record of body hash bodyHash and encoded reply:
// the bytes json.Marshal(record{...}) gives (body_hash is hex).
func recordOf(bodyHash, reply string) string {
	return answeredHead + bodyHash + replyMember + reply + `}`
}

// encodeReply sets out.replyJSON, when not set yet.
func (out *outcome) encodeReply() error {
	if out.replyJSON != "" {
		return nil
	}
	var buf [256]byte
	raw, err := envelope.AppendReply(buf[:0], out.reply)
	if err != nil {
		return fmt.Errorf("encode the reply: %w", err)
	}
	out.replyJSON = string(raw)
	return nil
}

// recordArgs are the arguments of setRecordLua for out (its alt included),
// once its reply is encoded.
func (in *Intake) recordArgs(out *outcome) []string {
	args := []string{startedPrefix(out.bodyHash), recordOf(out.bodyHash, out.replyJSON), in.ttl}
	if out.alt.replyJSON != "" {
		args = append(args, startedRecord(out.bodyHash, true), recordOf(out.bodyHash, out.alt.replyJSON))
	}
	return args
}

// writeRecord writes the idempotency record of out over the started record
// of its body (keeping the reply of a record already there) and, when
// PYRULA_WAIT_REPLICAS is set, waits for the replicas. One script
// (setRecordLua) both writes the record and, when another delivery
// recorded first, returns that record. WAIT covers only the writes of its
// own connection, so with WAIT the record and the WAIT go over one
// dedicated connection; replication is one ordered stream, so the replicas
// then also hold every write made before the record (the bundle's journal
// writes, the run's submission) on that node: on a single Valkey, all of
// them; on a Valkey Cluster only those of the record's node (docs/operate.md,
// "Valkey Cluster"). Without WAIT the SET goes through the batcher.
func (in *Intake) writeRecord(ctx context.Context, out *outcome) error {
	if err := out.encodeReply(); err != nil {
		return err
	}
	args := in.recordArgs(out)
	if in.cfg.WaitReplicas <= 0 {
		return in.keep(out, in.setRecord(func(cmd valkey.Completed) valkey.ValkeyResult { return in.batch.Do(ctx, cmd) }, out.key, args))
	}
	// The script's result is kept (keep) once the connection is let go:
	// out stays with this call (a closure holding it would move it to the
	// heap, on the path of every message).
	var res valkey.ValkeyResult
	ran := false
	key := out.key
	err := in.client.Dedicated(func(c valkey.DedicatedClient) error {
		res, ran = in.setRecord(func(cmd valkey.Completed) valkey.ValkeyResult { return c.Do(ctx, cmd) }, key, args), true
		if err := res.Error(); err != nil && !valkey.IsValkeyNil(err) {
			return nil // keep fails with it
		}
		// WAIT's timeout is in milliseconds, and 0 would block for ever.
		timeout := max(in.cfg.WaitTimeout.Milliseconds(), 1)
		n, err := c.Do(ctx, in.client.B().Wait().Numreplicas(int64(in.cfg.WaitReplicas)).Timeout(timeout).Build()).AsInt64()
		if err != nil {
			return fmt.Errorf("wait for replicas: %w", err)
		}
		if n < int64(in.cfg.WaitReplicas) {
			return fmt.Errorf("wait for replicas: %d of %d acknowledged", n, in.cfg.WaitReplicas)
		}
		return nil
	})
	if ran {
		if kerr := in.keep(out, res); kerr != nil {
			return kerr
		}
	}
	return err
}

// keep takes what the recording script (setRecordLua or finishLua) gave
// for out: 1, out.alt was recorded; nil, out's reply was; a record, nothing
// was written, and out's reply becomes that record's when it is an
// answered record of out's body (another delivery recorded first). Over
// another body's record an unclaimed outcome is refused; a claimed one
// keeps its reply (another body's started record: a dead letter of a
// message that never claimed its id, whose holder records the reply).
func (in *Intake) keep(out *outcome, res valkey.ValkeyResult) error {
	if n, err := res.AsInt64(); err == nil && n == 1 && out.alt.replyJSON != "" {
		out.reply.Result, out.replyJSON = out.alt.result, out.alt.replyJSON
		return nil
	}
	prev, err := res.ToString()
	if valkey.IsValkeyNil(err) {
		return nil // written
	}
	if err != nil {
		return fmt.Errorf("write the idempotency record: %w", err)
	}
	var r record
	var replyJSON string
	if !strings.HasPrefix(prev, `{"state":"started"`) {
		if r, replyJSON, err = decodeRecord(prev); err != nil {
			return fmt.Errorf("decode the idempotency record of %s: %w", out.reply.MessageID, err)
		}
	}
	switch {
	case r.BodyHash == out.bodyHash:
		if out.unclaimed {
			in.report.Duplicate()
		}
		out.reply, out.replyJSON = r.Reply, replyJSON
	case out.unclaimed:
		out.reply.Status, out.reply.Code, out.reply.Result = messages.StatusRefused, messages.InvalidOverrides, nil
		out.reply.Message = fmt.Sprintf(reusedIDFormat, out.reply.MessageID)
		out.replyJSON = ""
	}
	return nil
}

// finishInOne is finish as one script (finishLua), on a single Valkey
// without PYRULA_WAIT_REPLICAS or traces. It reports whether the script
// replied and acked; when it did not (a record was there, which keep has
// taken into out), finish goes on step by step.
func (in *Intake) finishInOne(ctx context.Context, entryID string, out *outcome) (bool, error) {
	if err := out.encodeReply(); err != nil {
		return false, err
	}
	key, hash, noted := out.key, "", ""
	if key != "" {
		hash = out.bodyHash
		if out.alt.replyJSON != "" {
			noted = bundleNoted
		}
	} else if key = out.idKey; key == "" {
		key = in.recordKey(out.reply.MessageID) // a key of the namespace, not written
	}
	args := []string{hash, out.replyJSON, in.ttl, noted, out.alt.replyJSON, in.cfg.ConsumerGroup, entryID, messages.ReplyField}
	keys := []string{key, out.replyTo, in.cfg.CaseStream}
	res := in.batch.Do(ctx, in.client.B().Evalsha().Sha1(finishSHA).Numkeys(3).Key(keys...).Arg(args...).Build())
	if ve, ok := valkey.IsValkeyErr(res.Error()); ok && ve.IsNoScript() {
		res = in.batch.Do(ctx, in.client.B().Eval().Script(finishLua).Numkeys(3).Key(keys...).Arg(args...).Build())
	}
	if err := res.Error(); err != nil && !valkey.IsValkeyNil(err) {
		return false, fmt.Errorf("record, reply and ack: %w", err)
	}
	_, err := res.ToString()
	isRecord := err == nil // a record there: nothing written, replied or acked
	if err := in.keep(out, res); err != nil || isRecord {
		return false, err
	}
	in.report.Healthy()
	return true, nil
}

// recordKey is the key of a message id's idempotency record.
func (in *Intake) recordKey(messageID string) string {
	return in.cfg.Namespace + ":msg:{" + messageID + "}"
}

func (in *Intake) errorKey(messageID string) string {
	return in.recordKey(messageID) + ":error"
}

// inlineMessageBytes is the longest message a handler run as a task of the
// consumer's loop reads there; a longer one detaches first.
const inlineMessageBytes = 16 << 10

// handle handles one delivery of entry e: refuses it, answers it from its
// idempotency record, or does its work; then records, replies and acks. A
// transient failure leaves the entry pending, to be claimed again
// (consumer.Retry).
func (in *Intake) handle(ctx context.Context, e valkey.XRangeEntry, deliveries int64) consumer.Verdict {
	start := time.Now()
	if len(e.FieldValues[messages.MessageField]) > inlineMessageBytes {
		batch.Detach(ctx) // its reading and hashing: not on the consumer's loop
	}
	m := in.read(e)
	if deliveries == 1 {
		// Counted once, at its first delivery (1 only for an XREADGROUP of
		// new entries; reclaims and re-reads count more, 0 is unknown), so
		// that at rest the answered messages add up to the received ones.
		in.report.Received(in.typeOf(&m))
	}
	in.report.HandlingStarted()
	defer in.report.HandlingEnded()
	hctx, span := in.startStep(ctx, "handle")
	out, typ, err := in.decide(hctx, e, &m)
	endStep(span, err)
	if err != nil {
		in.noteMessage(ctx, &out, typ, err)
		if ctx.Err() != nil {
			in.logMessage(zap.InfoLevel, "handling interrupted by shutdown; the message stays pending", e.ID, &out, typ)
			return consumer.Retry(nil)
		}
		in.report.Transient(typ)
		in.logMessage(zap.WarnLevel, "transient failure; the message stays pending", e.ID, &out, typ, zap.Int64("deliveries", deliveries), zap.Error(err))
		if out.reply.MessageID != "" {
			in.noteError(ctx, out.reply.MessageID, err)
		}
		return consumer.Retry(err)
	}
	if err := in.finish(ctx, e.ID, &out); err != nil {
		in.noteMessage(ctx, &out, typ, err)
		in.report.Transient(typ)
		in.logMessage(zap.WarnLevel, "reply or ack failed; the message stays pending", e.ID, &out, typ, zap.Int64("deliveries", deliveries), zap.Error(err))
		if out.reply.MessageID != "" {
			in.noteError(ctx, out.reply.MessageID, err) // for its dead letter
		}
		return consumer.Retry(err)
	}
	in.noteMessage(ctx, &out, typ, nil)
	in.report.Answered(typ, out.reply.Status, time.Since(start))
	if out.reply.Code != "" {
		in.logMessage(zap.InfoLevel, "message answered", e.ID, &out, typ, zap.String("status", string(out.reply.Status)), zap.String("code", string(out.reply.Code)))
	} else {
		in.logMessage(zap.InfoLevel, "message answered", e.ID, &out, typ, zap.String("status", string(out.reply.Status)))
	}
	return consumer.Acked()
}

// logMessage logs msg at level with the message's fields (its entry id,
// message id and type) and more, passed to the line (cheaper than
// Logger.With on the path every message takes) and built only for a line
// logged, in a recycled slice (logFields).
func (in *Intake) logMessage(level zapcore.Level, msg, entryID string, out *outcome, typ string, more ...zap.Field) {
	ce := in.log.Check(level, msg)
	if ce == nil {
		return
	}
	p := logFields.Get().(*[]zap.Field)
	fields := append((*p)[:0], zap.String("entry_id", entryID), zap.String("message_id", out.reply.MessageID), zap.String("type", typ))
	fields = append(fields, more...)
	ce.Write(fields...)
	clear(fields) // what the fields point to is not kept
	*p = fields[:0]
	logFields.Put(p)
}

// logFields recycles the fields of logMessage's lines (*[]zap.Field): a
// zap core encodes, or copies, the fields of a line before its Write
// returns.
var logFields = sync.Pool{New: func() any { return new([]zap.Field) }}

// entryMessage is what handle reads of an entry before anything else, once
// for both the count of received messages (typeOf) and decide: its message
// field and, when there is one within PYRULA_MAX_MESSAGE_BYTES, the
// envelope read from it (envelope.ParseMessage, whose result is Parse's).
type entryMessage struct {
	raw string
	// has says the entry has a message field; parsed, that it was parsed
	// (msg and err are ParseMessage's).
	has, parsed bool
	msg         envelope.Message
	err         error
}

// read reads entry e's message (entryMessage).
func (in *Intake) read(e valkey.XRangeEntry) entryMessage {
	var m entryMessage
	m.raw, m.has = e.FieldValues[messages.MessageField]
	if m.has && len(m.raw) <= in.cfg.MaxMessageBytes {
		m.msg, m.err = envelope.ParseMessage(m.raw)
		m.parsed = true
	}
	return m
}

// decide works out the reply for entry e, whose message is m (doing the
// work when needed). Its error is a transient failure: nothing is replied
// or acked.
func (in *Intake) decide(ctx context.Context, e valkey.XRangeEntry, m *entryMessage) (outcome, string, error) {
	out := outcome{replyTo: in.cfg.ReplyStream}
	refuse := func(code messages.Code, format string, args ...any) (outcome, string, error) {
		out.reply.Status, out.reply.Code, out.reply.Message = messages.StatusRefused, code, fmt.Sprintf(format, args...)
		return out, string(out.reply.Type), nil
	}
	out.reply.EntryID = e.ID
	raw := m.raw
	if !m.has {
		return refuse(messages.InvalidOverrides, "entry %s has no %q field", e.ID, messages.MessageField)
	}
	if !m.parsed {
		return refuse(messages.InvalidOverrides, "entry %s is %d bytes, over PYRULA_MAX_MESSAGE_BYTES (%d); not read", e.ID, len(raw), in.cfg.MaxMessageBytes)
	}
	// The envelope without its body, which is read as text (m.msg.Body)
	// until the work needs it.
	env, err := messages.Envelope{MessageID: m.msg.MessageID, Type: messages.MessageType(m.msg.Type), ReplyTo: m.msg.ReplyTo}, m.err
	if err != nil {
		return refuse(messages.InvalidOverrides, "entry %s is not a JSON envelope: %v", e.ID, err)
	}
	if env.ReplyTo != "" {
		if env.ReplyTo == in.cfg.CaseStream {
			return refuse(messages.InvalidOverrides, "reply_to must not be the message stream")
		}
		if !usableReplyTo(env.ReplyTo) {
			// Never a stream named after what invalid bytes decode to: the
			// refusal goes to the default reply stream.
			return refuse(messages.InvalidOverrides, "entry %s: reply_to is not valid UTF-8 (or holds U+FFFD, what invalid UTF-8 and lone surrogate escapes decode to)", e.ID)
		}
		out.replyTo = env.ReplyTo
	}
	if err := checkMessageID(env.MessageID); err != nil {
		return refuse(messages.InvalidOverrides, "%v", err)
	}
	out.reply.MessageID, out.reply.Type, out.reply.EntryID = env.MessageID, env.Type, ""
	bodyHash, err := envelope.HashMessage(m.msg)
	if err != nil {
		return refuse(messages.InvalidOverrides, "body: %v", err)
	}
	key := in.recordKey(env.MessageID)
	out.idKey = key
	// A delete looks in its store before it claims the message id, so
	// that its claim notes a bundle found and, when there is nothing to
	// delete, the claim is the answer (deleteCaseBundle). A body it
	// refuses is refused after the claim, as every other message's; when
	// the store fails, the claim still answers a duplicate with its
	// recorded reply, and any other delivery fails with the store.
	var del deletion
	var delErr, storeErr error
	if env.Type == messages.DeleteCaseBundle {
		del, delErr = in.findBundle(ctx, m.msg.Body)
		if delErr != nil && messages.AsError(delErr) == nil {
			storeErr = delErr
		}
		if delErr == nil && !del.present {
			return in.answerDelete(out, key, bodyHash)
		}
	}
	// Claim the message id before any work: the started record of this
	// body, written only when the id has no record (SET NX GET). A
	// record of another body refuses this message; a recorded reply of
	// this body is repeated, no work; a started record of this body (a
	// delivery still working, or one that died) lets the work run again
	// (it is idempotent), and the first reply recorded is every
	// delivery's reply.
	// On a single Valkey without PYRULA_WAIT_REPLICAS or traces, the
	// claim repeats a recorded reply of this body itself (claimLua).
	cl, err := in.claimRecord(ctx, key, bodyHash, del.present, out.replyTo, e.ID)
	if err != nil {
		return out, string(env.Type), err
	}
	prev, found := cl.rec, cl.found
	if cl.answered {
		out = in.duplicate(out, prev.Reply, cl.replyJSON, key, bodyHash)
		out.answered = true
		return out, string(env.Type), nil
	}
	if found && prev.BodyHash != bodyHash {
		return refuse(messages.InvalidOverrides, reusedIDFormat, env.MessageID)
	}
	if found && prev.State != stateStarted {
		return in.duplicate(out, prev.Reply, cl.replyJSON, key, bodyHash), string(env.Type), nil
	}
	if storeErr != nil {
		return out, string(env.Type), storeErr
	}
	out.key, out.bodyHash = key, bodyHash
	env.Body = m.msg.Envelope().Body
	// The work (a store's, a save's, a run's submission) takes long or
	// blocks: a handler run as a task of the consumer's loop goes on on a
	// goroutine of its own.
	batch.Detach(ctx)
	var result any
	switch env.Type {
	case messages.DeleteCaseBundle:
		if delErr != nil {
			err = delErr
			break
		}
		result, err = in.deleteCaseBundle(ctx, del, claimed{key: key, bodyHash: bodyHash, bundlePresent: !found || prev.BundlePresent})
	case messages.SaveCase:
		result, err = in.saveCase(ctx, env.Body)
	case messages.StartRun:
		result, err = in.startRun(ctx, env)
	case messages.RunCase:
		result, err = in.runCase(ctx, env)
	case messages.RunSuite:
		result, err = in.runSuite(ctx, env)
	default:
		return refuse(messages.InvalidOverrides, "unknown message type %q", env.Type)
	}
	if me := messages.AsError(err); me != nil {
		return refuse(me.Code, "%s", me.Message)
	}
	if err != nil {
		return out, string(env.Type), err
	}
	raw2, err := envelope.EncodeResult(result)
	if err != nil {
		return out, string(env.Type), fmt.Errorf("encode the result: %w", err)
	}
	out.reply.Status, out.reply.Result = messages.StatusOK, raw2
	return out, string(env.Type), nil
}

// typeOf is the type the outcome of an entry whose message is m will be
// counted under by handle: "" for an entry that decide refuses before it
// reads the type (no message field, too large, not a JSON envelope,
// reply_to the message stream, unusable message_id), else its type as the
// envelope gives it. It mirrors the order of decide's checks, so that
// received and answered messages add up by type too, and it allocates
// nothing: the envelope is read once, for it and decide (read).
func (in *Intake) typeOf(m *entryMessage) string {
	if !m.parsed || m.err != nil || m.msg.ReplyTo == in.cfg.CaseStream || checkMessageID(m.msg.MessageID) != nil {
		return ""
	}
	return m.msg.Type
}

// maxMessageIDBytes is the longest message_id accepted.
const maxMessageIDBytes = 200

// usableReplyTo reports whether a decoded reply_to can name a stream: valid
// UTF-8 without U+FFFD, which is what encoding/json makes of invalid bytes
// and lone surrogate escapes (two different reply_to would name one stream).
func usableReplyTo(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, utf8.RuneError)
}

// checkMessageID accepts 1 to 200 bytes of valid UTF-8, printable
// characters without braces or spaces, so that the id is safe inside a
// hash-tagged key. U+FFFD is refused too: encoding/json decodes invalid
// UTF-8 and lone surrogate escapes to it, so two different ids would
// otherwise become one.
func checkMessageID(id string) error {
	if id == "" {
		return errors.New("message_id is missing")
	}
	if len(id) > maxMessageIDBytes {
		return fmt.Errorf("message_id is longer than %d bytes", maxMessageIDBytes)
	}
	if !utf8.ValidString(id) || strings.ContainsRune(id, utf8.RuneError) {
		return errors.New("message_id is not valid UTF-8 (or holds U+FFFD, what invalid UTF-8 and lone surrogate escapes decode to)")
	}
	for _, r := range id {
		if r <= ' ' || r == 0x7f || r == '{' || r == '}' {
			return fmt.Errorf("message_id %q has a space, a control character or a brace", id)
		}
	}
	return nil
}

// claim is what claimRecord found at the idempotency record key: the
// record there, if any (found), with its reply's text when decodeRecord
// gives it; answered says that the claim's script (claimLua) published
// that reply and acked the entry (the record then lacks the reply's
// result, and replyJSON is empty).
type claim struct {
	rec             record
	replyJSON       string
	found, answered bool
}

// claimLua is claimRecord in one script on a single Valkey without
// PYRULA_WAIT_REPLICAS or traces (oneWrite): SET NX GET of the started
// record of body hash ARGV[1] (its started prefix, then ARGV[3]: "} or
// bundleNoted; startedRecord) at KEYS[1], PX ARGV[2], and the answer of a
// duplicate as finishLua gives it, in the same script. Over an answered
// record of the body (beginning {"body_hash":"<ARGV[1]>","reply":, as
// recordOf writes it), it XADDs the recorded reply (what follows, without
// the record's closing brace) to KEYS[2] as field ARGV[6] and XACKs entry
// ARGV[5] of KEYS[3] for group ARGV[4], and returns the record without its
// reply's result in a one-element array (what the caller reads of it: the
// reply's status, code and message, which precede the result); over any
// other record it returns the record, writing nothing; where there is none
// it writes the started record and returns false.
const claimLua = `
local cur = redis.call('GET', KEYS[1])
if not cur then
  redis.call('SET', KEYS[1], '{"state":"started","body_hash":"' .. ARGV[1] .. '"' .. ARGV[3], 'PX', ARGV[2])
  return false
end
local head = '{"body_hash":"' .. ARGV[1] .. '","reply":'
local n = string.len(head)
if string.sub(cur, 1, n) == head and string.sub(cur, -1) == '}' then
  redis.call('XADD', KEYS[2], '*', ARGV[6], string.sub(cur, n + 1, -2))
  redis.call('XACK', KEYS[3], ARGV[4], ARGV[5])
  local r = string.find(cur, ',"result":', n + 1, true)
  if r then
    cur = string.sub(cur, 1, r - 1) .. '}}'
  end
  return {cur}
end
return cur
`

var claimSHA = func() string {
	sum := sha1.Sum([]byte(claimLua))
	return hex.EncodeToString(sum[:])
}()

// claimRecord writes the started record of bodyHash (noting the bundle of a
// delete_case_bundle found when bundlePresent) at idempotency record key
// unless there is one (SET NX GET), and returns the one there if any. When
// the intake finishes a message in one script (oneWrite), the claim is a
// script too (claimLua), which also answers over an answered record of
// bodyHash: it publishes the recorded reply to replyTo and acks entry
// entryID, so that a duplicate takes one round trip, as finishInOne's
// would (the record was written before that reply, as before every
// reply, and the ack follows it).
func (in *Intake) claimRecord(ctx context.Context, key, bodyHash string, bundlePresent bool, replyTo, entryID string) (claim, error) {
	var res valkey.ValkeyResult
	if in.oneWrite {
		// The script builds the started record from the body hash.
		tail := `}`
		if bundlePresent {
			tail = bundleNoted
		}
		keys := []string{key, replyTo, in.cfg.CaseStream}
		args := []string{bodyHash, in.ttl, tail, in.cfg.ConsumerGroup, entryID, messages.ReplyField}
		res = in.batch.Do(ctx, in.client.B().Evalsha().Sha1(claimSHA).Numkeys(3).Key(keys...).Arg(args...).Build())
		if ve, ok := valkey.IsValkeyErr(res.Error()); ok && ve.IsNoScript() {
			res = in.batch.Do(ctx, in.client.B().Eval().Script(claimLua).Numkeys(3).Key(keys...).Arg(args...).Build())
		}
	} else {
		res = in.batch.Do(ctx, in.client.B().Set().Key(key).Value(startedRecord(bodyHash, bundlePresent)).Nx().Get().Px(in.cfg.IdempotencyTTL).Build())
	}
	var cl claim
	s, err := res.ToString()
	if arr, aerr := res.ToArray(); aerr == nil && len(arr) == 1 {
		s, err = arr[0].ToString()
		cl.answered = true
	}
	if valkey.IsValkeyNil(err) {
		return claim{}, nil
	}
	if err != nil {
		return claim{}, fmt.Errorf("claim the idempotency record %s: %w", key, err)
	}
	if cl.rec, cl.replyJSON, err = decodeRecord(s); err != nil {
		// Answered (a record only a hand could have damaged): the reply
		// is out and the entry acked, and the failure is reported.
		return claim{}, fmt.Errorf("decode the idempotency record %s: %w", key, err)
	}
	cl.found = true
	if cl.answered {
		// The reply is out; what came back of it lacks its result.
		cl.replyJSON = ""
		in.report.Healthy()
	}
	return cl, nil
}

// duplicate is out answered with reply (encoded: replyJSON, when not ""),
// the recorded reply of its message id (key) and body. With PYRULA_WAIT_REPLICAS, finish goes through the
// record again (it is there, so it keeps this reply) so that WAIT holds a
// duplicate's ack too: the first delivery may have failed in that WAIT.
// Without it there is nothing to write: reply and ack.
func (in *Intake) duplicate(out outcome, reply messages.Reply, replyJSON string, key, bodyHash string) outcome {
	in.report.Duplicate()
	out.reply, out.replyJSON = reply, replyJSON
	if in.cfg.WaitReplicas > 0 {
		out.key, out.bodyHash = key, bodyHash
	}
	return out
}

// finish records the reply (when out.key is set; if another delivery
// recorded one first, its reply is used, so every reply of a message id is
// identical), waits for replicas when configured, publishes the reply and
// acks the entry, unless the claim did both (out.answered). It runs to the end even when ctx is cancelled. On a
// single Valkey without PYRULA_WAIT_REPLICAS or traces the three are one
// script (finishInOne): all happen, or none. Otherwise the record, the
// reply stream and the message stream are three keys of three slots (on a
// Valkey Cluster, possibly three nodes), the replicas are waited for after
// each, or each step has its span: three commands, each sent after the
// previous one succeeded. A crash or a failure between two leaves the
// entry pending, and its redelivery finds the record and publishes the
// same reply (a reply stream may then hold it twice; clients take the
// first of a message id).
func (in *Intake) finish(ctx context.Context, entryID string, out *outcome) error {
	if out.answered {
		return nil // by the claim (claimRecord)
	}
	if in.oneWrite {
		// The batcher's round trips run to their end whatever ctx says
		// (batch.Batcher.Do).
		if done, err := in.finishInOne(ctx, entryID, out); done || err != nil {
			return err
		}
		out.key = "" // a record was there, and out holds what to reply
	}
	ctx = context.WithoutCancel(ctx)
	if in.cfg.WaitReplicas > 0 {
		// Waiting for replicas blocks: not on the consumer's loop (a task
		// goes on on a goroutine of its own).
		batch.Detach(ctx)
		// The writes that wait for replicas go on connections of their
		// own; the batcher bounds its round trips itself (Config.Timeout).
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, finishTimeout)
		defer cancel()
	}
	if out.key != "" {
		sctx, span := in.startStep(ctx, "record")
		err := in.writeRecord(sctx, out)
		if endStep(span, err); err != nil {
			return err
		}
	}
	sctx, span := in.startStep(ctx, "reply")
	err := in.publish(sctx, out)
	if endStep(span, err); err != nil {
		return err
	}
	sctx, span = in.startStep(ctx, "ack")
	err = in.ackEntry(sctx, entryID)
	endStep(span, err)
	return err
}

// publish XADDs out's reply to its reply stream.
func (in *Intake) publish(ctx context.Context, out *outcome) error {
	if out.replyJSON == "" {
		raw, err := envelope.EncodeReply(out.reply)
		if err != nil {
			return fmt.Errorf("encode the reply: %w", err)
		}
		out.replyJSON = string(raw)
	}
	cmd := in.client.B().Xadd().Key(out.replyTo).Id("*").FieldValue().FieldValue(messages.ReplyField, out.replyJSON).Build()
	var err error
	if in.replicas.On() {
		// The reply on the replicas before the ack: a failover of the
		// reply stream's node must not lose a reply whose message is acked.
		_, err = in.replicas.Do(ctx, cmd)
	} else {
		err = in.batch.Do(ctx, cmd).Error()
	}
	if err != nil {
		return fmt.Errorf("publish the reply to %s: %w", out.replyTo, err)
	}
	return nil
}

// ackEntry XACKs entry entryID of the message stream.
func (in *Intake) ackEntry(ctx context.Context, entryID string) error {
	if err := in.batch.Ack(ctx, in.cfg.CaseStream, in.cfg.ConsumerGroup, entryID); err != nil {
		return fmt.Errorf("ack %s: %w", entryID, err)
	}
	in.report.Healthy()
	return nil
}

// noteError keeps the last transient error of a message id, for its dead
// letter. Best effort.
func (in *Intake) noteError(ctx context.Context, messageID string, cause error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	err := in.batch.Do(ctx, in.client.B().Set().Key(in.errorKey(messageID)).Value(cause.Error()).Px(in.cfg.IdempotencyTTL).Build()).Error()
	if err != nil {
		in.log.Warn("keep the last error", zap.String("message_id", messageID), zap.Error(err))
	}
}

// deadLetter ends entry e, delivered deliveries times: it decides the
// message's one reply, publishes it, adds the entry to <stream>:dead with
// the last error (what the last failed delivery kept with noteError) and
// acks it. The reply is an error reply naming that error, recorded so that
// a resend gets it too; but when the message's work already succeeded and
// its reply is recorded (its deliveries failed while publishing the reply,
// acking, or waiting for replicas), that recorded reply is the reply, as
// for every other duplicate: a message id never gets two different
// replies. The dead letter's reply_status field says which was sent. The
// reply goes out before the dead letter, so a reply that cannot be
// published leaves the message pending without adding dead letters. It
// reports whether the entry was acked.
func (in *Intake) deadLetter(ctx context.Context, e valkey.XRangeEntry, deliveries int64) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	raw := e.FieldValues[messages.MessageField]
	var env messages.Envelope
	_ = json.Unmarshal([]byte(raw), &env) // it parsed when it failed; a garbled one still gets a dead letter
	validID := checkMessageID(env.MessageID) == nil
	lastErr := "unknown (the failure was not recorded)"
	if validID {
		if s, err := in.batch.Do(ctx, in.client.B().Get().Key(in.errorKey(env.MessageID)).Build()).ToString(); err == nil {
			lastErr = s
		}
	}
	log := in.log.With(zap.String("entry_id", e.ID), zap.String("message_id", env.MessageID), zap.String("type", string(env.Type)))
	dead := in.cfg.CaseStream + ":dead"
	out := outcome{replyTo: in.cfg.ReplyStream}
	if env.ReplyTo != "" && env.ReplyTo != in.cfg.CaseStream && usableReplyTo(env.ReplyTo) {
		out.replyTo = env.ReplyTo
	}
	out.reply = messages.Reply{MessageID: env.MessageID, Type: env.Type, Status: messages.StatusError, Code: messages.RuntimeError,
		Message: fmt.Sprintf("dead-lettered to %s after %d deliveries; last error: %s", dead, deliveries, lastErr)}
	if !validID {
		out.reply.EntryID = e.ID
	} else if h, err := envelope.HashBody(env); err == nil {
		// Record first: this decides the reply (a recorded one wins).
		out.key, out.bodyHash = in.recordKey(env.MessageID), h
		if err := in.writeRecord(ctx, &out); err != nil {
			log.Warn("record the reply of a dead letter; the message stays pending", zap.Error(err))
			return false
		}
		out.key = ""
	}
	if err := in.publish(ctx, &out); err != nil {
		log.Warn("reply to a dead letter; the message stays pending", zap.Error(err))
		return false
	}
	err := in.batch.Do(ctx, in.client.B().Xadd().Key(dead).Id("*").FieldValue().
		FieldValue(messages.MessageField, raw).FieldValue("error", lastErr).
		FieldValue("deliveries", strconv.FormatInt(deliveries, 10)).FieldValue("entry_id", e.ID).
		FieldValue("reply_status", string(out.reply.Status)).Build()).Error()
	if err != nil {
		log.Warn("write the dead letter; the message stays pending", zap.Error(err))
		return false
	}
	if err := in.ackEntry(ctx, e.ID); err != nil {
		log.Warn("ack a dead letter; the message stays pending", zap.Error(err))
		return false
	}
	in.report.DeadLettered(string(env.Type), out.reply.Status)
	log.Warn("message dead-lettered", zap.String("code", string(messages.RuntimeError)), zap.Int64("deliveries", deliveries),
		zap.String("reply_status", string(out.reply.Status)))
	return true
}
