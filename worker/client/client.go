// Package client is the platform side of the worker protocol (docs/protocol.md):
// it sends messages to the case stream, waits for their replies on a reply
// stream and follows a run's events to its end. `pyrula enqueue`, `worker
// demo` and the worker's tests use it; the Cloud platform does the same
// with its own Valkey client.
//
// client imports journal (event types), messages (wire types) and
// internal/tracing (the trace context's fields); never worker, cli or cmd,
// so that a platform process needs nothing of the worker to talk to it.
package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/tracing"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/messages"
)

// ErrRunGone is returned by Follow when the run's keys are not in Valkey
// (never submitted there, or expired after completed_ttl): its events can
// no longer be followed live.
var ErrRunGone = errors.New("client: the run is not in Valkey")

// pollBlock is how long one blocking XREAD waits before the caller's
// context and, for Follow, the run's status are checked again.
const pollBlock = time.Second

// Options name the streams; zero fields take the worker's defaults.
type Options struct {
	// Namespace is the worker's PYRULA_NAMESPACE (journal.DefaultNamespace).
	Namespace string
	// CaseStream is the worker's PYRULA_CASE_STREAM (<ns>:case-messages).
	CaseStream string
	// ReplyStream is where replies are asked for, as each message's
	// reply_to (<ns>:case-replies, the worker's default reply stream).
	ReplyStream string
}

// Client sends messages and reads replies and run events. It is safe for
// concurrent use; it does not own the valkey client.
type Client struct {
	c    valkey.Client
	opts Options
}

// New returns a Client over c. It fails only for an invalid namespace or
// equal case and reply streams.
func New(c valkey.Client, opts Options) (*Client, error) {
	if opts.Namespace == "" {
		opts.Namespace = journal.DefaultNamespace
	}
	if err := journal.CheckNamespace(opts.Namespace); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if opts.CaseStream == "" {
		opts.CaseStream = opts.Namespace + ":case-messages"
	}
	if opts.ReplyStream == "" {
		opts.ReplyStream = opts.Namespace + ":case-replies"
	}
	if opts.CaseStream == opts.ReplyStream {
		return nil, fmt.Errorf("client: the reply stream must differ from the case stream %s", opts.CaseStream)
	}
	return &Client{c: c, opts: opts}, nil
}

// Options returns the client's options with their defaults filled in.
func (c *Client) Options() Options { return c.opts }

// Message is what Send sends.
type Message struct {
	// MessageID names the message; empty means a new random id
	// ("msg_" and 32 hex digits). Resending an id gets the same reply.
	MessageID string
	// Type is the message type.
	Type messages.MessageType
	// Body is the type's body, a JSON object.
	Body json.RawMessage
}

// Sent is a message that was sent: what Reply needs to find its reply.
type Sent struct {
	// MessageID is the message's id.
	MessageID string `json:"message_id"`
	// Type is the message's type.
	Type messages.MessageType `json:"type"`
	// EntryID is the message's entry id on the case stream, which names a
	// message refused before its id could be read.
	EntryID string `json:"entry_id"`
	// Stream is the case stream it was added to.
	Stream string `json:"stream"`
	// ReplyTo is the stream its reply goes to.
	ReplyTo string `json:"reply_to"`
	// from is the last entry id of ReplyTo before the message was sent:
	// its reply comes after it.
	from string
}

