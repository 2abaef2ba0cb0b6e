package worker

import (
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/suite"
)

// The kind label values of pyrula_worker_runs_total.
const (
	runKindLive  = "live"  // start_run
	runKindCase  = "case"  // run_case
	runKindSuite = "suite" // run_suite: its coordinator; its children are case runs
)

// runEndStatuses are the statuses a run ends with here (finished or
// suspended), the status label values of pyrula_worker_runs_total.
var runEndStatuses = []host.Status{host.StatusComplete, host.StatusError, host.StatusCancelled, host.StatusSuspended}

// replyStatuses are the outcome label values of pyrula_worker_messages_total.
var replyStatuses = []messages.ReplyStatus{messages.StatusOK, messages.StatusRefused, messages.StatusError}

// initSeries creates, at zero, the series of every labelled counter and
// histogram for the label values known in advance, so that a fresh worker
// already exports them and alerts and dashboards see 0, not "no data":
// messages received, answered (every type and outcome), their duration and
// transient failures by type (and "run"), runs by kind and end status with
// code "" (the codes are many and come from the runs), case calls by
// provenance, bundle sizes by op and consumer groups recreated by stream.
// The store metrics get theirs for the worker's one backend when its store
// is wrapped (newMeteredStore), the stream stats errors in newStreamStats.
func (m *metrics) initSeries() {
	for i, t := range typeLabels {
		m.receivedBy[i] = m.received.WithLabelValues(t)
		for _, s := range replyStatuses {
			m.answered(t, s) // fills answeredOK
		}
		m.durationOf(t) // fills durations
		m.transient.WithLabelValues(t)
	}
	m.transient.WithLabelValues("run")
	for _, v := range []string{suite.Pass, suite.Fail, suite.Error, suite.Skipped} {
		m.suiteChildren.WithLabelValues(v)
	}
	for _, k := range []string{runKindLive, runKindCase, runKindSuite} {
		for _, s := range runEndStatuses {
			m.runs.WithLabelValues(k, string(s), "")
		}
	}
	for _, p := range caseProvenances {
		m.caseCalls.WithLabelValues(p)
	}
	m.bundleBytes.WithLabelValues(opPut)
	m.bundleBytes.WithLabelValues(opOpen)
	m.groupRecreated.WithLabelValues(streamCase)
	m.groupRecreated.WithLabelValues(streamRuns)
}
