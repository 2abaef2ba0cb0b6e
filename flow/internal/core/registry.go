package core

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/bundle/volatile"
	"github.com/pyrula/caseworker/canonjson"
)

// Registry holds targets by name. It is safe for concurrent use; register
// targets before running them.
type Registry struct {
	mu      sync.RWMutex
	targets map[string]*target
	clients map[string]ModelClient // named live model clients (RegisterModelClient)
	// clientPkgs are the import paths of the packages that registered them.
	clientPkgs map[string]string
	// depSets are the dependency sets (RegisterDeps), depPkgs the packages
	// that registered them.
	depSets map[string]Deps
	depPkgs map[string]string
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry { return &Registry{targets: make(map[string]*target)} }

// Workflow defines a workflow target whose inputs are an I and whose result
// is an O.
type Workflow[I, O any] struct {
	// Name is the target's name; required, unique in the registry.
	Name string
	// CodeVersion names the code, e.g. "git:3f9a1c2"; required, written on
	// run:start and into saved cases, so a case says which code recorded it.
	CodeVersion string
	// Defaults are the inputs' defaults. Encoded as JSON they must be an
	// object; its keys are the inputs the target accepts (every input needs
	// a default, so do not use omitempty), and a run with no inputs runs on
	// these values.
	Defaults I
	// Steps declare what the body calls, for registration.steps: steps
	// (a StepDef, or DeclareStep for a Step called inline), child runs
	// (DeclareChild), signal sends (DeclareSignalSend) and gathers
	// (DeclareGather). Registration derives each entry's id: a step's is its
	// name, the n-th declared child's "child:<n>" (declare children in the
	// order the body starts them), likewise "sigsend:<n>", and a gather's
	// "gather:<id>". A step call that gives no effect takes the one declared
	// here, else Write.
	Steps []Decl
	// Run is the workflow's body.
	Run func(ctx context.Context, in I) (O, error)
}

// Agent defines an agent target: a body that calls models (Model) and tools
// (CallTool, RunTools), with inputs I and result O.
type Agent[I, O any] struct {
	// Name is the target's name; required, unique in the registry.
	Name string
	// CodeVersion names the code; required (see Workflow.CodeVersion).
	CodeVersion string
	// Model is the model id used when a model request names none; required.
	Model string
	// System is the system prompt used when a model request gives none.
	System string
	// VolatilePrompt are regular expressions (Go's RE2 syntax) whose
	// matches in the system prompt and in the messages' text do not count
	// in the fingerprints of the agent's model calls, e.g. `(?m)^Today is
	// .*$` for a date line. Registration checks them and records them in
	// registration.volatile; the recorded input keeps the real text.
	VolatilePrompt []string
	// Client is the agent's model client. Runtime.Run uses, in order,
	// RunParams.Models, this client, Config.Models.
	Client ModelClient
	// MaxTokens bounds each model answer (DefaultMaxTokens when 0).
	MaxTokens int64
	// Defaults are the inputs' defaults (see Workflow.Defaults).
	Defaults I
	// Tools are every tool the agent offers: registration.tools.
	Tools []ToolDef
	// Steps declare what the agent's body calls besides models and tools
	// (see Workflow.Steps).
	Steps []Decl
	// Run is the agent's body.
	Run func(ctx context.Context, in I) (O, error)
}

// TargetInfo describes a registered target: what `pyrula targets` prints and
// what a bundle's manifest records.
type TargetInfo struct {
	// Name is the target's registered name.
	Name string `json:"name"`
	// Kind is workflow or agent.
	Kind bundle.Kind `json:"kind"`
	// CodeVersion is the target's code version.
	CodeVersion string `json:"code_version"`
	// Registration lists the steps and (for agents) tools the target offers.
	Registration bundle.Registration `json:"registration"`
	// Inputs are the inputs the target accepts with their defaults, as a
	// canonical JSON object.
	Inputs json.RawMessage `json:"inputs"`
	// Model is an agent's default model id.
	Model string `json:"model,omitempty"`
	// Package is the import path of the Go package whose code registered
	// the target (the caller of RegisterWorkflow or RegisterAgent), so
	// that a target can be named as "<package>:<name>"
	// (Registry.Resolve); empty when it cannot be told.
	Package string `json:"package,omitempty"`
}

type target struct {
	info        TargetInfo
	system      string
	client      ModelClient
	maxTokens   int64
	inputSchema json.RawMessage // the inputs' JSON Schema, for sub-agent tools
	stepEffects map[string]Effect
	stepRules   map[string]*volatile.Rules // declared steps' volatile fields, by name
	promptRules *volatile.Rules            // an agent's volatile prompt patterns
	tools       map[string]*ToolDef
	toolSpecs   []ToolSpec
	children    []string            // targets of declared child runs, checked by Registry.Check
	declared    map[string][]string // declared child targets, signal names and gather ids by kind
	decode      func(json.RawMessage) (any, error)
	run         func(ctx context.Context, in any) (any, error)
	steps       sync.Map // step name → *stepInfo, made at the name's first call
}

// stepInfo is what every call of a step name needs from its target, looked
// up once per name instead of once per call.
type stepInfo struct {
	token    string // "step:<name>": the calls' token and counter's name
	effect   Effect // the declared effect, when declared
	declared bool
	rules    *volatile.Rules // the declared volatile fields; nil when none
}

// step returns the stepInfo of the step name.
func (t *target) step(name string) *stepInfo {
	if si, ok := t.steps.Load(name); ok {
		return si.(*stepInfo)
	}
	effect, declared := t.stepEffects[name]
	si, _ := t.steps.LoadOrStore(name, &stepInfo{token: "step:" + name, effect: effect, declared: declared, rules: t.stepRules[name]})
	return si.(*stepInfo)
}

// RegisterWorkflow adds a workflow to r. Errors: ErrDuplicateTarget,
// ErrInvalidTarget.
func RegisterWorkflow[I, O any](r *Registry, w Workflow[I, O]) error {
	t, err := newTarget(w.Name, bundle.KindWorkflow, w.CodeVersion, w.Defaults, w.Steps, w.Run)
	if err != nil {
		return err
	}
	t.info.Package = callerPackage()
	return r.add(t)
}

// RegisterAgent adds an agent to r. Errors: ErrDuplicateTarget,
// ErrInvalidTarget.
func RegisterAgent[I, O any](r *Registry, a Agent[I, O]) error {
	t, err := newTarget(a.Name, bundle.KindAgent, a.CodeVersion, a.Defaults, a.Steps, a.Run)
	if err != nil {
		return err
	}
	t.info.Package = callerPackage()
	if a.Model == "" {
		return fmt.Errorf("%w: agent %s: Model is required", ErrInvalidTarget, a.Name)
	}
	t.info.Model = a.Model
	t.system = a.System
	t.client = a.Client
	if a.MaxTokens < 0 {
		return fmt.Errorf("%w: agent %s: MaxTokens %d is negative", ErrInvalidTarget, a.Name, a.MaxTokens)
	}
	t.maxTokens = cmp.Or(a.MaxTokens, DefaultMaxTokens)
	if len(a.VolatilePrompt) > 0 {
		rules, err := volatile.Compile(volatile.Spec{Prompt: slices.Clone(a.VolatilePrompt)})
		if err != nil {
			return fmt.Errorf("%w: agent %s: %v", ErrInvalidTarget, a.Name, err)
		}
		t.promptRules = rules
		t.volatile().Prompt = rules.Spec().Prompt
	}
	for i := range a.Tools {
		tool := a.Tools[i]
		if tool.name == "" || (tool.fn == nil && tool.subAgent == "") {
			return fmt.Errorf("%w: agent %s: tool %d is not defined (use NewTool or SubAgentTool)", ErrInvalidTarget, a.Name, i)
		}
		if t.tools[tool.name] != nil {
			return fmt.Errorf("%w: agent %s: tool %s offered twice", ErrInvalidTarget, a.Name, tool.name)
		}
		rules, err := volatile.Compile(volatile.Spec{Fields: tool.volatile})
		if err != nil {
			return fmt.Errorf("%w: agent %s: tool %s: %v", ErrInvalidTarget, a.Name, tool.name, err)
		}
		tool.rules = rules
		if rules != nil {
			v := t.volatile()
			if v.Tools == nil {
				v.Tools = map[string][]string{}
			}
			v.Tools[tool.name] = tool.volatile
		}
		t.tools[tool.name] = &tool
		t.info.Registration.Tools = append(t.info.Registration.Tools, bundle.Tool{Name: tool.name, Writes: tool.Writes()})
		t.toolSpecs = append(t.toolSpecs, ToolSpec{Name: tool.name, Description: tool.description, Writes: tool.Writes(), InputSchema: tool.schema})
	}
	return r.add(t)
}

func newTarget[I, O any](name string, kind bundle.Kind, codeVersion string, defaults I, steps []Decl, run func(context.Context, I) (O, error)) (*target, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: a target needs a name", ErrInvalidTarget)
	}
	if run == nil {
		return nil, fmt.Errorf("%w: %s: Run is nil", ErrInvalidTarget, name)
	}
	if codeVersion == "" {
		return nil, fmt.Errorf("%w: %s: CodeVersion is required (a name of the code, such as git:3f9a1c2)", ErrInvalidTarget, name)
	}
	raw, err := json.Marshal(defaults)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: encode defaults: %v", ErrInvalidTarget, name, err)
	}
	canon, err := canonjson.Canonicalize(raw)
	if err != nil || !bytes.HasPrefix(canon, []byte("{")) {
		return nil, fmt.Errorf("%w: %s: defaults must encode as a JSON object, got %s", ErrInvalidTarget, name, raw)
	}
	t := &target{
		info: TargetInfo{
			Name:         name,
			Kind:         kind,
			CodeVersion:  codeVersion,
			Registration: bundle.Registration{Tools: []bundle.Tool{}, Steps: []bundle.Step{}},
			Inputs:       canon,
		},
		inputSchema: inputsSchema[I](),
		stepEffects: make(map[string]Effect),
		stepRules:   make(map[string]*volatile.Rules),
		tools:       make(map[string]*ToolDef),
		decode: func(raw json.RawMessage) (any, error) {
			var in I
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&in); err != nil {
				return nil, err
			}
			return in, nil
		},
		run: func(ctx context.Context, in any) (any, error) { return run(ctx, in.(I)) },
	}
	if err := t.declareSteps(steps); err != nil {
		return nil, err
	}
	return t, nil
}

