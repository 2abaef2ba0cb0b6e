package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
)

// The errors of the dead-letter functions. Test with errors.Is; the
// returned errors wrap them with the stream and the entry.
var (
	// ErrInvalidEntryID: the id given is not a stream entry id such as
	// 1767225600000-0 (checked before anything is read).
	ErrInvalidEntryID = errors.New("client: not a stream entry id (such as 1767225600000-0)")
	// ErrDeadLetterNotFound: the dead-letter stream has no entry of that
	// id (never there, or purged).
	ErrDeadLetterNotFound = errors.New("client: no such dead letter")
	// ErrAlreadyRedriven: the dead letter was redriven already; a dead
	// letter is redriven once. The error names the redrive's message id.
	ErrAlreadyRedriven = errors.New("client: the dead letter was redriven already")
	// ErrNotRedrivable: the dead letter cannot be redriven: its message
	// has no usable message_id, its reply was not an error (the work was
	// done), the redrive's id would be too long, or, for a run, its
	// submission can no longer be read, names no start_run or run_case,
	// or the run has not ended with run:error. Nothing was sent.
	ErrNotRedrivable = errors.New("client: the dead letter cannot be redriven")
)

// DeadKind names one of the two dead-letter streams.
type DeadKind string

// The dead-letter streams.
const (
	// DeadMessages is the message stream's, <case stream>:dead: messages
	// answered with an error after PYRULA_MAX_DELIVERIES deliveries.
	DeadMessages DeadKind = "message"
	// DeadRuns is the runs stream's, <ns>:runs:dead: runs ended with
	// run:error runtime_error after PYRULA_MAX_DELIVERIES transient
	// failures, or that cannot be executed.
	DeadRuns DeadKind = "run"
)

// The fields of the worker's dead letters (docs/protocol.md).
const (
	deadFieldError       = "error"
	deadFieldDeliveries  = "deliveries"
	deadFieldFailures    = "failures"
	deadFieldEntryID     = "entry_id"
	deadFieldReplyStatus = "reply_status"
	deadFieldRunID       = "run_id"
)

// maxIDBytes is the longest message id the worker accepts, and the
// longest run id a journal accepts.
const maxIDBytes = 200

// deadPage is how many entries one read of a dead-letter stream takes.
const deadPage = 100

// DeadStream returns the dead-letter stream of kind: the case stream's
// name and ":dead", or <ns>:runs:dead.
func (c *Client) DeadStream(kind DeadKind) string {
	if kind == DeadRuns {
		return c.opts.Namespace + ":runs:dead"
	}
	return c.opts.CaseStream + ":dead"
}

// DeadLetter is one dead letter as listed: what the worker wrote on the
// dead-letter stream, what the run's submission says (runs), and whether
// it was redriven.
type DeadLetter struct {
	// Kind is the stream it is on.
	Kind DeadKind `json:"-"`
	// EntryID is its entry on the dead-letter stream: what show, redrive
	// and purge take.
	EntryID string `json:"entry_id"`
	// RunID is the dead run (runs only).
	RunID string `json:"run_id,omitempty"`
	// MessageID is the message's id; for a run, the id of the message
	// that submitted it. Empty when unknown (a message without a usable
	// id; a run whose submission list could not read from Valkey).
	MessageID string `json:"message_id,omitempty"`
	// Type is the message's type (for a run, start_run or run_case);
	// empty when unknown.
	Type messages.MessageType `json:"type,omitempty"`
	// At is when it was dead-lettered: the time in its entry id.
	At time.Time `json:"at"`
	// Reason is the error the worker recorded: the last transient error.
	Reason string `json:"reason"`
	// Deliveries is how many times the message was delivered (messages
	// only; nil when the field is not a number).
	Deliveries *int64 `json:"deliveries,omitempty"`
	// Failures is how many transient failures of the run were counted
	// (runs only; 0 for a run that cannot be executed).
	Failures *int64 `json:"failures,omitempty"`
	// ReplyStatus is the status of the reply the message got when it was
	// dead-lettered: error, or the reply recorded before (messages only).
	ReplyStatus messages.ReplyStatus `json:"reply_status,omitempty"`
	// Redriven is the redrive of this dead letter, nil when there was none.
	Redriven *Redrive `json:"redriven"`

	// fields are the dead letter's stream fields.
	fields map[string]string
}

