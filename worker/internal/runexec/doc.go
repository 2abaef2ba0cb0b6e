// Package runexec is the worker's run executor: it consumes the runs
// stream, executes each submitted run (start_run through the flow runtime,
// run_case through replay.RunCase) under its journal lease, renewed while
// it runs, counts transient failures per run and dead-letters a run that
// failed too often or cannot be executed. It gets its collaborators (the
// Valkey client, the journal, the registry, the model clients, the fixture
// store) as a Deps struct and reports what it does through the callbacks
// of Report, as the worker's metrics need; it never reaches into the
// worker or its message intake, and shares with the intake only the wire
// names of worker/internal/runwire.
//
// runexec imports flow, flow/journallog, journal, journal/capture,
// journal/valkeyjournal, bundle, messages, replay, store, version,
// worker/internal/consumer, worker/internal/replicas and
// worker/internal/runwire.
package runexec