// declareSteps records the target's step declarations in its
// registration: each step's id (children, signal sends and gathers get
// ids of their kind), effect and volatile-field rules, refusing a nil or
// unnamed declaration, a bad spec and an id declared twice.
func (t *target) declareSteps(steps []Decl) error {
	name := t.info.Name
	ids := make(map[string]bool)
	counts := map[string]int{}
	for i, d := range steps {
		if d == nil {
			return fmt.Errorf("%w: %s: step declaration %d is nil", ErrInvalidTarget, name, i)
		}
		dl := d.declaration()
		s := bundle.Step{ID: dl.name, Name: dl.name, Effect: string(dl.effect)}
		switch dl.kind {
		case stepChild, stepSigSend:
			s = bundle.Step{ID: dl.kind + ":" + strconv.Itoa(counts[dl.kind]), Name: dl.name, Effect: string(Write)}
			counts[dl.kind]++
		case stepGather:
			s = bundle.Step{ID: stepGather + ":" + dl.name, Name: dl.name, Effect: string(Write)}
		}
		if dl.kind == stepChild {
			t.children = append(t.children, dl.name)
		}
		if dl.kind != "" {
			if t.declared == nil {
				t.declared = map[string][]string{}
			}
			t.declared[dl.kind] = append(t.declared[dl.kind], dl.name)
		}
		if dl.name == "" {
			return fmt.Errorf("%w: %s: step declaration %d has no name", ErrInvalidTarget, name, i)
		}
		if err := checkStepSpec(s); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrInvalidTarget, name, err)
		}
		if ids[s.ID] {
			return fmt.Errorf("%w: %s: step id %s declared twice", ErrInvalidTarget, name, s.ID)
		}
		ids[s.ID] = true
		if err := t.stepVolatile(s, dl.volatile); err != nil {
			return err
		}
		if !isReservedStepID(s.ID) {
			t.stepEffects[s.Name] = Effect(s.Effect)
		}
		t.info.Registration.Steps = append(t.info.Registration.Steps, s)
	}
	return nil
}