// Redrive is what a redrive sent, as its dead letter records it.
type Redrive struct {
	// MessageID is the redrive's message id (RedriveID of the original).
	MessageID string `json:"message_id"`
	// RunID is the new run's id (runs only).
	RunID string `json:"run_id,omitempty"`
	// EntryID is the redrive's entry on the case stream.
	EntryID string `json:"entry_id"`
	// At is when it was sent, by the redriving process's clock.
	At time.Time `json:"at"`
}

// RedriveID is the message id (or run id) of the redrive of id: id and
// ".redrive-1", or, when id is itself a redrive ("….redrive-N"), the same
// base and N+1. The same id always gives the same redrive id, so a
// redrive sent twice is one message, answered once.
func RedriveID(id string) string {
	const suffix = ".redrive-"
	if i := strings.LastIndex(id, suffix); i >= 0 {
		n := id[i+len(suffix):]
		if k, err := strconv.ParseUint(n, 10, 32); err == nil && k > 0 && strconv.FormatUint(k, 10) == n {
			return id[:i] + suffix + strconv.FormatUint(k+1, 10)
		}
	}
	return id + suffix + "1"
}

// CheckEntryID returns an error wrapping ErrInvalidEntryID unless id is a
// full stream entry id: decimal milliseconds, "-", a decimal sequence
// number (1767225600000-0). The dead-letter functions check it first.
func CheckEntryID(id string) error {
	ms, seq, ok := strings.Cut(id, "-")
	if !ok || !decimal(ms) || !decimal(seq) {
		return fmt.Errorf("%w: %.80q", ErrInvalidEntryID, id)
	}
	if _, err := strconv.ParseUint(ms, 10, 64); err != nil {
		return fmt.Errorf("%w: %.80q", ErrInvalidEntryID, id)
	}
	if _, err := strconv.ParseUint(seq, 10, 64); err != nil {
		return fmt.Errorf("%w: %.80q", ErrInvalidEntryID, id)
	}
	return nil
}

