package flow

import (
	"context"
	"encoding/json"
	"time"

	"github.com/pyrula/caseworker/flow/internal/core"
)

// Agent defines an agent target: a body that calls models (Model) and tools
// (CallTool, RunTools), with inputs I and result O.
type Agent[I, O any] = core.Agent[I, O]

// AgentLoop runs the standard agent loop inside an agent's Run: the model
// (Model, with the agent's model, system prompt and tools) on msgs, then
// the tools it asked for (RunTools), then the model again on the longer
// conversation, until the model answers without asking for a tool. Every
// model call and every tool use is a recorded call. After maxTurns model
// calls without an answer it returns an error matching ErrMaxTurns ("no
// answer after N turns"); maxTurns below 1 means 1.
func AgentLoop(ctx context.Context, msgs []Message, maxTurns int) (LoopResult, error) {
	return core.AgentLoop(ctx, msgs, maxTurns)
}

// Block is one content block: "text" (Text), "tool_use" (ID, Name, Input) or
// "tool_result" (ToolUseID, Content, IsError).
type Block = core.Block

// CallError is an error returned by a call and recorded as the result's
// error, {"type", "message"}. A target receives a *CallError from every call
// that failed, live or replayed from the journal, so that it sees the same
// error both times.
type CallError = core.CallError

// CallTool calls the agent's tool named by a tool_use block, key the
// tool-use id, effect write unless the tool is read-only or a sub-agent,
// input the tool_use input. The result is the tool's result as JSON. A tool
// the agent does not offer is a call error of type "unknown_tool". A
// sub-agent tool runs its agent as the child run "<parent run id>/tool:<id>".
func CallTool(ctx context.Context, use Block) (json.RawMessage, error) {
	return core.CallTool(ctx, use)
}

// Child runs a registered target as a child run, as the step "child:<n>",
// effect write, input {"target", "inputs"}; the result is the child's result.
// The child is a run of its own with the run id "<parent run id>/child:<n>"
// in the same Log, so a parent resumed while its child was running resumes
// the child too. A child that ends with run:error or run:cancelled is a call
// error whose type is the child's code; a suspended child suspends the parent.
func Child[O any](ctx context.Context, p ChildParams) (O, error) {
	return core.Child[O](ctx, p)
}

// ChildParams names a child run: a registered target and its inputs (an
// object of overrides of the target's defaults, or nil).
type ChildParams = core.ChildParams

// Decl declares one thing a target's body calls, for its registration:
// a StepDef, or what DeclareStep, DeclareChild, DeclareSignalSend and
// DeclareGather return.
type Decl = core.Decl

// DeclareChild declares a child run of target (Child). The n-th child
// declared gets the registration id "child:<n>", so declare children in the
// order the body starts them.
func DeclareChild(target string) Decl {
	return core.DeclareChild(target)
}

// DeclareGather declares the gather with the given id (Gather), id
// "gather:<id>".
func DeclareGather(id string) Decl {
	return core.DeclareGather(id)
}

// DeclareSignalSend declares a send of signal (SendSignal), id
// "sigsend:<n>" by declaration order.
func DeclareSignalSend(signal string) Decl {
	return core.DeclareSignalSend(signal)
}

// DeclareStep declares a step called inline with Step: its name and
// effect. A StepDef declares itself.
func DeclareStep(name string, effect Effect) StepDecl {
	return core.DeclareStep(name, effect)
}

// DefaultErrorType is the type recorded for a call error that is neither a
// *CallError nor an ErrorType.
const DefaultErrorType = core.DefaultErrorType

// DefaultMaxTokens is the answer bound of an agent that sets no MaxTokens.
const DefaultMaxTokens = core.DefaultMaxTokens

// DefineStep returns a step definition.
func DefineStep[I, O any](name string, effect Effect, fn func(ctx context.Context, in I) (O, error)) StepDef[I, O] {
	return core.DefineStep[I, O](name, effect, fn)
}

// Dep returns the first value of the run's dependency set that is a T (a
// type or an interface), and whether there is one.
func Dep[T any](ctx context.Context) (T, bool) {
	return core.Dep[T](ctx)
}

// Deps is a dependency set: values a target's steps and tools read from
// their context with Dep instead of building the real thing, such as a
// fake payment client for CI or a sandbox API's client. A package
// registers sets by name (Registry.RegisterDeps); a run uses one when it is
// given one (RunParams.Deps, which a host picks by name),
// and its children use it too. Without one, Dep reports false and the code
// uses its own. A dependency set changes what live calls do, never a
// call's input or fingerprint: recorded calls replay the same.
type Deps = core.Deps

// Effect says what a call does to the outside world: runevent.Effect
// (Valid reports whether it is one of Read, Write and Pure).
type Effect = core.Effect

// ErrDuplicateTarget: a target is already registered under the name.
var ErrDuplicateTarget = core.ErrDuplicateTarget

// ErrInvalidTarget: a target definition is incomplete or inconsistent.
var ErrInvalidTarget = core.ErrInvalidTarget

// ErrMaxTurns is the error of an agent loop that made its last model call
// without an answer: the model still asked for tools.
var ErrMaxTurns = core.ErrMaxTurns