// stepVolatile compiles and records step s's volatile-field rules, if it
// declares any.
func (t *target) stepVolatile(s bundle.Step, fields []string) error {
	if len(fields) == 0 {
		return nil
	}
	rules, err := volatile.Compile(volatile.Spec{Fields: fields})
	if err != nil {
		return fmt.Errorf("%w: %s: step %s: %v", ErrInvalidTarget, t.info.Name, s.ID, err)
	}
	v := t.volatile()
	if v.Steps == nil {
		v.Steps = map[string][]string{}
	}
	v.Steps[s.Name] = fields
	t.stepRules[s.Name] = rules
	return nil
}

// volatile returns the target's recorded volatile-field rules, creating
// them on first use (a target without rules records none).
func (t *target) volatile() *bundle.Volatile {
	if t.info.Registration.Volatile == nil {
		t.info.Registration.Volatile = &bundle.Volatile{}
	}
	return t.info.Registration.Volatile
}

// checkDeclared returns an error naming what to add to the target's Steps
// when its body starts a child run of, sends a signal of, or gathers under
// a name its registration does not declare. (More children of a declared
// target than were declared, as a loop starts them, are allowed: their ids
// continue the count.)
func (t *target) checkDeclared(kind, name string) error {
	if slices.Contains(t.declared[kind], name) {
		return nil
	}
	decl := map[string]string{stepChild: "flow.DeclareChild", stepSigSend: "flow.DeclareSignalSend", stepGather: "flow.DeclareGather"}[kind]
	what := map[string]string{stepChild: "a child run of", stepSigSend: "a signal send of", stepGather: "the gather"}[kind]
	return fmt.Errorf("%s: %s %q is not declared: add %s(%q) to the target's Steps", t.info.Name, what, name, decl, name)
}