func decimal(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// entryTime is the time in a stream entry id (its milliseconds).
func entryTime(id string) time.Time {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(n).UTC()
}

// hashInput is what Valkey Cluster hashes of key to choose its slot: the
// part between the first "{" and the first "}" after it when that part is
// not empty (the hash tag), else the whole key.
func hashInput(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// marksKey is the hash that records the redrives of dead-letter stream
// dead (field: entry id, value: the Redrive as JSON). Its name starts with
// the namespace, as every key of the namespace does, and it is in dead's
// cluster slot, so that one script reads the stream and writes the marks
// on a Valkey Cluster: it holds dead's own hash tag when dead has one,
// else dead itself as its tag ("pyrula:{pyrula:case-messages:dead}:redriven").
func (c *Client) marksKey(dead string) (string, error) {
	key := c.opts.Namespace + ":" + dead + ":redriven"
	if hashInput(dead) == dead {
		key = c.opts.Namespace + ":{" + dead + "}:redriven"
	}
	if hashInput(key) != hashInput(dead) {
		return "", fmt.Errorf("client: no key in the cluster slot of %q can hold its redrive marks (its name has a \"}\" outside a hash tag)", dead)
	}
	return key, nil
}

// RedriveMarksKey is the key of the hash recording the redrives of the
// dead letters of kind (see Redrive); it is in the dead-letter stream's
// cluster slot.
func (c *Client) RedriveMarksKey(kind DeadKind) (string, error) {
	return c.marksKey(c.DeadStream(kind))
}

// DeadLetters calls fn with every dead letter of kind, oldest first, read
// a page at a time; an error from fn stops it and is returned. A dead
// run's message id and type are read from its run:submitted event in
// Valkey (left empty when the run's keys are gone: InspectDeadLetter
// reads the archive too).
func (c *Client) DeadLetters(ctx context.Context, kind DeadKind, fn func(DeadLetter) error) error {
	dead := c.DeadStream(kind)
	marks, err := c.marksKey(dead)
	if err != nil {
		return err
	}
	start := "-"
	for {
		entries, err := c.c.Do(ctx, c.c.B().Xrange().Key(dead).Start(start).End("+").Count(deadPage).Build()).AsXRange()
		if err != nil {
			return fmt.Errorf("client: read %s: %w", dead, err)
		}
		letters, err := c.deadLetters(ctx, kind, marks, entries)
		if err != nil {
			return err
		}
		for _, l := range letters {
			if err := fn(l); err != nil {
				return err
			}
		}
		if len(entries) < deadPage {
			return nil
		}
		start = "(" + entries[len(entries)-1].ID
	}
}

// DeadLetterByID returns the dead letter of kind with entry id.
// Errors: ErrInvalidEntryID, ErrDeadLetterNotFound.
func (c *Client) DeadLetterByID(ctx context.Context, kind DeadKind, id string) (DeadLetter, error) {
	if err := CheckEntryID(id); err != nil {
		return DeadLetter{}, err
	}
	dead := c.DeadStream(kind)
	marks, err := c.marksKey(dead)
	if err != nil {
		return DeadLetter{}, err
	}
	entries, err := c.c.Do(ctx, c.c.B().Xrange().Key(dead).Start(id).End(id).Build()).AsXRange()
	if err != nil {
		return DeadLetter{}, fmt.Errorf("client: read %s %s: %w", dead, id, err)
	}
	if len(entries) == 0 {
		return DeadLetter{}, fmt.Errorf("%w: %s has no entry %s", ErrDeadLetterNotFound, dead, id)
	}
	letters, err := c.deadLetters(ctx, kind, marks, entries)
	if err != nil {
		return DeadLetter{}, err
	}
	return letters[0], nil
}

// deadLetters decodes entries of kind's dead-letter stream, with their
// redrive marks (one HMGET) and, for runs, their submissions (one XRANGE
// of each run's first event, pipelined).
func (c *Client) deadLetters(ctx context.Context, kind DeadKind, marks string, entries []valkey.XRangeEntry) ([]DeadLetter, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	vals, err := c.c.Do(ctx, c.c.B().Hmget().Key(marks).Field(ids...).Build()).ToArray()
	if err != nil {
		return nil, fmt.Errorf("client: read %s: %w", marks, err)
	}
	letters := make([]DeadLetter, len(entries))
	var runs valkey.Commands
	for i, e := range entries {
		l := DeadLetter{Kind: kind, EntryID: e.ID, At: entryTime(e.ID), Reason: e.FieldValues[deadFieldError], fields: e.FieldValues}
		if i < len(vals) {
			if s, err := vals[i].ToString(); err == nil {
				var r Redrive
				if json.Unmarshal([]byte(s), &r) == nil {
					l.Redriven = &r
				}
			}
		}
		if kind == DeadRuns {
			l.RunID = e.FieldValues[deadFieldRunID]
			l.Failures = number(e.FieldValues[deadFieldFailures])
			if journal.CheckRunID(l.RunID) == nil {
				runs = append(runs, c.c.B().Xrange().Key(c.EventsKey(l.RunID)).Start("0-1").End("0-1").Build())
			}
		} else {
			var env messages.Envelope
			if json.Unmarshal([]byte(e.FieldValues[messages.MessageField]), &env) == nil {
				l.MessageID, l.Type = env.MessageID, env.Type
			}
			l.Deliveries = number(e.FieldValues[deadFieldDeliveries])
			l.ReplyStatus = messages.ReplyStatus(e.FieldValues[deadFieldReplyStatus])
		}
		letters[i] = l
	}
	if len(runs) == 0 {
		return letters, nil
	}
	res := c.c.DoMulti(ctx, runs...)
	k := 0
	for i := range letters {
		if journal.CheckRunID(letters[i].RunID) != nil {
			continue
		}
		r := res[k]
		k++
		evs, err := r.AsXRange()
		if err != nil {
			return nil, fmt.Errorf("client: read the submission of run %s: %w", letters[i].RunID, err)
		}
		if len(evs) == 1 {
			var sub submitted
			if json.Unmarshal([]byte(evs[0].FieldValues["event"]), &sub) == nil && sub.Kind == string(runevent.RunSubmitted) {
				letters[i].MessageID, letters[i].Type = sub.MessageID, messages.MessageType(sub.MessageType)
			}
		}
	}
	return letters, nil
}

// submitted is what a dead run's list line takes from its run:submitted
// event.
type submitted struct {
	Kind        string `json:"kind"`
	MessageID   string `json:"message_id"`
	MessageType string `json:"message_type"`
}

// EventsKey is the events stream of run runID (docs/protocol.md: the
// events key a start_run or run_case reply names), for Follow; a suite's
// children are runs whose ids its suite:outcome names.
func (c *Client) EventsKey(runID string) string {
	return c.opts.Namespace + ":{" + runID + "}:events"
}

// recordKey is the idempotency record of a message id.
func (c *Client) recordKey(messageID string) string {
	return c.opts.Namespace + ":msg:{" + messageID + "}"
}

// number is a decimal field's value, nil when it is not one.
func number(s string) *int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return nil
	}
	return &n
}

