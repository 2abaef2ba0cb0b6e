// Package worker is the queue consumer of the case worker (docs/worker.md): it
// reads messages from a Valkey stream with a consumer group, dispatches them
// (save_case, delete_case_bundle; run_case and start_run are answered
// "not supported yet"), publishes one reply per message to its reply_to
// stream, keeps an idempotency record per message id, acks only after the
// work is durable, reclaims and retries transient failures with a backoff
// and dead-letters messages that keep failing. Worker has Start and Stop.
//
// worker imports journal, store, flow and messages; never cli or cmd.
// docs/worker.md describes the protocol as implemented.
package worker
