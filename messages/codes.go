// Package messages holds what every layer of the case worker shares: the reason
// codes with the exit status each maps to (docs/reason-codes.md), the typed
// error that carries a code, and the wire types of the queue protocol
// (docs/protocol.md): the envelope, the message bodies, replies and results.
//
// messages imports only the standard library, so that every package of the
// project (and a user's own binary) can import it without cycles.
package messages

import (
	"errors"
	"fmt"
)

// Code is a reason code: a stable, machine-readable name for why something was
// refused or why a run stopped. The values are the product page's reason codes
// (plus bundle_too_large, an extension of docs/bundle-format.md).
type Code string

// The reason codes. Each one's exit status is given by Code.ExitStatus.
const (
	// CaptureIncomplete: a capture replay could not use (lists what is missing,
	// including a call in flight at the fork).
	CaptureIncomplete Code = "capture_incomplete"
	// NoFixtureStore: no fixture store is configured.
	NoFixtureStore Code = "no_fixture_store"
	// BundleMissing: the hash is not in the store.
	BundleMissing Code = "bundle_missing"
	// BundleCorrupt: the bytes fail decompression, hashing or validation.
	BundleCorrupt Code = "bundle_corrupt"
	// BundleTooLarge: the canonical bundle is over the 512 MiB limit.
	BundleTooLarge Code = "bundle_too_large"
	// FormatUnsupported: the bundle format or manifest kind is not readable by this version.
	FormatUnsupported Code = "format_unsupported"
	// KindMismatch: --kind workflow on a run with model or tool calls, or
	// --kind agent on a run with none.
	KindMismatch Code = "kind_mismatch"
	// InvalidFixtureHash: a fixture hash that is not 64 lowercase hex characters.
	InvalidFixtureHash Code = "invalid_fixture_hash"
	// InvalidKeepHash: a gc keep entry that is not 64 lowercase hex characters.
	InvalidKeepHash Code = "invalid_keep_hash"
	// PrefixDiverged: the target no longer consumes the recorded prefix with matching inputs.
	PrefixDiverged Code = "prefix_diverged"
	// ReplayInputChanged: resuming finds changed input in the case run's own journal.
	ReplayInputChanged Code = "replay_input_changed"
	// MissingContext: a call has no live rung, or a supplied answer has the wrong shape.
	MissingContext Code = "missing_context"
	// LiveBudgetExceeded: call or cost ceiling reached, or spend unobservable under a cost limit.
	LiveBudgetExceeded Code = "live_budget_exceeded"
	// WriteNotAllowed: a write has no allow token.
	WriteNotAllowed Code = "write_not_allowed"
	// ReplayDiverged: a --replay-only call the recording cannot answer.
	ReplayDiverged Code = "replay_diverged"
	// BindingMismatch: the expected fixture store identity differs from the opened store.
	BindingMismatch Code = "binding_mismatch"
	// InvalidOverrides: runtime settings missing or invalid.
	InvalidOverrides Code = "invalid_overrides"
	// WhatifSourceMissing: the source run aged out of Valkey with no archive.
	WhatifSourceMissing Code = "whatif_source_missing"
	// WhatifSourceChanged: the capture rebuilt from the journal does not hash to expected_hash.
	WhatifSourceChanged Code = "whatif_source_changed"
	// RuntimeError: the runtime failed.
	RuntimeError Code = "runtime_error"
	// Cancelled: the run was cancelled.
	Cancelled Code = "cancelled"
	// NoEligibleRuntime is Cloud only.
	NoEligibleRuntime Code = "no_eligible_runtime"
	// RuntimeLost is Cloud only.
	RuntimeLost Code = "runtime_lost"
	// RunsQuotaExceeded is Cloud only.
	RunsQuotaExceeded Code = "runs_quota_exceeded"
	// SuiteTooSmall: a suite's selection holds fewer cases than its
	// min_cases (an empty selection included); the suite fails, it never
	// passes.
	SuiteTooSmall Code = "suite_too_small"
	// SuiteFailed: a suite ended with a case that did not pass (failed or
	// could not run).
	SuiteFailed Code = "suite_failed"
)

// Exit statuses of the pyrula CLI (the product page's "Output and exit status").
const (
	// ExitOK: the command did what was asked; a case run completed.
	ExitOK = 0
	// ExitError: invalid input or an operational error (a redacted "error:" line on stderr).
	ExitError = 1
	// ExitRefused: a refusal before start ({"code", "message"} on stdout).
	ExitRefused = 2
	// ExitRunFailed: a started run failed, was cancelled or suspended.
	ExitRunFailed = 3
)

// runStops are the codes that end a run that has started, rather than refusing
// before it starts.
var runStops = map[Code]bool{
	ReplayInputChanged:  true,
	MissingContext:      true,
	LiveBudgetExceeded:  true,
	WriteNotAllowed:     true,
	ReplayDiverged:      true,
	WhatifSourceMissing: true,
	WhatifSourceChanged: true,
	RuntimeError:        true,
	Cancelled:           true,
	RuntimeLost:         true,
	SuiteTooSmall:       true,
	SuiteFailed:         true,
}

var known = map[Code]bool{}

func init() {
	for _, c := range AllCodes() {
		known[c] = true
	}
}

// AllCodes lists every reason code, in the order of the product page's table.
func AllCodes() []Code {
	return []Code{
		CaptureIncomplete, NoFixtureStore, BundleMissing, BundleCorrupt, BundleTooLarge,
		FormatUnsupported, KindMismatch, InvalidFixtureHash, InvalidKeepHash,
		PrefixDiverged, ReplayInputChanged, MissingContext, LiveBudgetExceeded,
		WriteNotAllowed, ReplayDiverged, BindingMismatch, InvalidOverrides,
		WhatifSourceMissing, WhatifSourceChanged, RuntimeError, Cancelled,
		NoEligibleRuntime, RuntimeLost, RunsQuotaExceeded,
		SuiteTooSmall, SuiteFailed,
	}
}

// Known reports whether c is one of the reason codes.
func (c Code) Known() bool { return known[c] }

// IsRunStop reports whether c ends a run that has already started (exit 3),
// rather than refusing before the start (exit 2).
func (c Code) IsRunStop() bool { return runStops[c] }

// ExitStatus is the CLI exit status for a command that ends with this code:
// ExitRunFailed for codes that stop a started run, ExitRefused for every other
// code.
func (c Code) ExitStatus() int {
	if c.IsRunStop() {
		return ExitRunFailed
	}
	return ExitRefused
}

// Error is an error that carries a reason code. Callers test for it with
// errors.As or CodeOf; Err, when set, is the underlying cause.
type Error struct {
	Code    Code
	Message string
	Err     error
}

// Error implements error: "code: message".
func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Message
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with code and a formatted message. A %w verb in
// format sets Err as well.
func Errorf(code Code, format string, args ...any) *Error {
	wrapped := fmt.Errorf(format, args...)
	return &Error{Code: code, Message: wrapped.Error(), Err: errors.Unwrap(wrapped)}
}

// CodeOf returns the reason code carried by err (the first *Error in its
// chain) and whether there was one.
func CodeOf(err error) (Code, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Code, true
	}
	return "", false
}

// AsError returns the first *Error in err's chain, or nil.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}
