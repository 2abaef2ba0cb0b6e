// Package bench holds benchmarks that compare the project with other
// software (asynq, a bare Valkey streams consumer, Temporal's workflow
// replayer) in the same invocation.
//
// BenchmarkCaseRunVsTemporal puts `pyrula case run FILE --replay-only` of a
// recorded workflow of N read calls next to Temporal's anchor: the Go SDK's
// WorkflowReplayer replaying the JSON history file of a completed run of
// the same workflow as N activities, with the same inputs and results. The
// history is generated with the Temporal API's types, event by event as a
// server records it, and written as `temporal workflow show --output json`
// writes it; its tests check that the replayer accepts it and rejects a
// workflow that diverges from it. The -case-calls flag sets the sizes:
//
//	go test -run '^$' -bench CaseRunVsTemporal -benchtime 3x .
//
// It is a module of its own (github.com/pyrula/caseworker/bench) so that the
// anchors' dependencies never reach the main module. It has no code of its
// own besides the benchmarks; see docs/performance.md for how to run them.
package bench
