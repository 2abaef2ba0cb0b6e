// Package flow is the SDK that targets (workflows and agents) are written
// against: everything a target author uses, and nothing a host needs.
//
// A target registers itself in a Registry (RegisterWorkflow, RegisterAgent)
// with its declared steps and tools (DefineStep, DeclareStep, DeclareChild,
// NewTool, SubAgentTool) and input defaults, and makes its calls through
// flow, each one recorded in the run's journal before the target sees its
// result: steps (Step, a StepDef's Call) with their Effect (Pure, Read,
// Write), model calls (Model, AgentLoop for the standard model-tools-model
// loop, RunTools, CallTool), durable time and randomness (Sleep, Now,
// Random), signals (ReceiveSignal, SendSignal), interrupts (Interrupt),
// streams (ReadStream), child runs (Child, Gather) and dependencies given
// by the host (Dep). A failed call comes back as a *CallError, the same
// live and replayed.
//
// Target code must be deterministic given its call results, and must make
// the calls of one run one at a time (Gather is the way to fan out).
//
// What runs targets (the runtime, its journal, resolvers, fingerprints,
// events, model clients' errors) is in flow/host. flow imports only its
// implementation, flow/internal/core, and nothing else of the project.
package flow
