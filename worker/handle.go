package worker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap"

	"github.com/pyrula/caseworker/messages"
)

// finishTimeout bounds the writes that end a message (record, reply, ack),
// which run even when the worker is stopping.
const finishTimeout = 10 * time.Second

// record is the idempotency record of a message id, a JSON string at
// <ns>:msg:{<message_id>}.
type record struct {
	// BodyHash is the SHA-256 of the type and the canonical JSON of the body.
	BodyHash string         `json:"body_hash"`
	Reply    messages.Reply `json:"reply"`
}

// outcome is what handling one delivery decided.
type outcome struct {
	reply   messages.Reply
	replyTo string
	// key and bodyHash, when key is set, are where and what to record.
	key, bodyHash string
}

// writeRecord writes the idempotency record of out (keeping the reply of a
// record already there) and, when PYRULA_WAIT_REPLICAS is set, waits for the
// replicas. WAIT covers only the writes of its own connection, so the record
// and the WAIT go over one dedicated connection; replication is one ordered
// stream, so the replicas then also hold every write made before the record
// (the bundle's journal writes, the run's submission).
func (w *Worker) writeRecord(ctx context.Context, out *outcome) error {
	rec, err := json.Marshal(record{BodyHash: out.bodyHash, Reply: out.reply})
	if err != nil {
		return err
	}
	write := func(c interface {
		Do(context.Context, valkey.Completed) valkey.ValkeyResult
	}) error {
		set, err := c.Do(ctx, w.client.B().Set().Key(out.key).Value(string(rec)).Nx().Px(w.cfg.IdempotencyTTL).Build()).ToString()
		if valkey.IsValkeyNil(err) {
			prev, found, lerr := w.lookup(ctx, out.reply.MessageID)
			if lerr != nil {
				return lerr
			}
			if found && prev.BodyHash == out.bodyHash {
				out.reply = prev.Reply
			}
		} else if err != nil || set != "OK" {
			return fmt.Errorf("write the idempotency record: %w", err)
		}
		if w.cfg.WaitReplicas <= 0 {
			return nil
		}
		n, err := c.Do(ctx, w.client.B().Wait().Numreplicas(int64(w.cfg.WaitReplicas)).Timeout(5000).Build()).AsInt64()
		if err != nil {
			return fmt.Errorf("wait for replicas: %w", err)
		}
		if n < int64(w.cfg.WaitReplicas) {
			return fmt.Errorf("wait for replicas: %d of %d acknowledged", n, w.cfg.WaitReplicas)
		}
		return nil
	}
	if w.cfg.WaitReplicas <= 0 {
		return write(w.client)
	}
	return w.client.Dedicated(func(c valkey.DedicatedClient) error { return write(c) })
}

// recordKey is the key of a message id's idempotency record.
func (w *Worker) recordKey(messageID string) string {
	return w.cfg.Namespace + ":msg:{" + messageID + "}"
}

func (w *Worker) errorKey(messageID string) string {
	return w.recordKey(messageID) + ":error"
}

// handle handles one delivery of entry e: refuses it, answers it from its
// idempotency record, or does its work; then records, replies and acks. A
// transient failure leaves the entry pending for the reclaim loop.
func (w *Worker) handle(ctx context.Context, e valkey.XRangeEntry, deliveries int64) {
	start := time.Now()
	w.metrics.inFlight.Inc()
	defer w.metrics.inFlight.Dec()
	out, typ, err := w.decide(ctx, e)
	log := w.log.With(zap.String("entry_id", e.ID), zap.String("message_id", out.reply.MessageID), zap.String("type", typ))
	if err != nil {
		if ctx.Err() != nil {
			log.Info("handling interrupted by shutdown; the message stays pending")
			return
		}
		w.metrics.transient.WithLabelValues(typeLabel(typ)).Inc()
		log.Warn("transient failure; the message stays pending", zap.Int64("deliveries", deliveries), zap.Error(err))
		if out.reply.MessageID != "" {
			w.noteError(ctx, out.reply.MessageID, err)
		}
		return
	}
	if err := w.finish(ctx, e.ID, &out); err != nil {
		w.metrics.transient.WithLabelValues(typeLabel(typ)).Inc()
		log.Warn("reply or ack failed; the message stays pending", zap.Error(err))
		return
	}
	w.metrics.messages.WithLabelValues(typeLabel(typ), string(out.reply.Status)).Inc()
	w.metrics.duration.WithLabelValues(typeLabel(typ)).Observe(time.Since(start).Seconds())
	fields := []zap.Field{zap.String("status", string(out.reply.Status))}
	if out.reply.Code != "" {
		fields = append(fields, zap.String("code", string(out.reply.Code)))
	}
	log.Info("message answered", fields...)
}