// Reserved step names: the ids of child runs, signal sends and gathers.
const (
	stepChild   = "child"
	stepSigSend = "sigsend"
	stepGather  = "gather"
)

func isReservedStepID(id string) bool {
	prefix, _, ok := strings.Cut(id, ":")
	return ok && (prefix == stepChild || prefix == stepSigSend || prefix == stepGather)
}

// checkStepName reports whether name can name a step: not empty, no ':',
// and not one of the reserved names child, sigsend and gather.
func checkStepName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("a step needs a name")
	case strings.Contains(name, ":"):
		return fmt.Errorf("step name %q contains ':'", name)
	case name == stepChild || name == stepSigSend || name == stepGather:
		return fmt.Errorf("step name %q is reserved", name)
	}
	return nil
}

func checkStepSpec(s bundle.Step) error {
	if !Effect(s.Effect).Valid() {
		return fmt.Errorf("step %s: effect %q is not read, write or pure", s.ID, s.Effect)
	}
	if isReservedStepID(s.ID) {
		if s.Effect != string(Write) {
			return fmt.Errorf("step %s: child runs, signal sends and gathers are writes", s.ID)
		}
		return nil
	}
	if s.ID != s.Name {
		return fmt.Errorf("step %s: the id of a step is its name (got name %q)", s.ID, s.Name)
	}
	return checkStepName(s.Name)
}

// Decl declares one thing a target's body calls, for its registration:
// a StepDef, or what DeclareStep, DeclareChild, DeclareSignalSend and
// DeclareGather return.
type Decl interface {
	declaration() declaration
}

// declaration is what a Decl declares: a step (kind ""), a child run, a
// signal send or a gather.
type declaration struct {
	kind     string // "", stepChild, stepSigSend or stepGather
	name     string // the step's name, child's target, signal's name or gather's id
	effect   Effect
	volatile []string // a step's volatile fields, sorted (volatile.SortFields)
}

func (d declaration) declaration() declaration { return d }

// StepDecl declares a step called inline with Step (DeclareStep).
type StepDecl struct{ d declaration }

func (s StepDecl) declaration() declaration { return s.d }

