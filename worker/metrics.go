package worker

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pyrula/caseworker/internal/version"
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
			Help: "Runs that ended (finished or suspended) on this worker, by kind (live or case), status and reason code.",
		}, []string{"kind", "status", "code"}),
	}
	if reg == nil {
		return m, nil
	}
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "pyrula_worker_build_info",
		Help:        "Always 1; the version label is the worker's version.",
		ConstLabels: prometheus.Labels{"version": version.Version},
	})
	buildInfo.Set(1)
	for _, c := range []prometheus.Collector{m.messages, m.duration, m.inFlight, m.redeliveries, m.transient, m.deadLetters, m.duplicates, m.runsInFlight, m.runs, buildInfo} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// typeLabel bounds the type label to the known message types.
func typeLabel(t string) string {
	switch t {
	case "save_case", "run_case", "delete_case_bundle", "start_run":
		return t
	}
	return "unknown"
}