// decide works out the reply for entry e (doing the work when needed). Its
// error is a transient failure: nothing is replied or acked.
func (w *Worker) decide(ctx context.Context, e valkey.XRangeEntry) (outcome, string, error) {
	out := outcome{replyTo: w.cfg.ReplyStream}
	refuse := func(code messages.Code, format string, args ...any) (outcome, string, error) {
		out.reply.Status, out.reply.Code, out.reply.Message = messages.StatusRefused, code, fmt.Sprintf(format, args...)
		return out, string(out.reply.Type), nil
	}
	out.reply.EntryID = e.ID
	raw, ok := e.FieldValues[messages.MessageField]
	if !ok {
		return refuse(messages.InvalidOverrides, "entry %s has no %q field", e.ID, messages.MessageField)
	}
	if len(raw) > w.cfg.MaxMessageBytes {
		return refuse(messages.InvalidOverrides, "entry %s is %d bytes, over PYRULA_MAX_MESSAGE_BYTES (%d); not read", e.ID, len(raw), w.cfg.MaxMessageBytes)
	}
	var env messages.Envelope
	if err := json.Unmarshal([]byte(raw), &env); err != nil {
		return refuse(messages.InvalidOverrides, "entry %s is not a JSON envelope: %v", e.ID, err)
	}
	if env.ReplyTo != "" {
		if env.ReplyTo == w.cfg.CaseStream {
			return refuse(messages.InvalidOverrides, "reply_to must not be the message stream")
		}
		out.replyTo = env.ReplyTo
	}
	if err := checkMessageID(env.MessageID); err != nil {
		return refuse(messages.InvalidOverrides, "%v", err)
	}
	out.reply.MessageID, out.reply.Type, out.reply.EntryID = env.MessageID, env.Type, ""
	bodyHash, err := hashBody(env)
	if err != nil {
		return refuse(messages.InvalidOverrides, "body: %v", err)
	}
	// A redelivery or a duplicate send: the recorded reply, no work.
	prev, found, err := w.lookup(ctx, env.MessageID)
	if err != nil {
		return out, string(env.Type), err
	}
	if found {
		if prev.BodyHash != bodyHash {
			return refuse(messages.InvalidOverrides, "message_id %s was already used with a different body", env.MessageID)
		}
		w.metrics.duplicates.Inc()
		// finish goes through the record again (it is there, so it keeps
		// this reply) so that PYRULA_WAIT_REPLICAS holds a duplicate's ack
		// too: the first delivery may have failed in that WAIT.
		out.reply = prev.Reply
		out.key, out.bodyHash = w.recordKey(env.MessageID), bodyHash
		return out, string(env.Type), nil
	}
	out.key, out.bodyHash = w.recordKey(env.MessageID), bodyHash
	var result any
	switch env.Type {
	case messages.DeleteCaseBundle:
		result, err = w.deleteCaseBundle(ctx, env.Body)
	case messages.SaveCase:
		result, err = w.saveCase(ctx, env.Body)
	case messages.StartRun:
		result, err = w.startRun(ctx, env)
	case messages.RunCase:
		result, err = w.runCase(ctx, env)
	default:
		return refuse(messages.InvalidOverrides, "unknown message type %q", env.Type)
	}
	if me := messages.AsError(err); me != nil {
		return refuse(me.Code, "%s", me.Message)
	}
	if err != nil {
		return out, string(env.Type), err
	}
	raw2, err := json.Marshal(result)
	if err != nil {
		return out, string(env.Type), fmt.Errorf("encode the result: %w", err)
	}
	out.reply.Status, out.reply.Result = messages.StatusOK, raw2
	return out, string(env.Type), nil
}

// checkMessageID accepts 1 to 200 printable characters without braces or
// spaces, so that the id is safe inside a hash-tagged key.
func checkMessageID(id string) error {
	if id == "" {
		return errors.New("message_id is missing")
	}
	if len(id) > 200 {
		return errors.New("message_id is longer than 200 bytes")
	}
	for _, r := range id {
		if r <= ' ' || r == 0x7f || r == '{' || r == '}' {
			return fmt.Errorf("message_id %q has a space, a control character or a brace", id)
		}
	}
	return nil
}

// hashBody is the SHA-256 of the message type and the canonical JSON of its
// body (keys sorted, numbers as written), so that a resend with other
// spacing or key order is the same message.
func hashBody(env messages.Envelope) (string, error) {
	var v any
	if len(bytes.TrimSpace(env.Body)) > 0 {
		d := json.NewDecoder(bytes.NewReader(env.Body))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			return "", err
		}
	}
	canon, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write([]byte(env.Type))
	h.Write([]byte{0})
	h.Write(canon)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// lookup reads a message id's idempotency record.
