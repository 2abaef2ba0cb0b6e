// Package replay is the case-run engine of docs/cli.md, "case run": it starts a new run
// of a registered target from a saved case (a bundle), verifies that the
// target consumes the recorded prefix, resolves every later call down the
// ladder (reused, simulated, live / changed, or a stop with a reason code),
// enforces the live budget, allow-write tokens and the cost ceiling, and
// reports one call line per new post-fork call and one outcome line.
// Prefix verification forgives the differences that --model and
// --prompt-file make to model calls; the ladder does not (such a call is
// changed and runs live). A signal the case run sends itself in the case
// run reaches its receive: the receive gets the sent payload, not the
// recorded one (see docs/cli.md, "case run"). Recorded calls are compared
// under the volatile-field rules the bundle recorded (registration.volatile),
// not the code's; a divergence lists the paths those rules ignore apart and
// says when the code's rules for the call differ (RulesChange).
//
// The CLI (`pyrula case run`) and the worker (run_case messages) both enter
// through RunCase (decode, target, options, model client, run; a refusal is
// a *CaseError with its reason code) and get the same lines; the worker
// writes the outcome of a case run that never started as a Refusal. The
// engine also writes the lines into the new run's journal as case:call and
// case:outcome events, stamped by the case run's clock: a call's case:call
// in the same append as its call:done (the engine is the runtime's
// host.Annotator), case:outcome before the terminal event.
//
// The files follow the engine's parts: engine.go (Run and the engine's
// state), prefix.go (prefix verification and what a divergence says),
// ladder.go (the rungs: recording, supplied answer, live within the
// budget and the cost ceiling), model.go (the run's model and recorded
// inputs), observe.go (call lines, spend, the outcome), caselog.go (the
// journal the runtime writes through, children, the jumping clock),
// report.go (the lines' types), entry.go (RunCase, Refusal).
//
// replay imports flow, bundle (bundle/volatile for the rules) and messages. It must not import cli, worker
// or any journal backend: the caller passes the journal as a host.Log.
package replay
