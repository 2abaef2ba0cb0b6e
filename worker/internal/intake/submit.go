package intake

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/replay"
	"github.com/pyrula/caseworker/worker/internal/runwire"
)

// derivedRunID is the run id of a message that names none: prefix plus the
// first 16 hex digits of the SHA-256 of the message id, so that every
// delivery of a message submits the same run.
func derivedRunID(prefix, messageID string) string {
	sum := sha256.Sum256([]byte(messageID))
	return prefix + hex.EncodeToString(sum[:])[:16]
}

// startRun handles start_run: durable submission of a new live run.
func (in *Intake) startRun(ctx context.Context, env messages.Envelope) (any, error) {
	var b messages.StartRunBody
	if err := decodeBody(env.Body, &b); err != nil {
		return nil, err
	}
	if b.TargetName == "" {
		return nil, messages.Errorf(messages.InvalidOverrides, "target_name is missing")
	}
	inputs := bytes.TrimSpace(b.Inputs)
	if len(inputs) == 0 || bytes.Equal(inputs, []byte("null")) {
		inputs = nil
	} else if inputs[0] != '{' {
		return nil, messages.Errorf(messages.InvalidOverrides, "inputs must be a JSON object")
	}
	if _, err := in.deps.Models(in.deps.LLMRef(b.LLMRef)); err != nil {
		return nil, err
	}
	return in.submit(ctx, env, b.RunID, "run_", b.TargetName, inputs)
}

// runCase handles run_case: the body is checked, then the new run is
// submitted durably with the body in its run:submitted event; everything
// else (loading or rebuilding the case, running it) happens in the runs
// executor and arrives as the run's events.
func (in *Intake) runCase(ctx context.Context, env messages.Envelope) (any, error) {
	var b messages.RunCaseBody
	if err := decodeBody(env.Body, &b); err != nil {
		return nil, err
	}
	if b.TargetName == "" {
		return nil, messages.Errorf(messages.InvalidOverrides, "target_name is missing")
	}
	src := b.Source
	switch {
	case (src.Bundle == nil) == (src.Journal == nil):
		return nil, messages.Errorf(messages.InvalidOverrides, "source must have exactly one of bundle and journal")
	case src.Bundle != nil:
		if _, err := bundle.ParseHash(src.Bundle.FixtureHash); err != nil {
			return nil, messages.Errorf(messages.InvalidFixtureHash, "source.bundle.fixture_hash is not 64 lowercase hex characters")
		}
	default:
		j := src.Journal
		if j.RunID == "" {
			return nil, messages.Errorf(messages.InvalidOverrides, "source.journal.run_id is missing")
		}
		if err := journal.CheckRunID(j.RunID); err != nil {
			return nil, messages.Errorf(messages.InvalidOverrides, "source.journal.run_id: %v", err)
		}
		// The fork is the sender's choice, never a default: without one
		// the case would keep only the inputs, and every call would run
		// down the ladder, live where allowed.
		if !j.ForkAfterSeq.Given {
			return nil, messages.Errorf(messages.InvalidOverrides,
				"source.journal.fork_after_seq is missing: give the run_seq to fork after (pyrula events %s --fork-points lists them), "+
					"or null to keep only the inputs (every call then goes down the ladder, live where allowed)", j.RunID)
		}
		if seq := j.ForkAfterSeq.Seq; seq != nil && *seq < 0 {
			return nil, messages.Errorf(messages.InvalidOverrides, "source.journal.fork_after_seq %d is negative", *seq)
		}
		if j.ExpectedHash != "" {
			if _, err := bundle.ParseHash(j.ExpectedHash); err != nil {
				return nil, messages.Errorf(messages.InvalidFixtureHash, "source.journal.expected_hash is not 64 lowercase hex characters")
			}
		}
	}
	opts, err := runwire.CaseOptions(b.Options)
	if err != nil {
		return nil, err
	}
	info, ok := in.reg.Lookup(b.TargetName)
	if ok {
		// Against the registration only: the case is loaded by the
		// executor, which checks again with it (runcase.go).
		if err := replay.CheckOptions(opts, info, nil); err != nil {
			return nil, messages.Errorf(messages.InvalidOverrides, "%v", err)
		}
	}
	if ok && info.Kind != bundle.KindAgent {
		switch {
		case b.Options.Model != "":
			return nil, messages.Errorf(messages.InvalidOverrides, "options.model applies to agents; %s is a %s", b.TargetName, info.Kind)
		case b.Options.Prompt != "":
			return nil, messages.Errorf(messages.InvalidOverrides, "options.prompt applies to agents; %s is a %s", b.TargetName, info.Kind)
		}
	}
	if _, err := in.deps.CaseModels(in.deps.LLMRef(b.Options.LLMRef), b.Options.ReplayOnly); err != nil {
		return nil, err
	}
	var inputs json.RawMessage
	if len(b.Options.Inputs) > 0 {
		raw, err := json.Marshal(b.Options.Inputs)
		if err != nil {
			return nil, messages.Errorf(messages.InvalidOverrides, "options.inputs: %v", err)
		}
		inputs = raw
	}
	res, err := in.submit(ctx, env, b.RunID, "case_", b.TargetName, inputs)
	if err != nil || src.Journal == nil {
		return res, err
	}
	// The reply says which fork the case uses, as the source gave it (the
	// run:submitted event's request holds it too).
	r := res.(messages.RunResult)
	r.ForkAfterSeq = src.Journal.ForkAfterSeq
	return r, nil
}

