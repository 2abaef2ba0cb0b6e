// Package capture builds a saved case from a recorded run: the bundle of
// format 1 frozen at a fork point, exactly as the product page's "Save,
// export, import" and "Bundle format" sections say. It reads a run as
// journal.Run (live or archived) and writes a bundle.Bundle; saving it to a
// store is the caller's job.
//
// capture imports journal, bundle and messages; never flow, replay, worker
// or cli (the caller passes the target's registration in).
package capture

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
)

// Params say how to capture a run.
type Params struct {
	// ForkAfterSeq is the run_seq the case forks after; nil keeps only the
	// inputs (no history, no results).
	ForkAfterSeq *int64
	// Kind is the manifest kind the caller asks for ("" detects it: agent
	// when the run made model or tool calls, else workflow). Asking for a
	// workflow of a run with model or tool calls, or for an agent of a run
	// without any, is kind_mismatch.
	Kind bundle.Kind
	// Registration is the target's registration (steps, and tools for
	// agents), from the binary that records and replays it.
	Registration bundle.Registration
	// PyrulaVersion is the version of the software that saves the case.
	PyrulaVersion string
}

// Build captures run r as a bundle. Refusals carry reason codes:
// capture_incomplete (a call in flight at the fork, or a call done at or
// before the fork whose result is not recorded; the message lists them),
// kind_mismatch. A fork after the run's last event is invalid input (an
// error without a code, a *ForkRangeError).
//
// source.origin names the journal the run was recorded in: "valkey" for every
// run this software records, also once the run has moved to the archive, so
// that a run saves to the same hash before and after its live keys expire.
//
// results are every recorded result; those of calls made after the fork
// carry the call's input (withInputs).
//
// history holds the run's events up to the fork, terminal events dropped,
// as they were recorded, except that the prices of a case run (its
// run:submitted request's options.prices, see withoutPrices) and the trace
// context a run was submitted under (withoutTraceContext) are left out.
//
// capture.complete is true when the run has finished, so that every result
// after the fork is recorded too; for a run still running or suspended it is
// false and missing says results after the last event may be missing (replay
// resolves those calls down the ladder). Bundle.Encode then canonicalises it.
func Build(r *journal.Run, p Params) (*bundle.Bundle, error) {
	m := r.Meta
	if p.ForkAfterSeq != nil && (*p.ForkAfterSeq < 0 || *p.ForkAfterSeq > m.LastSeq) {
		return nil, &ForkRangeError{RunID: m.RunID, ForkAfterSeq: *p.ForkAfterSeq, LastSeq: m.LastSeq}
	}
	kind, err := detectKind(r, p.Kind)
	if err != nil {
		return nil, err
	}
	b := &bundle.Bundle{
		Manifest: bundle.Manifest{
			Format:         bundle.Format,
			Kind:           kind,
			TargetName:     m.TargetName,
			CodeVersion:    codeVersion(r),
			Registration:   p.Registration,
			RecordedConfig: recordedConfig(r, kind),
			PyrulaVersion:  p.PyrulaVersion,
			Source:         bundle.Source{RunID: m.RunID, Namespace: m.Namespace, Origin: string(journal.OriginValkey)},
			ForkAfterSeq:   p.ForkAfterSeq,
			Capture:        bundle.Capture{Complete: true, Missing: []json.RawMessage{}},
			Inputs:         m.Inputs,
		},
		History: []json.RawMessage{},
		Results: []bundle.Result{},
	}
	if p.ForkAfterSeq == nil {
		return b, nil
	}
	fork := *p.ForkAfterSeq
	for _, fp := range ForkPoints(r) {
		if fp.RunSeq == fork && !fp.Valid {
			return nil, messages.Errorf(messages.CaptureIncomplete,
				"run %s cannot be replayed from run_seq %d: %s; pick another --fork-after-seq (pyrula events %s --fork-points lists them) or save after the run finishes",
				m.RunID, fork, fp.Why, m.RunID)
		}
	}
	for _, e := range r.Events {
		if e.RunSeq > fork {
			break
		}
		if journal.IsTerminal(e.Kind) {
			continue
		}
		ev, err := withoutPrices(withoutTraceContext(e))
		if err != nil {
			return nil, fmt.Errorf("capture: run %s: %w", m.RunID, err)
		}
		raw, err := ev.JSON()
		if err != nil {
			return nil, fmt.Errorf("capture: run %s: %w", m.RunID, err)
		}
		b.History = append(b.History, raw)
	}
	b.Results = withInputs(r, fork)
	if !m.Status.Terminal() {
		note, _ := json.Marshal(fmt.Sprintf("results after run_seq %d: the run is still %s", m.LastSeq, m.Status))
		b.Manifest.Capture = bundle.Capture{Complete: false, Missing: []json.RawMessage{note}}
	}
	return b, nil
}