// ErrNoRun: a call was made outside a run (or inside a step's function,
// whose context carries no run: nested calls are not journaled).
var ErrNoRun = core.ErrNoRun

// ErrRunCancelled is the cause to cancel a run's context with
// (context.WithCancelCause) to end the run with run:cancelled. Any other
// cancellation abandons the run without a terminal event, as a crash
// would, so that it can be resumed.
var ErrRunCancelled = core.ErrRunCancelled

// ErrSuspended: the run cannot go on until an answer arrives from outside
// (an interrupt without an answer). The run ends with status suspended
// and no terminal event; running it again resumes it.
var ErrSuspended = core.ErrSuspended

// ErrorType may be implemented by errors that calls return, to name the type
// recorded for them.
type ErrorType = core.ErrorType

// Errorf returns a *CallError of the given type with a formatted message: the
// way for a step, tool or model client to fail with a named error type.
func Errorf(typ string, format string, args ...any) *CallError {
	return core.Errorf(typ, format, args...)
}

// Gather runs several child runs concurrently and records their results as
// one step, "gather:<id>", effect write, input {"children": [{"target",
// "inputs"}, …]}; the result is the array of the children's results, in
// order. Child i has the run id "<parent run id>/gather:<id>/<i>". The first
// failed child (in order) makes the gather's error; id must be unique in the
// run.
func Gather[O any](ctx context.Context, id string, children []ChildParams) ([]O, error) {
	return core.Gather[O](ctx, id, children)
}

// InputSchema returns the JSON Schema of the Go type I as a tool's input:
// what provider clients send as a tool's input_schema (parameters). It is
// derived with the type's JSON field names (encoding/json tags) and inlines
// nested types; a field without omitempty is required. A type that does not
// encode as a JSON object gives {"type":"object"}, since tool inputs are
// objects.
func InputSchema[I any]() json.RawMessage {
	return core.InputSchema[I]()
}

// Interrupt asks a person (through Interrupts) and returns the answer, key
// "<name>:<n>", effect read; request is the input. When a live run finds no
// answer yet, the call returns an error wrapping ErrSuspended and the run
// ends with status suspended (no terminal event, the call:start stays in the
// journal); running the run again once an answer is there resumes it.
func Interrupt(ctx context.Context, name string, request any) (InterruptAnswer, error) {
	return core.Interrupt(ctx, name, request)
}

// InterruptAnswer is a person's answer to an interrupt: {"action", "value"}.
type InterruptAnswer = core.InterruptAnswer

// LoopResult is how an agent loop ended.
type LoopResult = core.LoopResult

// Message is one message of a conversation. Its content is a plain string
// (Text, when Blocks is nil) or a list of blocks.
type Message = core.Message

// Model calls the run's model client, key "<n>", effect read. The request's
// JSON form {"model", "system", "messages", "tools"} is the input: an empty
// Model or System is filled from the agent, a nil Tools with the names of
// all the agent's tools, and RunParams.Model and RunParams.System replace
// them when set. The answer is decoded as a ModelResponse (a recorded or
// supplied string answer becomes one text block).
func Model(ctx context.Context, req ModelRequest) (ModelResponse, error) {
	return core.Model(ctx, req)
}

// ModelClient calls a language model: the live side of Model. The real
// provider client implements it; examples use deterministic local ones.
type ModelClient = core.ModelClient

// ModelClientFunc adapts a function to ModelClient.
type ModelClientFunc = core.ModelClientFunc

// ModelRequest is a model call's input; its JSON form is what the call's
// fingerprint is computed from: {"model", "system", "messages", "tools"}.
// Model and System are part of the request, so a case run can change them
// (RunParams.Model, RunParams.System) and see the fingerprint change.
type ModelRequest = core.ModelRequest

// ModelResponse is a model call's result: {"role": "assistant", "content":
// [...]} with optional stop_reason and usage. A plain string decodes as an
// assistant answer with one text block.
type ModelResponse = core.ModelResponse

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry {
	return core.NewRegistry()
}

// NewTool returns a tool that decodes its input (the tool_use input) into an
// I and runs fn. The tool is a write unless marked ReadOnly. An input that
// does not decode is recorded as a call error of type "invalid_tool_input".
func NewTool[I, O any](name string, description string, fn func(ctx context.Context, in I) (O, error)) ToolDef {
	return core.NewTool[I, O](name, description, fn)
}

// Now reads the run's clock, key "<n>", effect pure, input {}; the result is
// an RFC 3339 string, so a replay sees the recorded time.
func Now(ctx context.Context) (time.Time, error) {
	return core.Now(ctx)
}

// Pure calls depend only on their input (and on the run's clock or
// randomness); they never count against a live budget.
const Pure = core.Pure

// Random returns a random number in [0, 1), key "<n>", effect pure, input
// {}; a replay sees the recorded number.
func Random(ctx context.Context) (float64, error) {
	return core.Random(ctx)
}

// Read calls observe the outside world without changing it.
const Read = core.Read

