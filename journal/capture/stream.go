package capture

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
)

// The states of a recorded result while a run is streamed.
const (
	// startedBefore: its call started at or before the fork, so its
	// input is in the history and the result carries none.
	startedBefore uint8 = 1 << iota
	// written: the result is written already (a call after the fork,
	// with its input).
	written
)

// Stream writes the bundle of the run pg pages, captured at p, to w as
// JSON: the history, then the results, then the manifest (an order
// bundle.Read and bundle.EncodeStream accept), never holding more of the
// run than a page of events and a page of results, with the ids of its
// results.
//
// Refusals carry reason codes: capture_incomplete (a call in flight at the
// fork, or a call done at or before the fork whose result is not recorded;
// the message lists them), kind_mismatch (checked first). A fork after the
// run's last event is invalid input (an error without a code, a
// *ForkRangeError). An error of pg (journal.ErrRunChanged among them) is
// returned wrapped.
//
// history holds the run's events up to the fork, terminal events dropped,
// as they were recorded, except that the prices of a case run (its
// run:submitted request's options.prices, see withoutPrices) and the trace
// context a run was submitted under (withoutTraceContext) are left out.
//
// results are every recorded result. Those of calls made after the fork
// (their call:start is not in the history) are written as those events
// come, with the call's input and the run_seq of its first call:start
// after the fork (start_seq), so that a case run can name the fields of
// such a call that changed and a case diff can list such calls in run
// order; the others, whose call:start events in the history hold both,
// after the events, in (kind, key) order.
//
// The manifest's kind is agent when the run made model or tool calls, else
// workflow; its code_version the last run:start's (a resumed run starts
// again), else the submitted one; recorded_config {} for a workflow, for an
// agent {"model": …} of its first model call's input. source.origin names
// the journal the run was recorded in: "valkey" for every run this
// software records, also once the run has moved to the archive, so that a
// run saves to the same hash before and after its live keys expire.
// capture.complete is true when the run has finished, so that every result
// after the fork is recorded too; for a run still running or suspended it
// is false and missing says results after the last event may be missing
// (replay resolves those calls down the ladder).
func Stream(ctx context.Context, pg journal.RunPages, p Params, w io.Writer) error {
	m := pg.Meta()
	if p.ForkAfterSeq != nil && (*p.ForkAfterSeq < 0 || *p.ForkAfterSeq > m.LastSeq) {
		return &ForkRangeError{RunID: m.RunID, ForkAfterSeq: *p.ForkAfterSeq, LastSeq: m.LastSeq}
	}
	s := &streamer{pg: pg, p: p, w: w, ids: pg.ResultIDs(), codeVersion: m.CodeVersion}
	pooled := streamBufs.Get().(*[]byte)
	s.buf = (*pooled)[:0]
	defer func() {
		if cap(s.buf) <= 1<<20 { // not one grown for a large result
			*pooled = s.buf[:0]
			streamBufs.Put(pooled)
		}
	}()
	s.state = make([]uint8, len(s.ids))
	for _, id := range s.ids {
		if kind, _, _ := strings.Cut(id, ":"); kind == "model" || kind == "tool" {
			s.evidence = id // the first in (kind, key) order, as detectKind
			break
		}
	}
	s.forks = newForkScan(func(id string) bool { _, ok := s.index(id); return ok })
	s.buf = append(s.buf, `{"history":[`...)
	if err := pg.Events(ctx, func(evs []journal.Event) error { return s.page(ctx, evs) }); err != nil {
		return fmt.Errorf("capture: run %s: %w", m.RunID, err)
	}
	if s.evidence == "" {
		s.evidence = s.eventEvidence
	}
	kind, err := checkKind(m.RunID, s.evidence, p.Kind)
	if err != nil {
		return err
	}
	if s.stop != nil {
		return s.stop
	}
	if err := s.closeHistory(); err != nil {
		return err
	}
	if err := s.rest(ctx); err != nil {
		return fmt.Errorf("capture: run %s: %w", m.RunID, err)
	}
	config := json.RawMessage("{}")
	if kind == bundle.KindAgent && s.model != "" {
		config, _ = json.Marshal(map[string]string{"model": s.model})
	}
	man := bundle.Manifest{
		Format:         bundle.Format,
		Kind:           kind,
		TargetName:     m.TargetName,
		CodeVersion:    s.codeVersion,
		Registration:   p.Registration,
		RecordedConfig: config,
		PyrulaVersion:  p.PyrulaVersion,
		Source:         bundle.Source{RunID: m.RunID, Namespace: m.Namespace, Origin: string(journal.OriginValkey)},
		ForkAfterSeq:   p.ForkAfterSeq,
		Capture:        bundle.Capture{Complete: true, Missing: []json.RawMessage{}},
		Inputs:         m.Inputs,
	}
	if p.ForkAfterSeq != nil && !m.Status.Terminal() {
		note, _ := json.Marshal(fmt.Sprintf("results after run_seq %d: the run is still %s", m.LastSeq, m.Status))
		man.Capture = bundle.Capture{Complete: false, Missing: []json.RawMessage{note}}
	}
	raw, err := bundle.ManifestJSON(man)
	if err != nil {
		return err
	}
	s.buf = append(s.buf, `],"manifest":`...)
	s.buf = append(s.buf, raw...)
	s.buf = append(s.buf, '}')
	return s.flush()
}