// DeclareStep declares a step called inline with Step: its name and
// effect. A StepDef declares itself.
func DeclareStep(name string, effect Effect) StepDecl {
	return StepDecl{declaration{name: name, effect: effect}}
}

// Volatile returns a copy of the declaration whose step's input fields at
// paths do not count in its calls' fingerprints: a request id, a
// timestamp. A path is dot-separated object keys, "[]" for every element
// of an array and "*" for every member of an object ("request_id",
// "meta.ts", "items[].trace_id"); registration checks the paths and
// records them in registration.volatile. The call's recorded input keeps
// the real values.
func (s StepDecl) Volatile(paths ...string) StepDecl {
	s.d.volatile = volatile.SortFields(append(slices.Clone(s.d.volatile), paths...))
	return s
}

// DeclareChild declares a child run of target (Child). The n-th child
// declared gets the registration id "child:<n>", so declare children in the
// order the body starts them.
func DeclareChild(target string) Decl {
	return declaration{kind: stepChild, name: target, effect: Write}
}

// DeclareSignalSend declares a send of signal (SendSignal), id
// "sigsend:<n>" by declaration order.
func DeclareSignalSend(signal string) Decl {
	return declaration{kind: stepSigSend, name: signal, effect: Write}
}

// DeclareGather declares the gather with the given id (Gather), id
// "gather:<id>".
func DeclareGather(id string) Decl {
	return declaration{kind: stepGather, name: id, effect: Write}
}

func (r *Registry) add(t *target) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.targets[t.info.Name]; ok {
		return fmt.Errorf("%w: %s", ErrDuplicateTarget, t.info.Name)
	}
	r.targets[t.info.Name] = t
	return nil
}

func (r *Registry) get(name string) (*target, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t := r.targets[name]
	if t == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownTarget, name)
	}
	return t, nil
}

// Resolve returns the target ref names: a registered name ("order"), or
// "<package>:<name>" ("example.com/shop/flows:order"), the name of a target
// that the Go package with that import path registered (TargetInfo.Package).
// Errors wrap ErrUnknownTarget and say what is registered.
func (r *Registry) Resolve(ref string) (TargetInfo, error) {
	if info, ok := r.Lookup(ref); ok {
		return info, nil
	}
	i := strings.LastIndexByte(ref, ':')
	if i <= 0 {
		return TargetInfo{}, fmt.Errorf("%w: %q", ErrUnknownTarget, ref)
	}
	pkg, name := ref[:i], ref[i+1:]
	info, ok := r.Lookup(name)
	switch {
	case !ok:
		return TargetInfo{}, fmt.Errorf("%w: %q: package %s registers no target %q", ErrUnknownTarget, ref, pkg, name)
	case info.Package != pkg:
		return TargetInfo{}, fmt.Errorf("%w: %q: target %s is registered by package %s, not %s", ErrUnknownTarget, ref, name, cmp.Or(info.Package, "(unknown)"), pkg)
	}
	return info, nil
}

// callerPackage is the import path of the package of the function that
// called the function calling it (the caller of RegisterWorkflow,
// RegisterAgent, RegisterModelClient or RegisterDep), "" when it cannot be
// told. The wrappers of package flow, through which a target calls them,
// are not that caller: frames of flow and of this package are passed over.
func callerPackage() string {
	pcs := make([]uintptr, 8)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	for {
		f, more := frames.Next()
		if pkg := funcPackage(f.Function); pkg != "" && pkg != flowPackage && pkg != corePackage {
			return pkg
		}
		if !more {
			return ""
		}
	}
}

// flowPackage and corePackage are the import paths of the author's API and
// of this package.
const (
	flowPackage = "github.com/pyrula/caseworker/flow"
	corePackage = "github.com/pyrula/caseworker/flow/internal/core"
)

// funcPackage is the package of a function's full name:
// "example.com/shop/flows.Register.func1" or "main.main": the package path
// ends at the first dot after the last slash.
func funcPackage(name string) string {
	slash := strings.LastIndexByte(name, '/')
	dot := strings.IndexByte(name[slash+1:], '.')
	if dot < 0 {
		return ""
	}
	return name[:slash+1+dot]
}