// withInputs returns the run's results, each result of a call made after
// the fork (its call:start is not in the history) carrying the call's input
// and the run_seq of that call:start event (start_seq), so that a case run
// can name the fields of such a call that changed and a case diff can list
// such calls in run order. The results of prefix calls carry neither:
// their call:start events, in the history, hold both.
func withInputs(r *journal.Run, fork int64) []bundle.Result {
	out := slices.Clone(r.Results)
	// Events are in run_seq order: those after the fork start at after.
	after := sort.Search(len(r.Events), func(i int) bool { return r.Events[i].RunSeq > fork })
	type start struct {
		input json.RawMessage
		seq   int64
	}
	starts := map[string]start{}
	for _, e := range r.Events[after:] {
		c, ok := journal.CallOf(e)
		if !ok || e.Kind != runevent.CallStart {
			continue
		}
		id := c.ID()
		if _, seen := starts[id]; seen {
			continue
		}
		in := e.Input
		if len(in) == 0 {
			var raw json.RawMessage
			if ok, err := e.Field("input", &raw); ok && err == nil {
				in = raw
			}
		}
		starts[id] = start{in, e.RunSeq}
	}
	if len(starts) == 0 {
		return out
	}
	// A call started before the fork too (a resumed run starts it again)
	// has its input in the history.
	for _, e := range r.Events[:after] {
		if c, ok := journal.CallOf(e); ok && e.Kind == runevent.CallStart {
			delete(starts, c.ID())
		}
	}
	for i, res := range out {
		s, ok := starts[journal.ResultID(res.Kind, res.Key)]
		if !ok || res.Input != nil {
			continue
		}
		if len(s.input) > 0 {
			out[i].Input = s.input
		}
		out[i].StartSeq = s.seq
	}
	return out
}

// requestField is the field of the run:submitted event of a run the worker
// submitted that holds the message's body (worker/internal/intake/submit.go).
const requestField = "request"

// The members of a run:submitted event that carry the W3C trace context
// the worker submitted the run under.
var traceFields = []string{"traceparent", "tracestate"}

// withoutTraceContext returns e without the trace context of its run's
// submission (a run:submitted event's traceparent and tracestate): it says
// which trace the submission belonged to, not what the run did, so it is
// never stored in a bundle. Any other event is returned as it is.
func withoutTraceContext(e journal.Event) journal.Event {
	if e.Kind != runevent.RunSubmitted {
		return e
	}
	found := false
	for _, k := range traceFields {
		if _, ok := e.Extra[k]; ok {
			found = true
		}
	}
	if !found {
		return e
	}
	fields := make(map[string]json.RawMessage, len(e.Extra))
	for k, v := range e.Extra {
		fields[k] = v
	}
	for _, k := range traceFields {
		delete(fields, k)
	}
	e.Extra = fields
	return e
}

