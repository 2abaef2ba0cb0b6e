// Package bench holds benchmarks that compare the project with other
// software (asynq, a bare Valkey streams consumer) in the same invocation.
//
// It is a module of its own (github.com/pyrula/caseworker/bench) so that the
// anchors' dependencies never reach the main module. It has no code of its
// own besides the benchmarks; see docs/performance.md for how to run them.
package bench