// streamBufs recycles the buffers of Stream (*[]byte, a little over 64
// KiB once used): a worker captures a run for every case run from a
// journal.
var streamBufs = sync.Pool{New: func() any { return new([]byte) }}

// streamer is one Stream.
type streamer struct {
	pg    journal.RunPages
	p     Params
	w     io.Writer
	buf   []byte // written when it passes 64 KiB, and at the end
	ids   []string
	state []uint8 // of ids[i]
	forks *forkScan

	// after is set once an event after the fork is seen (the history is
	// closed and the results opened); results and history count what is
	// written of each.
	after   bool
	results int
	history int // events written
	// stop, once set, is the refusal at the fork: nothing more is
	// written, and the events are read on only for the kind (a
	// kind_mismatch comes first).
	stop error

	evidence, eventEvidence string // the first model or tool call of the results, of the events
	codeVersion, model      string
	modelSeen               bool    // the first model call:start was seen
	starts                  []start // of the calls after the fork in this page
}

// start is a call that starts after the fork, for its result's input.
type start struct {
	i     int // in ids
	input json.RawMessage
	seq   int64
}

// page takes one page of events.
func (s *streamer) page(ctx context.Context, evs []journal.Event) error {
	fork := s.p.ForkAfterSeq
	s.starts = s.starts[:0]
	for _, e := range evs {
		c, isCall := journal.CallOf(e)
		if isCall && s.eventEvidence == "" && (c.Kind == "model" || c.Kind == "tool") {
			s.eventEvidence = c.ID()
		}
		if e.Kind == runevent.RunStart {
			var cv string
			if ok, err := e.Field("code_version", &cv); ok && err == nil && cv != "" {
				s.codeVersion = cv // the last run:start's, as codeVersion
			}
		}
		if isCall && e.Kind == runevent.CallStart && c.Kind == "model" && !s.modelSeen {
			s.modelSeen = true // recordedConfig looks at the first model call only
			var in struct {
				Model string `json:"model"`
			}
			if ok, err := e.Field("input", &in); ok && err == nil {
				s.model = in.Model
			}
		}
		if fork == nil || s.stop != nil {
			continue
		}
		if e.RunSeq <= *fork {
			if err := s.before(e, c, isCall, e.RunSeq == *fork); err != nil {
				return err
			}
			continue
		}
		if !s.after {
			if err := s.closeHistory(); err != nil {
				return err
			}
		}
		if !isCall || e.Kind != runevent.CallStart {
			continue
		}
		i, ok := s.index(c.ID())
		if !ok || s.state[i] != 0 {
			continue // no result, or one started before the fork, or written
		}
		s.state[i] |= written
		in := e.Input
		if len(in) == 0 {
			var raw json.RawMessage
			if ok, err := e.Field("input", &raw); ok && err == nil {
				in = raw
			}
		}
		s.starts = append(s.starts, start{i: i, input: in, seq: e.RunSeq})
	}
	if len(s.starts) == 0 {
		return nil
	}
	ids := make([]string, len(s.starts))
	for k, st := range s.starts {
		ids[k] = s.ids[st.i]
	}
	rs, err := s.pg.Results(ctx, ids)
	if err != nil {
		return err
	}
	for k, res := range rs {
		if res.Input == nil {
			if len(s.starts[k].input) > 0 {
				res.Input = s.starts[k].input
			}
			res.StartSeq = s.starts[k].seq
		}
		if err := s.result(res); err != nil {
			return err
		}
	}
	return nil
}

