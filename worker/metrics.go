package worker

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/replay"
	"github.com/pyrula/caseworker/version"
)

// metrics are the worker's Prometheus metrics, registered on the
// Registerer passed to New (never on the global registry).
type metrics struct {
	messages     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	inFlight     prometheus.Gauge
	redeliveries prometheus.Counter
	transient    *prometheus.CounterVec
	deadLetters  prometheus.Counter
	duplicates   prometheus.Counter
	runsInFlight prometheus.Gauge
	runs         *prometheus.CounterVec
	// suiteChildren counts suites' children noted done here, by verdict.
	suiteChildren *prometheus.CounterVec
	// groupRecreated counts consumer groups created again after their
	// group or stream was deleted (group.go), by stream.
	groupRecreated *prometheus.CounterVec

	// received counts stream entries at their first delivery (see took).
	received *prometheus.CounterVec
	// caseCalls and liveCost are fed from case runs' outcomes.
	caseCalls *prometheus.CounterVec
	liveCost  prometheus.Counter
	// storeDuration, storeErrors and bundleBytes are fed by meteredStore.
	storeDuration *prometheus.HistogramVec
	storeErrors   *prometheus.CounterVec
	bundleBytes   *prometheus.HistogramVec
	// streams reads the streams' pending entries and lag at scrape time.
	streams *streamStats

	// The children every message updates, by typeIndex, looked up once
	// (WithLabelValues hashes its labels on every call), filled by
	// initSeries so that a fresh worker exports every series at 0.
	receivedBy [len(typeLabels)]prometheus.Counter
	answeredOK [len(typeLabels)]atomic.Pointer[prometheus.Counter]
	durations  [len(typeLabels)]atomic.Pointer[prometheus.Observer]
}

// typeLabels are typeLabel's results, in typeIndex's order.
var typeLabels = [...]string{"save_case", "run_case", "delete_case_bundle", "start_run", "run_suite", "unknown"}

// typeIndex is the index in typeLabels of typeLabel(t).
func typeIndex(t string) int {
	switch t {
	case "save_case":
		return 0
	case "run_case":
		return 1
	case "delete_case_bundle":
		return 2
	case "start_run":
		return 3
	case "run_suite":
		return 4
	}
	return 5
}

// answered is pyrula_worker_messages_total's child for message type typ
// and reply status.
func (m *metrics) answered(typ string, status messages.ReplyStatus) prometheus.Counter {
	i := typeIndex(typ)
	if status != messages.StatusOK {
		return m.messages.WithLabelValues(typeLabels[i], string(status))
	}
	if c := m.answeredOK[i].Load(); c != nil {
		return *c
	}
	c := m.messages.WithLabelValues(typeLabels[i], string(status))
	m.answeredOK[i].Store(&c)
	return c
}

// durationOf is pyrula_worker_message_duration_seconds's child for typ.
func (m *metrics) durationOf(typ string) prometheus.Observer {
	i := typeIndex(typ)
	if o := m.durations[i].Load(); o != nil {
		return *o
	}
	o := m.duration.WithLabelValues(typeLabels[i])
	m.durations[i].Store(&o)
	return o
}

// newMetrics creates the metrics and registers them on reg (none when reg
// is nil).
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pyrula_worker_messages_total",
			Help: "Messages answered, by type and outcome (the reply status: ok, refused or error).",
		}, []string{"type", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pyrula_worker_message_duration_seconds",
			Help:    "Time from reading a message to its ack, by type.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"type"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pyrula_worker_messages_in_flight",
			Help: "Messages being handled now.",
		}),
		redeliveries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pyrula_worker_redeliveries_total",
			Help: "Pending entries reclaimed for another attempt.",
		}),
		transient: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pyrula_worker_transient_failures_total",
			Help: "Attempts that failed transiently and left the message pending, by type.",
		}, []string{"type"}),
		deadLetters: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pyrula_worker_dead_letters_total",
			Help: "Messages moved to the dead-letter stream after too many deliveries.",
		}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pyrula_worker_duplicates_total",
			Help: "Messages answered from their idempotency record without doing the work again.",
		}),
		runsInFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pyrula_worker_runs_in_flight",
			Help: "Runs being executed now.",
		}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pyrula_worker_runs_total",
			Help: "Runs that ended (finished or suspended) on this worker, by kind (live, case or suite: a suite's coordinator), status and reason code.",
		}, []string{"kind", "status", "code"}),
		suiteChildren: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pyrula_worker_suite_children_total",
			Help: "Children of suites (case runs) that ended on this worker, by verdict: pass, fail, error (could not run) or skipped (a fail_fast suite stopped).",
		}, []string{"verdict"}),
		groupRecreated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pyrula_worker_group_recreated_total",
			Help: "Consumer groups this worker created again because the group or its stream was deleted under it (XGROUP DESTROY, DEL), by stream (case or runs).",
		}, []string{"stream"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pyrula_worker_messages_received_total",
			Help: "Message stream entries taken for handling, counted once per entry at its first delivery (redeliveries are pyrula_worker_redeliveries_total), by type.",
		}, []string{"type"}),
		caseCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pyrula_worker_case_calls_total",
			Help: "Calls of case runs by provenance: reused, simulated, live or changed for the calls after the fork (as the case outcome reports them), prefix for the recorded prefix calls verified.",
		}, []string{"provenance"}),
		liveCost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pyrula_worker_live_cost_usd_total",
			Help: "Spend of the live model calls of case runs, in US dollars, as the case outcomes report it (cost_usd).",
		}),
		storeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pyrula_worker_store_operation_duration_seconds",
			Help:    "Duration of fixture store operations, by backend (URL scheme) and operation.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"backend", "op"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pyrula_worker_store_errors_total",
			Help: "Fixture store operations that failed (an absent bundle and a cancelled call are not failures), by backend and operation.",
		}, []string{"backend", "op"}),
		bundleBytes: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pyrula_worker_bundle_bytes",
			Help:    "Stored (compressed) size of the bundles written (op=put) and read to the end (op=open) by this worker.",
			Buckets: prometheus.ExponentialBuckets(1024, 4, 11),
		}, []string{"op"}),
		streams: newStreamStats(),
	}
	m.initSeries() // metricsinit.go
	if reg == nil {
		return m, nil
	}
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "pyrula_worker_build_info",
		Help:        "Always 1; the version label is the worker's version.",
		ConstLabels: prometheus.Labels{"version": version.Version},
	})
	buildInfo.Set(1)
	for _, c := range []prometheus.Collector{m.messages, m.duration, m.inFlight, m.redeliveries, m.transient, m.deadLetters, m.duplicates, m.runsInFlight, m.runs, m.suiteChildren, m.groupRecreated,
		m.received, m.caseCalls, m.liveCost, m.storeDuration, m.storeErrors, m.bundleBytes, m.streams, m.streams.errors, buildInfo} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// typeLabel bounds the type label to the known message types.
func typeLabel(t string) string {
	switch t {
	case "save_case", "run_case", "delete_case_bundle", "start_run", "run_suite":
		return t
	}
	return "unknown"
}

// caseProvenances are the provenance label values of
// pyrula_worker_case_calls_total ("other" aside, for a provenance the
// engine adds later).
var caseProvenances = []string{replay.ProvReused, replay.ProvSimulated, replay.ProvLive, replay.ProvChanged, provPrefix}

// provPrefix is the provenance label of the recorded prefix calls a case
// run verified (the outcome's prefix_calls).
const provPrefix = "prefix"

// caseOutcome counts the calls and the live spend of a case run's outcome.
func (m *metrics) caseOutcome(o replay.Outcome) {
	for prov, n := range o.Provenance {
		if n <= 0 {
			continue
		}
		switch prov {
		case replay.ProvReused, replay.ProvSimulated, replay.ProvLive, replay.ProvChanged:
		default:
			prov = "other"
		}
		m.caseCalls.WithLabelValues(prov).Add(float64(n))
	}
	if o.PrefixCalls > 0 {
		m.caseCalls.WithLabelValues(provPrefix).Add(float64(o.PrefixCalls))
	}
	if o.CostUSD > 0 {
		m.liveCost.Add(float64(o.CostUSD))
	}
}