// Send adds m to the case stream as an envelope whose reply_to is the
// client's reply stream, after noting where that stream ends, so that
// Reply reads only what comes after. The body must be a JSON object (or
// empty, sent as null). When ctx holds an OpenTelemetry span context, the
// entry carries it (traceparent, tracestate), so that the worker's spans of
// the message and of the run it submits continue the sender's trace.
func (c *Client) Send(ctx context.Context, m Message) (Sent, error) {
	if m.MessageID == "" {
		m.MessageID = NewMessageID()
	}
	body := m.Body
	if len(strings.TrimSpace(string(body))) == 0 {
		body = json.RawMessage("null")
	} else if !json.Valid(body) {
		return Sent{}, fmt.Errorf("client: send %s %s: the body is not valid JSON", m.Type, m.MessageID)
	}
	env, err := json.Marshal(messages.Envelope{MessageID: m.MessageID, Type: m.Type, ReplyTo: c.opts.ReplyStream, Body: body})
	if err != nil {
		return Sent{}, fmt.Errorf("client: send %s %s: %w", m.Type, m.MessageID, err)
	}
	from, err := c.lastID(ctx, c.opts.ReplyStream)
	if err != nil {
		return Sent{}, fmt.Errorf("client: send %s %s: read the end of %s: %w", m.Type, m.MessageID, c.opts.ReplyStream, err)
	}
	fields := c.c.B().Xadd().Key(c.opts.CaseStream).Id("*").FieldValue().FieldValue(messages.MessageField, string(env))
	if tp, ts := tracing.Traceparent(ctx); tp != "" {
		// The worker's spans of the message continue the sender's trace.
		fields = fields.FieldValue(tracing.TraceparentField, tp)
		if ts != "" {
			fields = fields.FieldValue(tracing.TracestateField, ts)
		}
	}
	id, err := c.c.Do(ctx, fields.Build()).ToString()
	if err != nil {
		return Sent{}, fmt.Errorf("client: send %s %s to %s: %w", m.Type, m.MessageID, c.opts.CaseStream, err)
	}
	return Sent{MessageID: m.MessageID, Type: m.Type, EntryID: id, Stream: c.opts.CaseStream, ReplyTo: c.opts.ReplyStream, from: from}, nil
}

// lastID is the id of the last entry of stream, "0-0" when it is empty or
// missing.
func (c *Client) lastID(ctx context.Context, stream string) (string, error) {
	entries, err := c.c.Do(ctx, c.c.B().Xrevrange().Key(stream).End("+").Start("-").Count(1).Build()).AsXRange()
	if err != nil {
		return "", err
	}
	if len(entries) == 0 {
		return "0-0", nil
	}
	return entries[0].ID, nil
}

// Reply waits for the reply of s: the first reply on s.ReplyTo after the
// send whose message_id is s.MessageID (or, for a message refused before
// its id could be read, whose entry_id is s.EntryID). Replies of other
// messages on the same stream are skipped. It returns when the reply
// arrives or ctx is done (ctx.Err(), wrapped).
func (c *Client) Reply(ctx context.Context, s Sent) (messages.Reply, error) {
	last := s.from
	if last == "" {
		last = "0-0"
	}
	for {
		if err := ctx.Err(); err != nil {
			return messages.Reply{}, fmt.Errorf("client: wait for the reply of %s: %w", s.MessageID, err)
		}
		res, err := c.c.Do(ctx, c.c.B().Xread().Count(100).Block(pollBlock.Milliseconds()).
			Streams().Key(s.ReplyTo).Id(last).Build()).AsXRead()
		if valkey.IsValkeyNil(err) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return messages.Reply{}, fmt.Errorf("client: wait for the reply of %s: %w", s.MessageID, ctx.Err())
			}
			return messages.Reply{}, fmt.Errorf("client: read replies from %s: %w", s.ReplyTo, err)
		}
		for _, e := range res[s.ReplyTo] {
			last = e.ID
			var r messages.Reply
			if err := json.Unmarshal([]byte(e.FieldValues[messages.ReplyField]), &r); err != nil {
				continue // not a reply of ours to read
			}
			if r.MessageID == s.MessageID || (r.MessageID == "" && r.EntryID == s.EntryID) {
				return r, nil
			}
		}
	}
}

// Request sends m and waits for its reply.
func (c *Client) Request(ctx context.Context, m Message) (Sent, messages.Reply, error) {
	s, err := c.Send(ctx, m)
	if err != nil {
		return s, messages.Reply{}, err
	}
	r, err := c.Reply(ctx, s)
	return s, r, err
}

