// Package capture builds a saved case from a recorded run: the bundle of
// format 1 frozen at a fork point, exactly as the product page's "Save,
// export, import" and "Bundle format" sections say. It reads a run a page
// at a time (journal.RunPages, live or archived) and streams the bundle's
// JSON into bundle.EncodeStream; saving it to a store is the caller's job.
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

// ForkRangeError is Stream's error for a fork outside the run's events:
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
// (p.Registration), captures it (Stream) and encodes the bundle
// canonically: what `pyrula case save` and the worker's save_case share.
// It streams (Stream, bundle.EncodeStream): the run is read a page at a
// time where j reads in pages (journal.PagedReader; else whole), and never
// held whole beside its bundle; p.SpillDir keeps a large bundle's canonical
// bytes out of the heap. A run whose live keys go while it is read is read
// again whole. Saving the result to a store is the caller's job.
//
// Errors: one wrapping journal.ErrRunNotFound when the run is in neither the
// journal nor the archive; one wrapping ErrTargetMismatch; Stream's refusals
// (capture_incomplete, kind_mismatch) and the encoding's (bundle_too_large),
// which carry reason codes; other errors (reading the journal) are
// operational.
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
	return encode(ctx, pg, p.Params, p.SpillDir)
}

// Encode captures run r, held whole, as Stream does and encodes the bundle
// canonically: FromJournal for a run in hand (tests, benchmarks). Its
// refusals are Stream's and the encoding's.
func Encode(r *journal.Run, p Params) (*bundle.Canonical, error) {
	return encode(context.Background(), journal.PagesOf(r), p, "")
}

// encode streams the run pg pages into bundle.EncodeStream (spilled in
// spillDir when set): Stream's errors as they are, the encoding's wrapped.
func encode(ctx context.Context, pg journal.RunPages, p Params, spillDir string) (*bundle.Canonical, error) {
	var serr error
	c, err := bundle.EncodeStream(func(w io.Writer) error {
		serr = Stream(ctx, pg, p, w)
		return serr
	}, bundle.Options{SpillDir: spillDir})
	if serr != nil {
		return nil, serr
	}
	if err != nil {
		return nil, fmt.Errorf("encode the case of run %s: %w", pg.Meta().RunID, err)
	}
	return c, nil
}
