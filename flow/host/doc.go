// Package host is what a host of flow targets uses to run them: the
// Runtime (NewRuntime, Config, RunParams, Outcome and its Status), the
// run's journal it writes to (Log, Batch, Recorded; MemLog in memory), the
// seam that decides how each call is resolved (Resolver, Resolution:
// Answer, AnswerError, Live, StopWith; Call, CallKind, CallRef; Observer,
// Annotator), the live answers from outside (Signals, Interrupts, Streams;
// MemInbox), the run's Clock, the events a run writes (Event), call
// fingerprints and volatile fields (Fingerprint, FingerprintRules,
// VolatileOf, ValidateAnswer), the errors of model clients (ModelError),
// and building the registry a binary serves (Build).
//
// Its names are aliases and thin wrappers of flow's implementation
// (flow/internal/core), so a host and the targets it runs share every type:
// a host.Runtime runs targets registered in a flow.Registry. Target authors
// do not need this package. host imports flow (the author's types its
// functions take), bundle, bundle/volatile, messages and
// flow/internal/core, and nothing else of the project.
package host