// DeadLetterDetail is one dead letter in full: its list line and what
// show adds.
type DeadLetterDetail struct {
	DeadLetter
	// Stream is the dead-letter stream.
	Stream string `json:"stream"`
	// SourceEntryID is the entry the worker dead-lettered, on the message
	// stream or the runs stream (the dead letter's entry_id field).
	SourceEntryID string `json:"source_entry_id"`
	// ReplyTo is the message's reply_to ("" for the worker's default).
	ReplyTo string `json:"reply_to,omitempty"`
	// Reply is the reply recorded for the message id (its idempotency
	// record): the one reply the message got (for a run, the reply to the
	// message that submitted it); nil once the record expired
	// (PYRULA_IDEMPOTENCY_TTL).
	Reply json.RawMessage `json:"reply"`
	// RedriveReply is the reply recorded for the redrive's message id,
	// nil while there is none.
	RedriveReply json.RawMessage `json:"redrive_reply,omitempty"`
	// Target is the dead run's target (runs only).
	Target string `json:"target_name,omitempty"`
	// Status is the dead run's status (runs only; empty when the run is
	// in neither Valkey nor the archive).
	Status journal.Status `json:"status,omitempty"`
	// Terminal is the dead run's terminal event (runs only).
	Terminal json.RawMessage `json:"terminal,omitempty"`
	// Body is the message's body; for a run, the request its run:submitted
	// event kept (the body of the message that submitted it). It holds
	// the run's inputs: the caller decides whether to show it.
	Body json.RawMessage `json:"-"`
}

// InspectParams name the dead letter InspectDeadLetter reads.
type InspectParams struct {
	// Kind is the dead-letter stream.
	Kind DeadKind
	// EntryID is the dead letter's entry id.
	EntryID string
	// Journal reads a dead run (Valkey, then the archive); required for
	// runs.
	Journal journal.Journal
}

// InspectDeadLetter reads one dead letter in full: its list line, its
// source entry, the reply recorded for its message id (and for its
// redrive's), its body; for a run, the run's target, status, terminal
// event and the body of the message that submitted it.
// Errors: ErrInvalidEntryID, ErrDeadLetterNotFound.
func (c *Client) InspectDeadLetter(ctx context.Context, p InspectParams) (DeadLetterDetail, error) {
	l, err := c.DeadLetterByID(ctx, p.Kind, p.EntryID)
	if err != nil {
		return DeadLetterDetail{}, err
	}
	d := DeadLetterDetail{DeadLetter: l, Stream: c.DeadStream(p.Kind), SourceEntryID: l.fields[deadFieldEntryID]}
	if p.Kind == DeadRuns {
		if p.Journal == nil {
			return d, errors.New("client: inspect a dead run: no journal given")
		}
		sub, err := c.runSubmission(ctx, p.Journal, l.RunID)
		if err != nil && !errors.Is(err, journal.ErrRunNotFound) {
			return d, err
		}
		if err == nil {
			d.MessageID, d.Type, d.Body = sub.messageID, sub.typ, sub.request
			d.Target, d.Status, d.Terminal = sub.meta.TargetName, sub.meta.Status, sub.terminal
		}
	} else {
		var env messages.Envelope
		if json.Unmarshal([]byte(l.fields[messages.MessageField]), &env) == nil {
			d.ReplyTo, d.Body = env.ReplyTo, env.Body
		}
	}
	if d.Reply, err = c.recordedReply(ctx, d.MessageID); err != nil {
		return d, err
	}
	if l.Redriven != nil {
		if d.RedriveReply, err = c.recordedReply(ctx, l.Redriven.MessageID); err != nil {
			return d, err
		}
	}
	return d, nil
}