// Lookup returns the target registered under name.
func (r *Registry) Lookup(name string) (TargetInfo, bool) {
	t, err := r.get(name)
	if err != nil {
		return TargetInfo{}, false
	}
	return t.info, true
}

// HasModelClient reports whether the target named name is an agent with a
// model client of its own (Agent.Client): one that can run its model calls
// when the run is given no client.
func (r *Registry) HasModelClient(name string) bool {
	t, err := r.get(name)
	return err == nil && t.client != nil
}

// Targets returns every registered target, sorted by name.
func (r *Registry) Targets() []TargetInfo {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := slices.Sorted(maps.Keys(r.targets))
	out := make([]TargetInfo, len(names))
	for i, n := range names {
		out[i] = r.targets[n].info
	}
	return out
}

// Build returns the registry a binary serves: reg (a new registry when
// nil) with what register adds to it, checked (Check). Its error, prefixed
// "register targets: ", names the target; the daemon and the CLI print it
// as their one error line at start-up.
func Build(reg *Registry, register func(*Registry) error) (*Registry, error) {
	if reg == nil {
		reg = NewRegistry()
	}
	if register != nil {
		if err := register(reg); err != nil {
			return nil, fmt.Errorf("register targets: %w", err)
		}
	}
	if err := reg.Check(); err != nil {
		return nil, fmt.Errorf("register targets: %w", err)
	}
	return reg, nil
}

// ReservedModelClients are the names of the built-in provider clients
// (package llm): RegisterModelClient refuses them.
var ReservedModelClients = []string{"anthropic", "openai"}

// RegisterModelClient registers c as the live model client named name, so
// that --llm-ref NAME (and a worker message's llm_ref) selects it for a
// run's model calls. name is a lowercase identifier ([a-z0-9_.-], at most
// 64 characters) other than the built-in clients' names. Errors:
// ErrInvalidTarget for a bad name, a nil client or a name registered twice.
func (r *Registry) RegisterModelClient(name string, c ModelClient) error {
	if !validClientName(name) {
		return fmt.Errorf("%w: model client name %q is not a lowercase identifier", ErrInvalidTarget, name)
	}
	if slices.Contains(ReservedModelClients, name) {
		return fmt.Errorf("%w: model client name %q is reserved for the built-in client", ErrInvalidTarget, name)
	}
	if c == nil {
		return fmt.Errorf("%w: model client %s is nil", ErrInvalidTarget, name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.clients == nil {
		r.clients = map[string]ModelClient{}
	}
	if r.clients[name] != nil {
		return fmt.Errorf("%w: model client %s registered twice", ErrInvalidTarget, name)
	}
	r.clients[name] = c
	if r.clientPkgs == nil {
		r.clientPkgs = map[string]string{}
	}
	r.clientPkgs[name] = callerPackage()
	return nil
}

// ModelClient returns the model client registered as name, or named
// "<package>:<name>": the client registered as name by the Go package with
// that import path.
func (r *Registry) ModelClient(name string) (ModelClient, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return byRef(r.clients, r.clientPkgs, name)
}

// ModelClientNames returns the names of the registered model clients,
// sorted.
func (r *Registry) ModelClientNames() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.clients))
}

func validClientName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// Check reports what registration alone could not: a declared child run of
// a target that is not registered, or a sub-agent tool whose agent is not a
// registered agent. The daemon and the CLI call it at start-up, so a bad
// registration stops the binary with one line naming the target.
func (r *Registry) Check() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(r.targets)) {
		t := r.targets[name]
		for _, child := range t.children {
			if r.targets[child] == nil {
				problems = append(problems, fmt.Sprintf("%s: declared child target %q is not registered", name, child))
			}
		}
		for _, tool := range slices.Sorted(maps.Keys(t.tools)) {
			sub := t.tools[tool].subAgent
			switch {
			case sub == "":
			case r.targets[sub] == nil:
				problems = append(problems, fmt.Sprintf("%s: sub-agent tool %s runs %q, which is not registered", name, tool, sub))
			case r.targets[sub].info.Kind != bundle.KindAgent:
				problems = append(problems, fmt.Sprintf("%s: sub-agent tool %s runs %q, which is a workflow, not an agent", name, tool, sub))
			default:
				t.setToolSchema(tool, r.targets[sub].inputSchema)
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidTarget, strings.Join(problems, "; "))
	}
	return nil
}

