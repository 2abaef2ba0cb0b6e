// Package core is the implementation behind flow and flow/host: the
// registry of targets, the typed calls, call keys and fingerprints, effects,
// the journal events a run writes, and the runtime that executes targets
// durably, resuming from their own journal. Nothing outside flow imports it:
// target authors use flow (the author's half of its names) and hosts use
// flow/host (the other half), both aliases and thin wrappers of what is here.
//
// core imports bundle and bundle/volatile (types and the volatile-field
// rules), canonjson, runevent (the event type it shares with the journal),
// messages (reason codes), its sibling flow/internal/resultjson and
// internal/callkeys (MemLog's index of results), and nothing else of the
// project; outside it, only the OpenTelemetry trace
// API, through which a call made under a recording span (a traced run)
// gets a span of its own (trace.go). It must not import journal, replay,
// worker, cli or store: the journal adapts itself to Log, and the replay
// engine plugs in through Resolver.
//
// # Running a call
//
// Every call is journaled before the target sees its result. For a call at
// position i of a run:
//
//  1. If the run's journal (read when the run starts) recorded a call at
//     position i, the call must have the same identity (kind and key) and
//     fingerprint, or the run stops with replay_input_changed. If that call is
//     done, its recorded result (or error) is returned without running
//     anything. If it was started but never finished, it runs again below,
//     without a second call:start.
//  2. Otherwise the Resolver decides: run live (the default), use an answer
//     the resolver supplies, or stop the run with a reason code.
//  3. A new call appends call:start (with its input) before it runs; then
//     call:done and the result record are appended together, and only then is
//     the result returned to the target.
//
// Errors returned by a call (a step's function, a tool, a model client) are
// recorded as the result's error {"type", "message"} and returned to the
// target as a *CallError, live and on replay alike, so a target sees the same
// error value both times.
//
// Target code must be deterministic given its call results, and must make the
// calls of one run one at a time (Gather is the way to fan out).
package core