// recordedReply is the reply of message id's idempotency record; nil when
// there is none, or only a started record.
func (c *Client) recordedReply(ctx context.Context, id string) (json.RawMessage, error) {
	if id == "" || checkMessageID(id) != nil {
		return nil, nil
	}
	key := c.recordKey(id)
	s, err := c.c.Do(ctx, c.c.B().Get().Key(key).Build()).ToString()
	if valkey.IsValkeyNil(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("client: read %s: %w", key, err)
	}
	var rec struct {
		State string          `json:"state"`
		Reply json.RawMessage `json:"reply"`
	}
	if json.Unmarshal([]byte(s), &rec) != nil || rec.State != "" || len(rec.Reply) == 0 {
		return nil, nil
	}
	return rec.Reply, nil
}

// submission is what a redrive of a run needs from its journal.
type submission struct {
	meta      journal.Meta
	messageID string
	typ       messages.MessageType
	request   json.RawMessage
	terminal  json.RawMessage
}

// runSubmission reads run runID's meta, its run:submitted event's
// message_id, message_type and request, and its terminal event.
// Errors: journal.ErrRunNotFound.
func (c *Client) runSubmission(ctx context.Context, j journal.Journal, runID string) (submission, error) {
	var s submission
	r, err := j.Run(ctx, runID)
	if err != nil {
		return s, fmt.Errorf("client: read run %s: %w", runID, err)
	}
	s.meta = r.Meta
	if len(r.Events) == 0 || r.Events[0].Kind != runevent.RunSubmitted {
		return s, nil
	}
	sub := r.Events[0]
	_ = json.Unmarshal(sub.Extra["message_id"], &s.messageID)
	var typ string
	_ = json.Unmarshal(sub.Extra["message_type"], &typ)
	s.typ, s.request = messages.MessageType(typ), sub.Extra["request"]
	if last := r.Events[len(r.Events)-1]; last.Kind.Terminal() {
		if s.terminal, err = last.JSON(); err != nil {
			return s, fmt.Errorf("client: run %s: its terminal event: %w", runID, err)
		}
	}
	return s, nil
}

// checkMessageID is the worker's rule for a usable message id: 1 to 200
// bytes of valid UTF-8 without U+FFFD, spaces, control characters or
// braces.
func checkMessageID(id string) error {
	switch {
	case id == "":
		return errors.New("it has no message_id")
	case len(id) > maxIDBytes:
		return fmt.Errorf("its message id is longer than %d bytes", maxIDBytes)
	case !utf8.ValidString(id) || strings.ContainsRune(id, utf8.RuneError):
		return errors.New("its message id is not valid UTF-8")
	}
	for _, r := range id {
		if r <= ' ' || r == 0x7f || r == '{' || r == '}' {
			return fmt.Errorf("its message id %q has a space, a control character or a brace", id)
		}
	}
	return nil
}

// RedriveParams name the dead letter Redrive sends back.
type RedriveParams struct {
	// Kind is the dead-letter stream.
	Kind DeadKind
	// EntryID is the dead letter's entry id.
	EntryID string
	// Journal reads a dead run's submission (Valkey, then the archive);
	// required for runs.
	Journal journal.Journal
	// Now is the clock of the redrive's time (time.Now when nil).
	Now func() time.Time
}