// setToolSchema sets the input schema of tool name, for a sub-agent tool
// whose agent's inputs are known once both are registered.
func (t *target) setToolSchema(name string, schema json.RawMessage) {
	t.tools[name].schema = schema
	for i := range t.toolSpecs {
		if t.toolSpecs[i].Name == name {
			t.toolSpecs[i].InputSchema = schema
		}
	}
}

// inputs merges overrides into the target's defaults and checks that they
// decode into its input type. It returns the canonical inputs object and the
// decoded value.
func (t *target) inputs(overrides map[string]json.RawMessage) (json.RawMessage, any, error) {
	var merged map[string]json.RawMessage
	if err := json.Unmarshal(t.info.Inputs, &merged); err != nil {
		return nil, nil, fmt.Errorf("%w: %s: defaults: %v", ErrInvalidInputs, t.info.Name, err)
	}
	for k, v := range overrides {
		if _, ok := merged[k]; !ok {
			return nil, nil, fmt.Errorf("%w: %s accepts no input %q (it accepts %s)", ErrInvalidInputs,
				t.info.Name, k, strings.Join(slices.Sorted(maps.Keys(merged)), ", "))
		}
		if !json.Valid(v) {
			return nil, nil, fmt.Errorf("%w: input %q is not JSON", ErrInvalidInputs, k)
		}
		merged[k] = v
	}
	raw, err := json.Marshal(merged)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrInvalidInputs, err)
	}
	canon, err := canonjson.Canonicalize(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrInvalidInputs, err)
	}
	in, err := t.decode(canon)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrInvalidInputs, t.info.Name, err)
	}
	return canon, in, nil
}

// ToolDef is a tool an agent offers. Build it with NewTool or SubAgentTool.
type ToolDef struct {
	name        string
	description string
	readOnly    bool
	subAgent    string
	volatile    []string        // volatile input fields, sorted
	rules       *volatile.Rules // compiled at registration
	schema      json.RawMessage // the input's JSON Schema; a sub-agent's is filled at Check
	fn          func(ctx context.Context, input json.RawMessage) (any, error)
}

// NewTool returns a tool that decodes its input (the tool_use input) into an
// I and runs fn. The tool is a write unless marked ReadOnly. An input that
// does not decode is recorded as a call error of type "invalid_tool_input".
func NewTool[I, O any](name, description string, fn func(ctx context.Context, in I) (O, error)) ToolDef {
	return ToolDef{
		name:        name,
		description: description,
		schema:      InputSchema[I](),
		fn: func(ctx context.Context, raw json.RawMessage) (any, error) {
			var in I
			if err := json.Unmarshal(raw, &in); err != nil {
				return nil, Errorf("invalid_tool_input", "tool %s: %v", name, err)
			}
			return fn(ctx, in)
		},
	}
}

// SubAgentTool returns a tool that runs the registered agent named agent as a
// child run, with the tool_use input as its inputs; the tool's result is the
// agent's result. Sub-agent tools are reads.
func SubAgentTool(name, description, agent string) ToolDef {
	return ToolDef{name: name, description: description, subAgent: agent, schema: objectSchema}
}

// ReadOnly returns a copy of the tool declared read-only.
func (t ToolDef) ReadOnly() ToolDef {
	t.readOnly = true
	return t
}

// Volatile returns a copy of the tool whose input fields at paths do not
// count in its calls' fingerprints (see StepDecl.Volatile for the path
// syntax). Registration checks the paths and records them in
// registration.volatile.
func (t ToolDef) Volatile(paths ...string) ToolDef {
	t.volatile = volatile.SortFields(append(slices.Clone(t.volatile), paths...))
	t.rules = nil
	return t
}

// Name returns the tool's name.
func (t ToolDef) Name() string { return t.name }

// SubAgent returns the agent a sub-agent tool runs, or "".
func (t ToolDef) SubAgent() string { return t.subAgent }

// Writes reports whether the tool is a write: it is, unless declared
// read-only or a sub-agent.
func (t ToolDef) Writes() bool { return !t.readOnly && t.subAgent == "" }