// RunResult decodes the result of an ok reply to start_run or run_case.
func RunResult(r messages.Reply) (messages.RunResult, error) {
	var res messages.RunResult
	if r.Status != messages.StatusOK {
		return res, fmt.Errorf("client: reply of %s is %s, not ok", r.MessageID, r.Status)
	}
	if err := json.Unmarshal(r.Result, &res); err != nil || res.RunID == "" || res.Events == "" {
		return res, fmt.Errorf("client: reply of %s has no {run_id, events} result", r.MessageID)
	}
	return res, nil
}

// End is how a followed run ended.
type End struct {
	// Status is complete, error or cancelled (after the terminal event) or
	// suspended (the run waits for something outside; no terminal event).
	Status journal.Status
	// Code is the terminal run:error event's code, if any.
	Code messages.Code
	// Last is the last event read: the terminal one unless suspended.
	Last journal.Event
}

// Follow reads the run's events from eventsKey (the events of a start_run
// or run_case reply's result) from the first one, calling fn with each in
// run_seq order as it arrives, until the terminal event (run:complete,
// run:error, run:cancelled) or until the run is suspended with nothing left
// to read. An error from fn stops Follow and is returned. The run's status
// is read from its meta hash, the key beside eventsKey (…:meta for
// …:events); a run whose keys are gone is ErrRunGone.
func (c *Client) Follow(ctx context.Context, eventsKey string, fn func(journal.Event) error) (End, error) {
	metaKey, ok := strings.CutSuffix(eventsKey, ":events")
	if !ok {
		return End{}, fmt.Errorf("client: follow %s: not a run's events key (…:events)", eventsKey)
	}
	metaKey += ":meta"
	last, seen := "0-0", false
	var prev journal.Event
	for {
		if err := ctx.Err(); err != nil {
			return End{}, fmt.Errorf("client: follow %s: %w", eventsKey, err)
		}
		res, err := c.c.Do(ctx, c.c.B().Xread().Count(100).Block(pollBlock.Milliseconds()).
			Streams().Key(eventsKey).Id(last).Build()).AsXRead()
		if err != nil && !valkey.IsValkeyNil(err) {
			if ctx.Err() != nil {
				return End{}, fmt.Errorf("client: follow %s: %w", eventsKey, ctx.Err())
			}
			return End{}, fmt.Errorf("client: follow %s: %w", eventsKey, err)
		}
		entries := res[eventsKey]
		for _, e := range entries {
			last = e.ID
			var ev journal.Event
			if err := json.Unmarshal([]byte(e.FieldValues["event"]), &ev); err != nil {
				return End{}, fmt.Errorf("client: follow %s: entry %s: %w", eventsKey, e.ID, err)
			}
			seen, prev = true, ev
			if err := fn(ev); err != nil {
				return End{}, err
			}
			if status, ok := journal.TerminalStatus(ev.Kind); ok {
				end := End{Status: status, Last: ev}
				if _, err := ev.Field("code", &end.Code); err != nil {
					return end, fmt.Errorf("client: follow %s: %w", eventsKey, err)
				}
				return end, nil
			}
		}
		if len(entries) > 0 {
			continue
		}
		// Nothing new within the block: a suspended run writes no terminal
		// event, and a run whose keys expired writes nothing at all.
		m, err := c.c.Do(ctx, c.c.B().Hmget().Key(metaKey).Field("status", "last_seq").Build()).ToArray()
		if err != nil {
			if ctx.Err() != nil {
				return End{}, fmt.Errorf("client: follow %s: %w", eventsKey, ctx.Err())
			}
			return End{}, fmt.Errorf("client: follow %s: read %s: %w", eventsKey, metaKey, err)
		}
		status, err := m[0].ToString()
		if valkey.IsValkeyNil(err) {
			return End{}, fmt.Errorf("client: follow %s: %w", eventsKey, ErrRunGone)
		}
		lastSeq, _ := m[1].AsInt64()
		if journal.Status(status) == journal.StatusSuspended && (!seen || prev.RunSeq >= lastSeq) {
			return End{Status: journal.StatusSuspended, Last: prev}, nil
		}
	}
}

// NewMessageID returns a new random message id: "msg_" and 32 hex digits.
func NewMessageID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "msg_" + hex.EncodeToString(b[:])
}