// before takes event e at or before the fork (atFork: the fork's own).
func (s *streamer) before(e journal.Event, c journal.Call, isCall, atFork bool) error {
	fp := s.forks.step(e, atFork)
	if atFork && !fp.Valid {
		m := s.pg.Meta()
		s.stop = messages.Errorf(messages.CaptureIncomplete,
			"run %s cannot be replayed from run_seq %d: %s; pick another --fork-after-seq (pyrula events %s --fork-points lists them) or save after the run finishes",
			m.RunID, e.RunSeq, fp.Why, m.RunID)
		return nil
	}
	if isCall && e.Kind == runevent.CallStart {
		if i, ok := s.index(c.ID()); ok {
			s.state[i] |= startedBefore
		}
	}
	if journal.IsTerminal(e.Kind) {
		return nil
	}
	ev, err := withoutPrices(withoutTraceContext(e))
	if err != nil {
		return fmt.Errorf("capture: run %s: %w", s.pg.Meta().RunID, err)
	}
	raw, err := ev.JSON()
	if err != nil {
		return fmt.Errorf("capture: run %s: %w", s.pg.Meta().RunID, err)
	}
	if s.history > 0 {
		s.buf = append(s.buf, ',')
	}
	s.history++
	s.buf = append(s.buf, raw...)
	return s.spill()
}

// closeHistory ends the history and opens the results, once.
func (s *streamer) closeHistory() error {
	if s.after {
		return nil
	}
	s.after = true
	s.buf = append(s.buf, `],"results":[`...)
	return s.spill()
}

// rest writes the results not written yet, in (kind, key) order, when
// the bundle keeps results (a fork).
func (s *streamer) rest(ctx context.Context) error {
	if s.p.ForkAfterSeq == nil {
		return nil
	}
	var ids []string
	flush := func() error {
		rs, err := s.pg.Results(ctx, ids)
		if err != nil {
			return err
		}
		for _, res := range rs {
			if err := s.result(res); err != nil {
				return err
			}
		}
		ids = ids[:0]
		return nil
	}
	for i, id := range s.ids {
		if s.state[i]&written != 0 {
			continue
		}
		if ids = append(ids, id); len(ids) == journal.PageSize {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// result writes one result.
func (s *streamer) result(r bundle.Result) error {
	if s.results > 0 {
		s.buf = append(s.buf, ',')
	}
	s.results++
	s.buf = bundle.AppendResult(s.buf, r)
	return s.spill()
}

// spill writes the buffer once it passes 64 KiB.
func (s *streamer) spill() error {
	if len(s.buf) < 64<<10 {
		return nil
	}
	return s.flush()
}

func (s *streamer) flush() error {
	_, err := s.w.Write(s.buf)
	s.buf = s.buf[:0]
	return err
}

// index is the position of result id in ids.
func (s *streamer) index(id string) (int, bool) {
	return slices.BinarySearchFunc(s.ids, id, journal.CompareResultIDs)
}