// Redriven is what Redrive did.
type Redriven struct {
	// EntryID is the dead letter's entry id.
	EntryID string `json:"entry_id"`
	// MessageID is the dead letter's message id (for a run, the message
	// that submitted it).
	MessageID string `json:"message_id"`
	// RunID is the dead run (runs only).
	RunID string `json:"run_id,omitempty"`
	// Redrive is what was sent, as the dead letter now records it.
	Redrive Redrive `json:"redrive"`
	// ReplyTo is where the redrive's reply goes.
	ReplyTo string `json:"reply_to"`
	// Sent is the redrive's message, for Reply.
	Sent Sent `json:"-"`
}

// markLua marks dead letter ARGV[1] of stream KEYS[1] redriven in hash
// KEYS[2] (same slot) with ARGV[2], unless it is marked already. It
// returns {1, mark} when it marked it, {2, the mark there} when it was
// marked already, {0, ""} when the entry is not in the stream.
var markLua = valkey.NewLuaScript(`
if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then return {0, ''} end
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 1 then return {1, ARGV[2]} end
return {2, redis.call('HGET', KEYS[2], ARGV[1])}
`)

// Redrive sends a dead letter back once. A message goes back to the case
// stream under the message id RedriveID(its id), with its body, type and
// reply_to; a run is submitted again as a new run: the message that
// submitted it (its run:submitted event's message_type and request) is
// sent under RedriveID(its message id), with run_id RedriveID(the run's
// id), and its reply goes to the client's reply stream. The new id keeps
// the worker's promise of one reply per message id: the dead message's id
// keeps its error reply, and the redrive gets its own reply.
//
// The order makes it safe for two callers at once and for a crash between
// the steps: Redrive refuses a dead letter already marked redriven, sends,
// then marks the dead letter redriven (one script on the dead-letter
// stream and its marks, which share a cluster slot: HSETNX). Of two
// redrives at once exactly one marks it; the other returns
// ErrAlreadyRedriven, having sent the same message id with the same body,
// which the worker answers as one message. A crash after the send leaves
// the dead letter unmarked, and redriving it again sends that same
// message again.
//
// Refused before anything is sent: a message dead letter whose reply was
// not an error (reply_status ok or refused: its work was done or refused,
// and the reply recorded), a message without a usable id, a run that is
// gone from the journal, that did not end with run:error, or whose
// submission names no start_run or run_case (ErrNotRedrivable).
// Errors: ErrInvalidEntryID, ErrDeadLetterNotFound, ErrAlreadyRedriven
// (a *RedrivenError, naming the first redrive), ErrNotRedrivable.
func (c *Client) Redrive(ctx context.Context, p RedriveParams) (Redriven, error) {
	l, err := c.DeadLetterByID(ctx, p.Kind, p.EntryID)
	if err != nil {
		return Redriven{}, err
	}
	dead := c.DeadStream(p.Kind)
	if l.Redriven != nil {
		return Redriven{}, &RedrivenError{Stream: dead, EntryID: l.EntryID, Redrive: *l.Redriven}
	}
	notRedrivable := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s %s: %s", ErrNotRedrivable, dead, l.EntryID, fmt.Sprintf(format, args...))
	}
	out := Redriven{EntryID: l.EntryID, MessageID: l.MessageID, RunID: l.RunID}
	var env map[string]json.RawMessage
	var typ messages.MessageType
	replyTo := c.opts.ReplyStream
	if p.Kind == DeadRuns {
		if p.Journal == nil {
			return Redriven{}, errors.New("client: redrive a dead run: no journal given")
		}
		sub, err := c.runSubmission(ctx, p.Journal, l.RunID)
		if errors.Is(err, journal.ErrRunNotFound) {
			return Redriven{}, notRedrivable("run %s is in neither Valkey nor the archive (expired after PYRULA_COMPLETED_TTL), so its submission cannot be read", l.RunID)
		}
		if err != nil {
			return Redriven{}, err
		}
		if sub.meta.Status != journal.StatusError {
			return Redriven{}, notRedrivable("run %s is %s, not ended with run:error: the worker has not given up on it", l.RunID, sub.meta.Status)
		}
		if sub.typ != messages.StartRun && sub.typ != messages.RunCase {
			return Redriven{}, notRedrivable("the run:submitted event of run %s names no start_run or run_case (message_type %q): no worker can execute it", l.RunID, sub.typ)
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal(sub.request, &body); err != nil || body == nil {
			return Redriven{}, notRedrivable("the request of run %s is not a JSON object", l.RunID)
		}
		if err := checkMessageID(sub.messageID); err != nil {
			return Redriven{}, notRedrivable("the message that submitted run %s: %v", l.RunID, err)
		}
		out.MessageID = sub.messageID
		out.Redrive.RunID = RedriveID(l.RunID)
		if err := journal.CheckRunID(out.Redrive.RunID); err != nil {
			return Redriven{}, notRedrivable("the new run id: %v", err)
		}
		body[deadFieldRunID], _ = json.Marshal(out.Redrive.RunID)
		if sub.typ == messages.RunCase {
			body = withExplicitFork(body)
		}
		rawBody, err := json.Marshal(body)
		if err != nil {
			return Redriven{}, fmt.Errorf("client: redrive %s: %w", l.EntryID, err)
		}
		typ = sub.typ
		env = map[string]json.RawMessage{"type": mustJSON(typ), "reply_to": mustJSON(replyTo), "body": rawBody}
	} else {
		if l.ReplyStatus != "" && l.ReplyStatus != messages.StatusError {
			return Redriven{}, notRedrivable("its message %s was answered %s (reply_status): its reply is recorded and a resend of %s gets it again; there is nothing to redrive", l.MessageID, l.ReplyStatus, l.MessageID)
		}
		if err := json.Unmarshal([]byte(l.fields[messages.MessageField]), &env); err != nil || env == nil {
			return Redriven{}, notRedrivable("its message is not a JSON envelope")
		}
		if err := checkMessageID(l.MessageID); err != nil {
			return Redriven{}, notRedrivable("%v", err)
		}
		typ = l.Type
		var to string
		if json.Unmarshal(env["reply_to"], &to) == nil && to != "" {
			replyTo = to
		}
	}
	out.Redrive.MessageID = RedriveID(out.MessageID)
	if len(out.Redrive.MessageID) > maxIDBytes {
		return Redriven{}, notRedrivable("its redrive's message id %s would be longer than %d bytes", out.Redrive.MessageID, maxIDBytes)
	}
	env["message_id"] = mustJSON(out.Redrive.MessageID)
	raw, err := json.Marshal(env)
	if err != nil {
		return Redriven{}, fmt.Errorf("client: redrive %s: %w", l.EntryID, err)
	}

	// Send, then mark.
	from, err := c.lastID(ctx, replyTo)
	if err != nil {
		return Redriven{}, fmt.Errorf("client: redrive %s: read the end of %s: %w", l.EntryID, replyTo, err)
	}
	entryID, err := c.c.Do(ctx, c.c.B().Xadd().Key(c.opts.CaseStream).Id("*").FieldValue().
		FieldValue(messages.MessageField, string(raw)).Build()).ToString()
	if err != nil {
		return Redriven{}, fmt.Errorf("client: redrive %s: send %s to %s: %w", l.EntryID, out.Redrive.MessageID, c.opts.CaseStream, err)
	}
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	out.Redrive.EntryID, out.Redrive.At, out.ReplyTo = entryID, now().UTC().Truncate(time.Microsecond), replyTo
	out.Sent = Sent{MessageID: out.Redrive.MessageID, Type: typ, EntryID: entryID, Stream: c.opts.CaseStream, ReplyTo: replyTo, from: from}
	mark, err := json.Marshal(out.Redrive)
	if err != nil {
		return out, fmt.Errorf("client: redrive %s: %w", l.EntryID, err)
	}
	marks, err := c.marksKey(dead)
	if err != nil {
		return out, err
	}
	res, err := markLua.Exec(ctx, c.c, []string{dead, marks}, []string{l.EntryID, string(mark)}).ToArray()
	if err != nil {
		return out, fmt.Errorf("client: redrive %s: sent %s, but could not mark the dead letter redriven in %s: %w", l.EntryID, out.Redrive.MessageID, marks, err)
	}
	if len(res) != 2 {
		return out, fmt.Errorf("client: redrive %s: unexpected answer of the mark script", l.EntryID)
	}
	state, _ := res[0].AsInt64()
	there, _ := res[1].ToString()
	switch state {
	case 0:
		// Purged while it was sent: the message is sent, nothing to mark.
	case 2:
		var r Redrive
		_ = json.Unmarshal([]byte(there), &r)
		return out, &RedrivenError{Stream: dead, EntryID: l.EntryID, Redrive: r, Sent: true}
	}
	return out, nil
}

