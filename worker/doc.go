// Package worker is the queue consumer of the case worker: it reads
// messages from a Valkey stream with a consumer group, dispatches them
// (save_case, delete_case_bundle, start_run, run_case), publishes one reply
// per message to its reply_to stream, keeps an idempotency record per
// message id, acks only after the work is durable, reclaims and retries
// transient failures with a backoff and dead-letters messages that keep
// failing. start_run and run_case submit a run to the runs stream, which the
// worker's executor consumes: it takes the run's lease, executes the run in
// the flow runtime (a case run through replay.Run) and resumes runs whose
// worker died. Worker has Start and Stop.
//
// worker imports the layers below it (bundle, journal and its backends,
// journal/capture, store and store/resolve, flow, llm, replay, messages);
// never cli, daemon or cmd. docs/protocol.md is the protocol it speaks,
// docs/worker.md its configuration, metrics and robustness.
package worker