// withoutPrices returns e without the prices of a case run: a run:submitted
// event whose request (a worker's run_case body) has options.prices gets a
// copy of the request without them. Prices (--prices, options.prices) say
// what live model calls cost where the case runs; they are never stored in
// a bundle, and the executor reads them from the journal, not from a
// capture. Any other event is returned as it is.
func withoutPrices(e journal.Event) (journal.Event, error) {
	raw, ok := e.Extra[requestField]
	if e.Kind != runevent.RunSubmitted || !ok || !bytes.Contains(raw, []byte(`"prices"`)) {
		return e, nil
	}
	var req map[string]json.RawMessage
	if json.Unmarshal(raw, &req) != nil {
		return e, nil // not an object: no options
	}
	var opts map[string]json.RawMessage
	if json.Unmarshal(req["options"], &opts) != nil {
		return e, nil
	}
	if _, ok := opts["prices"]; !ok {
		return e, nil
	}
	delete(opts, "prices")
	var err error
	if req["options"], err = json.Marshal(opts); err != nil {
		return e, err
	}
	fields := make(map[string]json.RawMessage, len(e.Extra))
	for k, v := range e.Extra {
		fields[k] = v
	}
	if fields[requestField], err = json.Marshal(req); err != nil {
		return e, err
	}
	e.Extra = fields
	return e, nil
}

// detectKind returns the manifest kind: agent when the run made model or
// tool calls, else workflow; an explicit kind must be that kind
// (kind_mismatch), both ways.
func detectKind(r *journal.Run, want bundle.Kind) (bundle.Kind, error) {
	var evidence string
	for _, res := range r.Results {
		if res.Kind == "model" || res.Kind == "tool" {
			evidence = journal.ResultID(res.Kind, res.Key)
			break
		}
	}
	if evidence == "" {
		for _, e := range r.Events {
			if c, ok := journal.CallOf(e); ok && (c.Kind == "model" || c.Kind == "tool") {
				evidence = c.ID()
				break
			}
		}
	}
	return checkKind(r.Meta.RunID, evidence, want)
}

// checkKind returns the manifest kind of run runID: agent when evidence
// (its first model or tool call) is set, else workflow; an explicit kind
// want must be that kind (kind_mismatch), both ways.
func checkKind(runID, evidence string, want bundle.Kind) (bundle.Kind, error) {
	detected := bundle.KindWorkflow
	if evidence != "" {
		detected = bundle.KindAgent
	}
	switch want {
	case "":
		return detected, nil
	case bundle.KindWorkflow:
		if detected == bundle.KindAgent {
			return "", messages.Errorf(messages.KindMismatch,
				"run %s made model or tool calls (%s), so it is an agent run, not a workflow", runID, evidence)
		}
		return want, nil
	case bundle.KindAgent:
		if detected == bundle.KindWorkflow {
			return "", messages.Errorf(messages.KindMismatch,
				"run %s made no model or tool calls, so it is a workflow run, not an agent", runID)
		}
		return want, nil
	}
	return "", fmt.Errorf("capture: --kind %q is not workflow or agent", want)
}

// codeVersion is the version that executed: the last run:start's
// code_version (a resumed run starts again), else the submitted one.
func codeVersion(r *journal.Run) string {
	v := r.Meta.CodeVersion
	for _, e := range r.Events {
		if e.Kind != runevent.RunStart {
			continue
		}
		var cv string
		if ok, err := e.Field("code_version", &cv); ok && err == nil && cv != "" {
			v = cv
		}
	}
	return v
}

// recordedConfig is {} for workflows; for agents {"model": …}, the model of
// the run's first model call (from its call:start input).
func recordedConfig(r *journal.Run, kind bundle.Kind) json.RawMessage {
	if kind != bundle.KindAgent {
		return json.RawMessage("{}")
	}
	for _, e := range r.Events {
		c, ok := journal.CallOf(e)
		if !ok || e.Kind != runevent.CallStart || c.Kind != "model" {
			continue
		}
		var in struct {
			Model string `json:"model"`
		}
		if ok, err := e.Field("input", &in); ok && err == nil && in.Model != "" {
			out, _ := json.Marshal(map[string]string{"model": in.Model})
			return out
		}
		break
	}
	return json.RawMessage("{}")
}

func joinList(items []string) string {
	items = slices.Clone(items)
	const most = 10
	more := ""
	if len(items) > most {
		more = fmt.Sprintf("; and %d more", len(items)-most)
		items = items[:most]
	}
	out := ""
	for i, s := range items {
		if i > 0 {
			out += "; "
		}
		out += s
	}
	return out + more
}