// RedrivenError is the error of a redrive of a dead letter that was
// redriven already; it is ErrAlreadyRedriven (errors.Is).
type RedrivenError struct {
	// Stream and EntryID name the dead letter.
	Stream, EntryID string
	// Redrive is its redrive, as recorded.
	Redrive Redrive
	// Sent says that this redrive sent the same message too (two redrives
	// at once), which the worker answers as one message.
	Sent bool
}

// Error says which redrive came first.
func (e *RedrivenError) Error() string {
	what := e.Redrive.MessageID
	if e.Redrive.RunID != "" {
		what += " (run " + e.Redrive.RunID + ")"
	}
	msg := fmt.Sprintf("client: %s %s was redriven already, as %s at %s: a dead letter is redriven once",
		e.Stream, e.EntryID, what, e.Redrive.At.Format(time.RFC3339))
	if e.Sent {
		msg += "; this redrive sent the same message id at the same time, which the worker answers once"
	}
	return msg
}

// Is makes a RedrivenError ErrAlreadyRedriven.
func (e *RedrivenError) Is(target error) bool { return target == ErrAlreadyRedriven }

// mustJSON is v as JSON (a string or a message type, which always encode).
func mustJSON[T ~string](v T) json.RawMessage {
	raw, _ := json.Marshal(string(v))
	return raw
}