func (w *Worker) lookup(ctx context.Context, messageID string) (record, bool, error) {
	s, err := w.client.Do(ctx, w.client.B().Get().Key(w.recordKey(messageID)).Build()).ToString()
	if valkey.IsValkeyNil(err) {
		return record{}, false, nil
	}
	if err != nil {
		return record{}, false, fmt.Errorf("read the idempotency record of %s: %w", messageID, err)
	}
	var r record
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return record{}, false, fmt.Errorf("decode the idempotency record of %s: %w", messageID, err)
	}
	return r, true, nil
}

// finish records the reply (when out.key is set; if another delivery
// recorded one first, its reply is used, so every reply of a message id is
// identical), waits for replicas when configured, publishes the reply and
// acks the entry. It runs to the end even when ctx is cancelled.
func (w *Worker) finish(ctx context.Context, entryID string, out *outcome) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	if out.key != "" {
		if err := w.writeRecord(ctx, out); err != nil {
			return err
		}
	}
	raw, err := json.Marshal(out.reply)
	if err != nil {
		return err
	}
	if err := w.client.Do(ctx, w.client.B().Xadd().Key(out.replyTo).Id("*").FieldValue().FieldValue(messages.ReplyField, string(raw)).Build()).Error(); err != nil {
		return fmt.Errorf("publish the reply to %s: %w", out.replyTo, err)
	}
	if err := w.client.Do(ctx, w.client.B().Xack().Key(w.cfg.CaseStream).Group(w.cfg.ConsumerGroup).Id(entryID).Build()).Error(); err != nil {
		return fmt.Errorf("ack %s: %w", entryID, err)
	}
	w.healthy.Store(true)
	return nil
}

// noteError keeps the last transient error of a message id, for its dead
// letter. Best effort.
func (w *Worker) noteError(ctx context.Context, messageID string, cause error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	err := w.client.Do(ctx, w.client.B().Set().Key(w.errorKey(messageID)).Value(cause.Error()).Px(w.cfg.IdempotencyTTL).Build()).Error()
	if err != nil {
		w.log.Warn("keep the last error", zap.String("message_id", messageID), zap.Error(err))
	}
}

// deadLetter moves entry e, delivered deliveries times, to <stream>:dead
// with its last error, replies error (recorded, so a resend gets the same
// reply) and acks it.
func (w *Worker) deadLetter(ctx context.Context, e valkey.XRangeEntry, deliveries int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	raw := e.FieldValues[messages.MessageField]
	var env messages.Envelope
	_ = json.Unmarshal([]byte(raw), &env) // it parsed when it failed; a garbled one still gets a dead letter
	lastErr := "unknown (the failure was not recorded)"
	if checkMessageID(env.MessageID) == nil {
		if s, err := w.client.Do(ctx, w.client.B().Get().Key(w.errorKey(env.MessageID)).Build()).ToString(); err == nil {
			lastErr = s
		}
	}
	log := w.log.With(zap.String("entry_id", e.ID), zap.String("message_id", env.MessageID), zap.String("type", string(env.Type)))
	dead := w.cfg.CaseStream + ":dead"
	err := w.client.Do(ctx, w.client.B().Xadd().Key(dead).Id("*").FieldValue().
		FieldValue(messages.MessageField, raw).FieldValue("error", lastErr).
		FieldValue("deliveries", strconv.FormatInt(deliveries, 10)).FieldValue("entry_id", e.ID).Build()).Error()
	if err != nil {
		log.Warn("write the dead letter; the message stays pending", zap.Error(err))
		return
	}
	out := outcome{replyTo: w.cfg.ReplyStream}
	if env.ReplyTo != "" && env.ReplyTo != w.cfg.CaseStream {
		out.replyTo = env.ReplyTo
	}
	out.reply = messages.Reply{MessageID: env.MessageID, Type: env.Type, Status: messages.StatusError, Code: messages.RuntimeError,
		Message: fmt.Sprintf("dead-lettered to %s after %d deliveries; last error: %s", dead, deliveries, lastErr)}
	if checkMessageID(env.MessageID) == nil {
		if h, err := hashBody(env); err == nil {
			out.key, out.bodyHash = w.recordKey(env.MessageID), h
		}
	} else {
		out.reply.EntryID = e.ID
	}
	if err := w.finish(ctx, e.ID, &out); err != nil {
		log.Warn("reply to a dead letter; the message stays pending", zap.Error(err))
		return
	}
	w.metrics.deadLetters.Inc()
	w.metrics.messages.WithLabelValues(typeLabel(string(env.Type)), string(out.reply.Status)).Inc()
	log.Warn("message dead-lettered", zap.String("code", string(messages.RuntimeError)), zap.Int64("deliveries", deliveries))
}