// ReadStream reads the next item of an external stream, key "<name>:<n>",
// effect read, with an explicit input (a cursor, a filter); the item is
// decoded into an O.
func ReadStream[I, O any](ctx context.Context, name string, input I) (O, error) {
	return core.ReadStream[I, O](ctx, name, input)
}

// ReceiveSignal waits for the next signal named name sent to this run, key
// "<name>:<n>", effect read, input {"name", "timeout_seconds"}. The result
// is {"payload": …}, and the payload is decoded into a T. With a positive
// timeout, the wait ends at a wake_at recorded on call:start (a resumed run
// waits only what is left): then ok is false, the result is {"payload":
// null, "timed_out": true} and the payload is T's zero value. Without one a
// live run waits until the signal comes or its context is done.
func ReceiveSignal[T any](ctx context.Context, name string, timeout time.Duration) (payload T, ok bool, err error) {
	return core.ReceiveSignal[T](ctx, name, timeout)
}

// RegisterAgent adds an agent to r. Errors: ErrDuplicateTarget,
// ErrInvalidTarget.
func RegisterAgent[I, O any](r *Registry, a Agent[I, O]) error {
	return core.RegisterAgent[I, O](r, a)
}

// RegisterWorkflow adds a workflow to r. Errors: ErrDuplicateTarget,
// ErrInvalidTarget.
func RegisterWorkflow[I, O any](r *Registry, w Workflow[I, O]) error {
	return core.RegisterWorkflow[I, O](r, w)
}

// Registry holds targets by name. It is safe for concurrent use; register
// targets before running them.
type Registry = core.Registry

// RunID returns the id of the run whose target's context ctx is, or "".
func RunID(ctx context.Context) string {
	return core.RunID(ctx)
}

// RunTools calls every tool a model answer asks for, in order, and returns
// the user message of tool_result blocks to continue the conversation with.
// A tool's call error becomes a tool_result with is_error and the error's
// message; other errors (the run stopped, suspended or was abandoned) are
// returned.
func RunTools(ctx context.Context, resp ModelResponse) (Message, error) {
	return core.RunTools(ctx, resp)
}

// SendSignal sends a signal to a run (this one or another) as the step
// "sigsend:<n>", effect write, input {"run_id", "name", "payload"}; the
// result is null.
func SendSignal(ctx context.Context, p SignalParams) error {
	return core.SendSignal(ctx, p)
}

// SignalParams is one signal: its target run, name and payload.
type SignalParams = core.SignalParams

// Sleep is a durable timer, key "<n>", effect pure, input {"seconds": d}.
// Its call:start records wake_at, the time it ends; a live run waits until
// then, and a run resumed after a crash during the sleep waits only what is
// left. Its result is null.
func Sleep(ctx context.Context, d time.Duration) error {
	return core.Sleep(ctx, d)
}

// Step runs fn(ctx, input) as the step name, key "<name>:<n>" for the n-th
// (0-based) call of that name in the run. Its fingerprint is that of input
// without the fields the target declares volatile for the step;
// its result must encode as JSON, and the target receives it decoded from the
// JSON that was journaled. fn's context carries no run: calls made inside fn
// fail with ErrNoRun. An error from fn is recorded and returned as a
// *CallError.
func Step[I, O any](ctx context.Context, name string, input I, fn func(ctx context.Context, in I) (O, error), opts ...StepOption) (O, error) {
	return core.Step[I, O](ctx, name, input, fn, opts...)
}

// StepDecl declares a step called inline with Step (DeclareStep).
type StepDecl = core.StepDecl

// StepDef is a step defined once with its name, effect and function, so the
// same definition serves calls (Call) and registration (it is a Decl: put it
// in the target's Steps).
type StepDef[I, O any] = core.StepDef[I, O]

// StepOption configures a step call.
type StepOption = core.StepOption

// SubAgentTool returns a tool that runs the registered agent named agent as a
// child run, with the tool_use input as its inputs; the tool's result is the
// agent's result. Sub-agent tools are reads.
func SubAgentTool(name string, description string, agent string) ToolDef {
	return core.SubAgentTool(name, description, agent)
}

// TextBlock returns a text block.
func TextBlock(text string) Block {
	return core.TextBlock(text)
}

// ToolDef is a tool an agent offers. Build it with NewTool or SubAgentTool.
type ToolDef = core.ToolDef

// ToolSpec describes a tool offered to the model.
type ToolSpec = core.ToolSpec

// ToolUseBlock returns a tool_use block; input is encoded as JSON.
func ToolUseBlock(id string, name string, input any) Block {
	return core.ToolUseBlock(id, name, input)
}

// Usage counts a model call's tokens.
type Usage = core.Usage

// UserText returns a user message with plain text content.
func UserText(text string) Message {
	return core.UserText(text)
}

// WithEffect declares the step's effect at the call. A step that declares
// none takes the effect its target declared in Steps, else Write; declaring
// one that differs from the target's declaration stops the run with
// runtime_error.
func WithEffect(e Effect) StepOption {
	return core.WithEffect(e)
}

// Workflow defines a workflow target whose inputs are an I and whose result
// is an O.
type Workflow[I, O any] = core.Workflow[I, O]

// Write calls change the outside world.
const Write = core.Write
