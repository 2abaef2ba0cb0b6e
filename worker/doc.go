// Package worker is the face of the case worker's queue consumer: its
// configuration (Config, read from PYRULA_* settings), its wiring, its
// HTTP endpoints and metrics, and what its two services share (the groups
// of both streams, the model clients, the fixture store). Worker has Start
// and Stop.
//
// The work is done by two services under worker/internal, each with its
// collaborators given as a Deps struct and its reports as callbacks: the
// message intake (worker/internal/intake) reads messages from a Valkey
// stream with a consumer group, dispatches them (save_case,
// delete_case_bundle, start_run, run_case), publishes one reply per message
// to its reply_to stream, keeps an idempotency record per message id, acks
// only after the work is durable, retries transient failures with a
// backoff and dead-letters messages that keep failing; start_run and
// run_case submit a run to the runs stream, which the run executor
// (worker/internal/runexec) consumes: it takes the run's lease, executes
// the run in the flow runtime (a case run through replay.RunCase) and
// resumes runs whose worker died.
//
// worker imports the layers below it (bundle, journal and its backends,
// journal/capture, store and store/resolve, flow, llm, replay, messages);
// never cli, daemon or cmd. docs/protocol.md is the protocol it speaks,
// docs/worker.md its configuration, metrics and robustness.
package worker
