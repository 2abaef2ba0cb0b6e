package messages

import "encoding/json"

// MessageType names what a queue message asks the worker to do (docs/protocol.md).
type MessageType string

// The message types of the worker protocol.
const (
	// SaveCase captures a recorded run at a fork and saves the bundle.
	SaveCase MessageType = "save_case"
	// RunCase submits a case run from a bundle or a journal.
	RunCase MessageType = "run_case"
	// DeleteCaseBundle deletes a bundle from the fixture store.
	DeleteCaseBundle MessageType = "delete_case_bundle"
	// StartRun submits a new live run of a target.
	StartRun MessageType = "start_run"
	// RunSuite submits a suite: case runs of many cases under one or more
	// arms and one budget, fanned out on the runs stream.
	RunSuite MessageType = "run_suite"
)

// MessageField is the one field of a stream entry that holds the envelope.
const MessageField = "message"

// Envelope is a queue message: the JSON value of a stream entry's
// "message" field.
type Envelope struct {
	// MessageID names the message; redeliveries and duplicate sends carry
	// the same id and get the same reply.
	MessageID string `json:"message_id"`
	// Type says what to do.
	Type MessageType `json:"type"`
	// ReplyTo is the stream the reply goes to ("" for the worker's default).
	ReplyTo string `json:"reply_to,omitempty"`
	// Body is the type's body, kept raw until the type is known.
	Body json.RawMessage `json:"body"`
}

// SaveCaseBody is the body of save_case.
type SaveCaseBody struct {
	TargetName   string `json:"target_name"`
	RunID        string `json:"run_id"`
	ForkAfterSeq *int64 `json:"fork_after_seq,omitempty"`
	// Kind is "workflow", "agent" or "" (detected).
	Kind string `json:"kind,omitempty"`
	// FixtureStore, when set, is the store the sender expects the worker
	// to use (binding_mismatch otherwise).
	FixtureStore string `json:"fixture_store,omitempty"`
}

// DeleteCaseBundleBody is the body of delete_case_bundle.
type DeleteCaseBundleBody struct {
	FixtureHash  string `json:"fixture_hash"`
	FixtureStore string `json:"fixture_store,omitempty"`
}

// ReplyStatus is the status of a reply.
type ReplyStatus string

// Reply statuses.
const (
	// StatusOK: the message was handled; Result holds what it gave.
	StatusOK ReplyStatus = "ok"
	// StatusRefused: the message was refused (Code says why); retrying the
	// same message gives the same refusal.
	StatusRefused ReplyStatus = "refused"
	// StatusError: the worker could not handle the message (a dead letter
	// after repeated transient failures, or an unsupported type).
	StatusError ReplyStatus = "error"
)

// Reply is what the worker publishes to a message's reply_to stream, in the
// stream entry's "reply" field.
type Reply struct {
	MessageID string      `json:"message_id"`
	Type      MessageType `json:"type"`
	Status    ReplyStatus `json:"status"`
	Code      Code        `json:"code,omitempty"`
	Message   string      `json:"message,omitempty"`
	// EntryID is the stream entry id of a message refused before its
	// message_id could be read (too large, or not an envelope).
	EntryID string          `json:"entry_id,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
}

// ReplyField is the field of a reply stream entry that holds the reply.
const ReplyField = "reply"

// SaveCaseResult is the result of save_case.
type SaveCaseResult struct {
	FixtureHash     string          `json:"fixture_hash"`
	FixtureStore    string          `json:"fixture_store"`
	ManifestSummary json.RawMessage `json:"manifest_summary"`
}

// DeleteCaseBundleResult is the result of delete_case_bundle.
type DeleteCaseBundleResult struct {
	Deleted bool `json:"deleted"`
}
