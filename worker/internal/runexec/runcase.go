package runexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/capture"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/replay"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/suite"
	"github.com/pyrula/caseworker/version"
	"github.com/pyrula/caseworker/worker/internal/runwire"
)

// runCase executes a run_case run: it loads the case (a bundle from the
// store, or a capture rebuilt from the journal) and runs it with the case
// engine, writing to the new run's journal. A case that cannot be had ends
// the run with run:error and its code (bundle_missing, no_fixture_store,
// binding_mismatch, whatif_source_missing, whatif_source_changed, …) after
// a case:outcome event, as the engine's own refusals do.
func (x *Executor) runCase(ctx context.Context, meta journal.Meta, sub journal.Event, log *zap.Logger) (host.Outcome, error) {
	var b messages.RunCaseBody
	if err := json.Unmarshal(sub.Extra[runwire.FieldRequest], &b); err != nil {
		return x.fail(ctx, meta, messages.InvalidOverrides, fmt.Sprintf("the run's request is not a run_case body: %v", err), nil)
	}
	stop := func(code messages.Code, msg string, hash *string) (host.Outcome, error) {
		h := ""
		if hash != nil {
			h = *hash
		}
		log.Info("case run refused", zap.String("code", string(code)), zap.String("fixture_hash", h))
		if hash == nil {
			hash = &h // a run_case's outcome names its case, "" when unknown
		}
		return x.fail(ctx, meta, code, msg, &replay.Refusal{RunID: meta.RunID, Target: meta.TargetName, Code: code, Message: msg, FixtureHash: hash})
	}
	suiteRef, isChild := suiteRefOf(sub)
	// A suite's child reads its suite's state while its case loads (a
	// round trip less), and looks at it first: a fail_fast suite that
	// stopped runs no more children, whatever their options or case. The
	// state of a stopped suite cancels the load, so that a skipped child
	// does not load its case.
	loadCtx, cancelLoad := context.WithCancel(ctx)
	defer cancelLoad()
	var stateRead <-chan stateResult
	if isChild {
		stateRead = x.readSuiteState(ctx, suiteRef.SuiteID, cancelLoad)
	}
	opts, optErr := runwire.CaseOptions(b.Options)
	var cb *bundle.Canonical
	var err error
	if messages.AsError(optErr) == nil {
		cb, err = x.loadCase(loadCtx, b)
	}
	var state childState
	if isChild {
		read := <-stateRead
		if read.err != nil {
			return host.Outcome{}, read.err
		}
		state = read.state
		if by := state.stoppedBy; by != "" {
			msg := fmt.Sprintf("not run: suite %s stopped at %s, which did not pass (fail_fast)", suiteRef.SuiteID, by)
			return x.fail(ctx, meta, messages.Cancelled, msg, &replay.Refusal{RunID: meta.RunID, Target: meta.TargetName,
				Code: messages.Cancelled, Message: msg, Reason: suite.ReasonFailFast})
		}
	}
	if me := messages.AsError(optErr); me != nil {
		return stop(me.Code, me.Message, nil)
	}
	if me := messages.AsError(err); me != nil {
		var hash *string
		if b.Source.Bundle != nil {
			hash = &b.Source.Bundle.FixtureHash
		}
		return stop(me.Code, me.Message, hash)
	}
	if err != nil {
		return host.Outcome{}, err
	}
	hash := string(cb.Hash())
	if isChild {
		// A suite's child draws on the suite's budget, when it has one.
		budget, err := x.childBudget(state, suiteRef.SuiteID, meta.RunID)
		if err != nil {
			return host.Outcome{}, err
		}
		if budget != nil {
			opts.Shared = budget
		}
	}
	ref := x.deps.LLMRef(b.Options.LLMRef)
	rep, err := replay.RunCase(ctx, replay.Case{
		Canonical: cb,
		Params: replay.Params{Target: b.TargetName, RunID: meta.RunID,
			Registry: x.reg, Log: x.log, Recorded: onlySubmitted(meta, sub), Options: opts, LLMRef: ref},
		ModelClient: x.deps.CaseModels,
	})
	if ce := (*replay.CaseError)(nil); errors.As(err, &ce) {
		msg := ce.Error()
		if me := messages.AsError(ce.Err); me != nil {
			msg = me.Message
		}
		return stop(ce.Code, msg, &hash)
	}
	if err != nil {
		return host.Outcome{}, err
	}
	o := rep.Outcome
	x.report.CaseOutcome(o)
	return host.Outcome{RunID: meta.RunID, Status: o.Status, Code: messages.Code(o.Code), Message: o.Message, LastSeq: o.LastSeq}, nil
}

// loadCase returns the case of a run_case body. Its errors with reason
// codes end the run; others are transient.
func (x *Executor) loadCase(ctx context.Context, b messages.RunCaseBody) (*bundle.Canonical, error) {
	if src := b.Source.Bundle; src != nil {
		h, err := bundle.ParseHash(src.FixtureHash)
		if err != nil {
			return nil, messages.Errorf(messages.InvalidFixtureHash, "source.bundle.fixture_hash is not 64 lowercase hex characters")
		}
		s, err := x.deps.FixtureStore(b.FixtureStore)
		if err != nil {
			return nil, err
		}
		return store.LoadWith(ctx, s, h, bundle.Options{Decode: true})
	}
	src := b.Source.Journal
	if src == nil {
		return nil, messages.Errorf(messages.InvalidOverrides, "source must have exactly one of bundle and journal")
	}
	c, err := capture.FromJournal(ctx, x.journal, capture.FromJournalParams{
		Target: b.TargetName, RunID: src.RunID,
		// A request without fork_after_seq (submitted before the key was
		// required) keeps only the inputs, as it did then.
		Params: capture.Params{ForkAfterSeq: src.ForkAfterSeq.Seq, PyrulaVersion: version.Version},
		Registration: func(target string) (bundle.Registration, error) {
			info, ok := x.reg.Lookup(target)
			if !ok {
				return bundle.Registration{}, messages.Errorf(messages.InvalidOverrides, "no target %q is registered in this worker", target)
			}
			return info.Registration, nil
		},
	})
	switch {
	case errors.Is(err, journal.ErrRunNotFound):
		return nil, messages.Errorf(messages.WhatifSourceMissing, "the source run %s is in neither Valkey nor the archive", src.RunID)
	case errors.Is(err, capture.ErrTargetMismatch):
		return nil, messages.Errorf(messages.InvalidOverrides, "%v", err)
	case err != nil:
		if fe := (*capture.ForkRangeError)(nil); errors.As(err, &fe) {
			return nil, runwire.ForkRangeRefusal("source.journal.fork_after_seq", fe)
		}
		return nil, err
	}
	if src.ExpectedHash != "" && string(c.Hash()) != src.ExpectedHash {
		return nil, messages.Errorf(messages.WhatifSourceChanged,
			"the capture of run %s rebuilt from the journal hashes to %s, not the expected %s", src.RunID, c.Hash(), src.ExpectedHash)
	}
	return c, nil
}