// submit durably submits a run: it creates the run in the journal (meta and
// run:submitted, which holds the message id, type and body) and adds an
// entry to the runs stream. A run of that id created by the same message
// (a redelivery) is the same submission; one created by another message is
// refused. Then the caller records, replies and acks.
func (in *Intake) submit(ctx context.Context, env messages.Envelope, runID, prefix, target string, inputs json.RawMessage) (any, error) {
	info, ok := in.reg.Lookup(target)
	if !ok {
		return nil, messages.Errorf(messages.InvalidOverrides, "no target %q is registered in this worker", target)
	}
	if runID == "" {
		runID = derivedRunID(prefix, env.MessageID)
	} else if err := journal.CheckRunID(runID); err != nil {
		return nil, messages.Errorf(messages.InvalidOverrides, "run_id: %v", err)
	}
	msgID, err := json.Marshal(env.MessageID)
	if err != nil {
		return nil, fmt.Errorf("encode the message id: %w", err)
	}
	typ, err := json.Marshal(string(env.Type))
	if err != nil {
		return nil, fmt.Errorf("encode the message type: %w", err)
	}
	var body bytes.Buffer
	if err := json.Compact(&body, env.Body); err != nil {
		return nil, messages.Errorf(messages.InvalidOverrides, "the body is not valid JSON: %v", err)
	}
	fields := map[string]json.RawMessage{runwire.FieldMessageID: msgID, runwire.FieldMessageType: typ, runwire.FieldRequest: body.Bytes()}
	runwire.AddTraceContext(ctx, fields)
	_, err = in.journal.Create(ctx, journal.CreateParams{
		RunID: runID, TargetName: target, CodeVersion: info.CodeVersion, Inputs: inputs, Fields: fields,
	})
	switch {
	case errors.Is(err, journal.ErrRunExists):
		same, serr := in.submittedBy(ctx, runID, env.MessageID)
		if serr != nil {
			return nil, serr
		}
		if !same {
			return nil, messages.Errorf(messages.InvalidOverrides, "run_id %s already names another run", runID)
		}
	case errors.Is(err, journal.ErrInvalid):
		return nil, messages.Errorf(messages.InvalidOverrides, "%v", err)
	case err != nil:
		return nil, fmt.Errorf("submit run %s: %w", runID, err)
	}
	// The run's keys (tag {run_id}) and the runs stream are in two slots,
	// on a Valkey Cluster on two nodes, so the creation and this XADD are
	// two steps, in this order. A crash between them leaves the message
	// pending: its redelivery finds the run created by the same message
	// (ErrRunExists, submittedBy) and adds the entry then. A crash after
	// this XADD and before the ack adds a second entry on redelivery; the
	// executor finds the run leased or finished and acks it.
	//
	// With PYRULA_WAIT_REPLICAS both reach the replicas of their nodes
	// before the reply: the run's creation is read back on its node
	// (lost to a failover: a transient failure, and the redelivery
	// creates it again), and the XADD waits on its own connection.
	if err := runwire.ConfirmCreated(ctx, in.replicas, in.cfg.Namespace, runID); err != nil {
		return nil, fmt.Errorf("submit: %w", err)
	}
	_, err = in.replicas.Do(ctx, in.client.B().Xadd().Key(in.runsStream).Id("*").FieldValue().FieldValue(runwire.RunField, runID).Build())
	if err != nil {
		return nil, fmt.Errorf("submit run %s to %s: %w", runID, in.runsStream, err)
	}
	return messages.RunResult{RunID: runID, Events: valkeyjournal.EventsKey(in.cfg.Namespace, runID)}, nil
}

// submittedBy reports whether run runID was submitted by message messageID
// (its run:submitted event carries that message id).
func (in *Intake) submittedBy(ctx context.Context, runID, messageID string) (bool, error) {
	ev, _, err := runwire.Submitted(ctx, in.journal, runID)
	if err != nil {
		return false, err
	}
	var got string
	if raw, ok := ev.Extra[runwire.FieldMessageID]; ok {
		_ = json.Unmarshal(raw, &got)
	}
	return got == messageID, nil
}