// purgeLua deletes the entries ARGV of dead-letter stream KEYS[1] and
// their redrive marks in KEYS[2] (same slot); it returns, per id, 1 when
// the entry was deleted and 0 when it was not there.
var purgeLua = valkey.NewLuaScript(`
local out = {}
for i, id in ipairs(ARGV) do
  out[i] = redis.call('XDEL', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
end
return out
`)

// PurgeDeadLetters deletes the dead letters ids of kind, with their
// redrive marks, and reports for each whether it was there. Each entry
// and its mark go in one script (they share a cluster slot), a hundred
// ids per script.
// Errors: ErrInvalidEntryID (before anything is deleted).
func (c *Client) PurgeDeadLetters(ctx context.Context, kind DeadKind, ids []string) ([]bool, error) {
	for _, id := range ids {
		if err := CheckEntryID(id); err != nil {
			return nil, err
		}
	}
	dead := c.DeadStream(kind)
	marks, err := c.marksKey(dead)
	if err != nil {
		return nil, err
	}
	deleted := make([]bool, 0, len(ids))
	for start := 0; start < len(ids); start += deadPage {
		batch := ids[start:min(start+deadPage, len(ids))]
		res, err := purgeLua.Exec(ctx, c.c, []string{dead, marks}, batch).ToArray()
		if err != nil {
			return deleted, fmt.Errorf("client: purge %s: %w", dead, err)
		}
		for _, r := range res {
			n, _ := r.AsInt64()
			deleted = append(deleted, n == 1)
		}
	}
	return deleted, nil
}

// withExplicitFork returns a run_case body whose journal source names no
// fork_after_seq (a run submitted before the key was required) with
// "fork_after_seq": null, what it meant then: the inputs only. Any other
// body is returned as it is.
func withExplicitFork(body map[string]json.RawMessage) map[string]json.RawMessage {
	var src map[string]json.RawMessage
	if json.Unmarshal(body["source"], &src) != nil {
		return body
	}
	var journalSrc map[string]json.RawMessage
	if json.Unmarshal(src["journal"], &journalSrc) != nil || journalSrc == nil {
		return body
	}
	if _, ok := journalSrc["fork_after_seq"]; ok {
		return body
	}
	journalSrc["fork_after_seq"] = json.RawMessage("null")
	src["journal"], _ = json.Marshal(journalSrc)
	body["source"], _ = json.Marshal(src)
	return body
}