// ForkRangeError is Build's error for a fork outside the run's events:
// invalid input, which no retry fixes (the worker refuses it
// invalid_overrides).
type ForkRangeError struct {
	RunID                 string
	ForkAfterSeq, LastSeq int64
}

func (e *ForkRangeError) Error() string {
	return fmt.Sprintf("capture: run %s: --fork-after-seq %d is outside the run's events (run_seq 0 to %d; see pyrula events %s)",
		e.RunID, e.ForkAfterSeq, e.LastSeq, e.RunID)
}

// ErrTargetMismatch means the run read by FromJournal is a run of another
// target than the one asked for.
var ErrTargetMismatch = errors.New("run is of another target")

// FromJournalParams say which run FromJournal captures and how.
type FromJournalParams struct {
	// Target is the target the caller expects the run to be of.
	Target string
	// RunID names the run, live or archived.
	RunID string
	// Params say how to capture it (fork, kind, registration, version).
	Params Params
	// Registration, when set, is called once the run is read and found to
	// be of Target, and its result replaces Params.Registration; its error
	// (such as "no such target registered") is returned as is.
	Registration func(target string) (bundle.Registration, error)
	// SpillDir is bundle.Options.SpillDir of the encoding: where a large
	// bundle's canonical bytes are kept out of the heap ("" keeps them in
	// memory).
	SpillDir string
}

// FromJournal reads run p.RunID from j (the live journal, then its archive),
// checks that it is a run of p.Target, looks up the target's registration
// (p.Registration), captures it as Build does and encodes the bundle
// canonically: what `pyrula case save` and the worker's save_case share.
// It streams (Stream, bundle.EncodeStream): the run is read a page at a
// time where j reads in pages (journal.PagedReader; else whole), and never
// held whole beside its bundle; p.SpillDir keeps a large bundle's canonical
// bytes out of the heap. A run whose live keys go while it is read is read
// again whole. Saving the result to a store is the caller's job.
//
// Errors: one wrapping journal.ErrRunNotFound when the run is in neither the
// journal nor the archive; one wrapping ErrTargetMismatch; Build's refusals
// (capture_incomplete, kind_mismatch) and Encode's (bundle_too_large), which
// carry reason codes; other errors (reading the journal) are operational.
func FromJournal(ctx context.Context, j journal.Journal, p FromJournalParams) (*bundle.Canonical, error) {
	c, err := fromJournal(ctx, j, p, false)
	if errors.Is(err, journal.ErrRunChanged) {
		c, err = fromJournal(ctx, j, p, true)
	}
	return c, err
}

// fromJournal is FromJournal over the run read in pages, or whole.
func fromJournal(ctx context.Context, j journal.Journal, p FromJournalParams, whole bool) (*bundle.Canonical, error) {
	var pg journal.RunPages
	var err error
	if whole {
		var r *journal.Run
		if r, err = j.Run(ctx, p.RunID); err == nil {
			pg = journal.PagesOf(r)
		}
	} else {
		pg, err = journal.ReadPages(ctx, j, p.RunID)
	}
	if errors.Is(err, journal.ErrRunNotFound) {
		return nil, fmt.Errorf("run %s is in neither Valkey (namespace %s) nor the archive: %w", p.RunID, j.Namespace(), err)
	}
	if err != nil {
		return nil, fmt.Errorf("read run %s: %w", p.RunID, err)
	}
	if m := pg.Meta(); m.TargetName != p.Target {
		return nil, fmt.Errorf("run %s is a run of %s, not %s: %w", p.RunID, m.TargetName, p.Target, ErrTargetMismatch)
	}
	if p.Registration != nil {
		reg, err := p.Registration(p.Target)
		if err != nil {
			return nil, err
		}
		p.Params.Registration = reg
	}
	var serr error
	c, err := bundle.EncodeStream(func(w io.Writer) error {
		serr = Stream(ctx, pg, p.Params, w)
		return serr
	}, bundle.Options{SpillDir: p.SpillDir})
	if serr != nil {
		return nil, serr
	}
	if err != nil {
		return nil, fmt.Errorf("encode the case of run %s: %w", p.RunID, err)
	}
	return c, nil
}
