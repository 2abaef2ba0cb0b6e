// Package runevent is a run's events, one model every layer shares: the
// event type (Event, with its call object Call), the event kinds (one typed
// list, Kind), the time stamp of an event's at (one precision,
// microseconds, and one spelling), and the one encoder of an event's
// canonical JSON (Event.AppendJSON) with its exact decoding (Decode). The
// runtime (package flow: host.Event is Event), the journals (journal.Event
// is Event), the capture, the replay engine, the worker and the CLI all use
// these; see /docs/runtime.md for the events themselves.
//
// runevent imports only messages (the reason code of run:error) and
// canonjson (canonical JSON) of the project, so that both flow and
// journal, which never import each other, can sit on it.
package runevent

import "time"

// Kind is the kind of a run event, such as "call:start". A journal stores
// any non-empty kind; the constants below are the ones the project writes
// and reads.
type Kind string

// The event kinds. The runtime writes run:start, call:start, call:done and
// the terminal kinds; the journal writes run:submitted when it creates a
// run; a case run adds case:call, case:charge and case:outcome; a suite writes
// suite:plan, suite:progress and suite:outcome.
const (
	// RunSubmitted is the first event of every run (run_seq 1), written when
	// the run is created: the run was accepted. Fields: target_name, plus
	// whatever the submitter adds.
	RunSubmitted Kind = "run:submitted"
	// RunStart: the runtime started (or resumed) executing the run. Fields:
	// inputs, code_version.
	RunStart Kind = "run:start"
	// CallStart: a call began. Fields: call and input; wake_at when the call
	// waits until a time; tool for a tool call.
	CallStart Kind = "call:start"
	// CallDone: a call ended; its result record is appended with it. Fields:
	// call, and for case runs provenance.
	CallDone Kind = "call:done"
	// CaseCall is a case run's "call" line.
	CaseCall Kind = "case:call"
	// CaseOutcome is a case run's "outcome" line.
	CaseOutcome Kind = "case:outcome"
	// CaseCharge is what a resumed case run counts for a live model call
	// that was in flight when its last worker died (the provider may have
	// billed it, and the call is made again): the call's worst case, kept
	// in the journal so that every later resumption counts it too. Fields:
	// call (kind and key) and cost_usd.
	CaseCharge Kind = "case:charge"
	// SuitePlan is a suite's selection, written once before its children
	// are submitted. Fields: total, cases, arms, children.
	SuitePlan Kind = "suite:plan"
	// SuiteProgress is how far a suite got. Fields: done, total, by_status,
	// cost_usd.
	SuiteProgress Kind = "suite:progress"
	// SuiteOutcome is a suite's outcome, before its terminal event.
	SuiteOutcome Kind = "suite:outcome"
	// RunComplete is the terminal event of a run that completed. Fields:
	// result.
	RunComplete Kind = "run:complete"
	// RunError is the terminal event of a run that failed. Fields: code,
	// message, stop_key, stop_token.
	RunError Kind = "run:error"
	// RunCancelled is the terminal event of a cancelled run.
	RunCancelled Kind = "run:cancelled"
)

// Kinds returns every kind above, in the order a run writes them.
func Kinds() []Kind {
	return []Kind{RunSubmitted, RunStart, CallStart, CallDone, CaseCall, CaseCharge, CaseOutcome, SuitePlan, SuiteProgress, SuiteOutcome, RunComplete, RunError, RunCancelled}
}

// Terminal reports whether k ends a run: run:complete, run:error or
// run:cancelled. Only a terminal event ends a run, and it is always its
// last event.
func (k Kind) Terminal() bool {
	return k == RunComplete || k == RunError || k == RunCancelled
}

// TimeLayout is the layout of an event's at, on the wire (journals, the
// archive, bundles) and wherever an event is printed: RFC 3339 in UTC with
// exactly six fractional digits (microseconds), e.g.
// "2025-03-14T09:26:53.037512Z", so that stamps sort as strings and have
// one spelling. A time is converted to UTC and truncated to the microsecond
// when it is written.
const TimeLayout = "2006-01-02T15:04:05.000000Z"

// FormatTime returns t in TimeLayout.
func FormatTime(t time.Time) string { return string(AppendTime(make([]byte, 0, len(TimeLayout)), t)) }

// AppendTime appends t in TimeLayout to dst. Years 0–9999 are written
// digit by digit (every event has a time, and the layout's interpretation
// by time.AppendFormat was a fifth of an event's encoding); others, which
// AppendFormat writes with a sign or more digits, by AppendFormat.
func AppendTime(dst []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.AppendFormat(dst, TimeLayout)
	}
	hour, minute, sec := t.Clock()
	micro := t.Nanosecond() / 1000
	var b [27]byte
	digits(b[0:4], year)
	b[4] = '-'
	digits(b[5:7], int(month))
	b[7] = '-'
	digits(b[8:10], day)
	b[10] = 'T'
	digits(b[11:13], hour)
	b[13] = ':'
	digits(b[14:16], minute)
	b[16] = ':'
	digits(b[17:19], sec)
	b[19] = '.'
	digits(b[20:26], micro)
	b[26] = 'Z'
	return append(dst, b[:]...)
}

// digits writes n, which has at most len(b) digits, into b in decimal,
// padded with zeros on the left.
func digits(b []byte, n int) {
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = byte('0' + n%10)
		n /= 10
	}
}

// Truncate returns t as it reads back after a round trip through TimeLayout:
// in UTC, truncated to the microsecond.
func Truncate(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }
