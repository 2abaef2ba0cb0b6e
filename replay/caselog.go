package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
)

// caseLog wraps the run's journal: before the case run's terminal event it
// checks that the whole prefix was consumed (else the run ends with
// prefix_diverged), adds the divergence data and writes case:outcome.
type caseLog struct {
	host.Log
	e *engine
}

// Append implements host.Log, noting the case run's last run_seq so that
// its case:outcome can carry the run's real last_seq.
func (l *caseLog) Append(ctx context.Context, runID string, b host.Batch) (int64, error) {
	seq, err := l.Log.Append(ctx, runID, b)
	if err == nil && runID == l.e.p.RunID {
		l.e.noteSeq(seq)
	}
	return seq, err
}

// Finish implements host.Log.
func (l *caseLog) Finish(ctx context.Context, runID string, ev host.Event) (int64, error) {
	e := l.e
	if runID != e.p.RunID {
		return l.Log.Finish(ctx, runID, ev)
	}
	e.mu.Lock()
	ev, o, writeOutcome := e.terminalLocked(ev)
	e.mu.Unlock()
	// The appends go outside mu; the run makes no call any more.
	seq, err := l.appendTerminal(ctx, runID, ev, o, writeOutcome)
	if err != nil {
		return 0, err
	}
	o.LastSeq = seq
	e.mu.Lock()
	e.outcome = &o
	e.mu.Unlock()
	return seq, nil
}

// childResolver resolves the calls of child runs: always live (the parent's
// ladder allowed the child call), adding their model spend to the cost.
type childResolver struct{ e *engine }

// terminalLocked is the terminal event the case run ends with (a run that
// completed before verifying its whole prefix ends prefix_diverged; a
// divergence's details go on run:error) and its outcome; writeOutcome says
// that case:outcome is still to be written (not when the run wrote it
// before a crash cut it off from its terminal event).
func (e *engine) terminalLocked(ev host.Event) (host.Event, Outcome, bool) {
	if ev.Kind == runevent.RunComplete && !e.p.FromStart && e.prefixDone < len(e.prefix) {
		rec := e.prefix[e.prefixDone]
		e.divergence = &Divergence{Seq: e.prefixDone, Call: "", RecordedCall: rec.ref.ID(), RecordedFingerprint: rec.ref.Fingerprint}
		ev = host.Event{Kind: runevent.RunError, At: ev.At, Code: messages.PrefixDiverged, StopKey: rec.ref.ID(),
			Message: fmt.Sprintf("the target ended after %d of the %d prefix calls; the recording has %s next", e.prefixDone, len(e.prefix), rec.ref.ID())}
	}
	if ev.Kind == runevent.RunError {
		if ev.Code == messages.ReplayDiverged && e.reason != "" {
			ev.Extra = map[string]json.RawMessage{"reason": nullable(e.reason)}
		}
		if (ev.Code == messages.ReplayDiverged || ev.Code == messages.PrefixDiverged) && e.divergence != nil {
			if ev.Extra == nil {
				ev.Extra = map[string]json.RawMessage{}
			}
			ev.Extra["divergence"], _ = json.Marshal(e.divergence)
		}
	}
	o := e.outcomeLocked(ev, host.Outcome{})
	if e.priorOutcome != nil {
		return ev, *e.priorOutcome, false
	}
	// case:outcome, then the terminal event: the run's last two.
	o.LastSeq = e.lastSeq.Load() + 2
	return ev, o, true
}

// appendTerminal writes the case run's case:outcome (when writeOutcome)
// and its terminal event; it returns the terminal event's run_seq.
func (l *caseLog) appendTerminal(ctx context.Context, runID string, ev host.Event, o Outcome, writeOutcome bool) (int64, error) {
	e := l.e
	if writeOutcome {
		co := host.Event{Kind: runevent.CaseOutcome, At: ev.At, Extra: lineExtra(o, false)}
		// Deferrable: a Log holding the run's answered calls writes them,
		// case:outcome and the terminal event in one write.
		seq, err := l.Log.Append(ctx, runID, host.Batch{Target: e.p.Target, Events: []host.Event{co}, Deferrable: true})
		if err != nil {
			return 0, err
		}
		e.noteSeq(seq)
	}
	return l.Log.Finish(ctx, runID, ev)
}

// Resolve implements host.Resolver.
func (childResolver) Resolve(context.Context, host.Call) (host.Resolution, error) {
	return host.Live(), nil
}

// Observe implements host.Observer: a child's model spend counts, and so
// does a signal it sends the case run.
func (r childResolver) Observe(_ context.Context, o host.Observation) {
	switch o.Call.Kind {
	case host.KindModel:
		r.e.mu.Lock()
		defer r.e.mu.Unlock()
		r.e.spendLocked(o.Call, o.Record)
	case host.KindStep:
		if strings.HasPrefix(o.Call.Key, "sigsend:") {
			r.e.mu.Lock()
			defer r.e.mu.Unlock()
			r.e.noteSelfSignal(o.Call, o.Record, true)
		}
	}
}

// JumpClock is the clock of a case run: it reads its base clock plus the
// time it has jumped, and SleepUntil jumps to the wake time at once, so a
// durable sleep advances the run's clock (and now) without waiting.
type JumpClock struct {
	// Base is the underlying clock.
	Base host.Clock

	mu     sync.Mutex   // serialises jumps
	offset atomic.Int64 // the time jumped, a time.Duration; read without mu
}

// Now implements host.Clock.
func (c *JumpClock) Now() time.Time {
	return c.Base.Now().Add(time.Duration(c.offset.Load()))
}

// SleepUntil implements host.Clock without waiting.
func (c *JumpClock) SleepUntil(ctx context.Context, t time.Time) error {
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := t.Sub(c.Now()); d > 0 {
		c.offset.Add(int64(d))
	}
	return nil
}
