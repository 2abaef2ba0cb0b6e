package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/pyrula/caseworker/worker/internal/runwire"
	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap"
)

// streamStatsTimeout bounds the Valkey round trip of one scrape of the
// stream metrics; a scrape that takes longer reports none of them.
const streamStatsTimeout = time.Second

// The stream label values: the streams are named by their role, not their
// key, so that the label has two values whatever the namespace.
const (
	streamCase = "case"
	streamRuns = "runs"
)

// streamStats is a prometheus.Collector that reads, at scrape time, the
// pending entries, lag, consumers and oldest pending entry of the worker's
// consumer group on each of its streams (XINFO GROUPS, XPENDING summary and
// TIME in one pipelined round trip). It reports nothing before the worker
// started or after it stopped, and nothing for a stream whose numbers cannot
// be read (counted in pyrula_worker_stream_stats_errors_total).
type streamStats struct {
	src    atomic.Pointer[streamSource]
	errors *prometheus.CounterVec

	pending, lag, oldest, consumers *prometheus.Desc

	mu      sync.Mutex
	failing map[string]bool // streams whose last read failed, to log changes only
}

// streamSource is what a scrape reads: the worker's client and streams.
type streamSource struct {
	client  valkey.Client
	log     *zap.Logger
	streams []streamRef
}

// streamRef names one stream and the worker's consumer group on it.
type streamRef struct {
	label, key, group string
}

// newStreamStats returns the collector, reading nothing until attached.
func newStreamStats() *streamStats {
	labels := []string{"stream"}
	s := &streamStats{
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pyrula_worker_stream_stats_errors_total",
			Help: "Scrapes that could not read a stream's pending entries or lag from Valkey (the stream's gauges were left out), by stream.",
		}, labels),
		pending: prometheus.NewDesc("pyrula_worker_stream_pending",
			"Entries of the stream delivered to the worker's consumer group and not yet acked (XINFO GROUPS pending).", labels, nil),
		lag: prometheus.NewDesc("pyrula_worker_stream_lag",
			"Entries of the stream not yet delivered to the worker's consumer group (XINFO GROUPS lag); left out when Valkey cannot tell.", labels, nil),
		oldest: prometheus.NewDesc("pyrula_worker_stream_oldest_pending_age_seconds",
			"Age of the oldest pending entry of the consumer group, from the time in its entry id (when it was added to the stream) to the Valkey server's clock; 0 when none is pending.", labels, nil),
		consumers: prometheus.NewDesc("pyrula_worker_stream_consumers",
			"Consumers of the worker's consumer group on the stream (XINFO GROUPS consumers), including ones gone idle.", labels, nil),
		failing: map[string]bool{},
	}
	for _, l := range []string{streamCase, streamRuns} {
		s.errors.WithLabelValues(l)
	}
	return s
}

// attachStreamStats points the stream metrics at the worker's streams;
// called once Start connected and created the consumer groups.
func (w *Worker) attachStreamStats() {
	w.metrics.streams.src.Store(&streamSource{client: w.client, log: w.log, streams: []streamRef{
		{label: streamCase, key: w.cfg.CaseStream, group: w.cfg.ConsumerGroup},
		{label: streamRuns, key: w.runsStream(), group: runwire.RunsGroup},
	}})
}

// detach stops the stream metrics from reading Valkey (the client is about
// to be closed).
func (s *streamStats) detach() { s.src.Store(nil) }

// Describe implements prometheus.Collector.
func (s *streamStats) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.pending
	ch <- s.lag
	ch <- s.oldest
	ch <- s.consumers
}

// Collect implements prometheus.Collector: one pipelined round trip,
// bounded by streamStatsTimeout.
func (s *streamStats) Collect(ch chan<- prometheus.Metric) {
	src := s.src.Load()
	if src == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), streamStatsTimeout)
	defer cancel()
	c := src.client
	cmds := make(valkey.Commands, 0, 2*len(src.streams))
	for _, st := range src.streams {
		cmds = append(cmds,
			c.B().XinfoGroups().Key(st.key).Build(),
			c.B().Xpending().Key(st.key).Group(st.group).Build())
	}
	// TIME goes apart from the streams' commands, at the same time: it has
	// no key, and on a Valkey Cluster a DoMulti that mixes keyless commands
	// with keys of several slots (the two streams) is refused by the
	// client (it panics). There it is answered by any node, whose clock
	// stands for the cluster's. The client may hold a pipelined request
	// past its context when the connection is stuck behind another
	// command; the scrape does not wait for it beyond streamStatsTimeout.
	type replies struct {
		streams []valkey.ValkeyResult
		time    valkey.ValkeyResult
	}
	done := make(chan replies, 1)
	go func() {
		clock := make(chan valkey.ValkeyResult, 1)
		go func() { clock <- c.Do(ctx, c.B().Time().Build()) }()
		streams := c.DoMulti(ctx, cmds...)
		done <- replies{streams: streams, time: <-clock}
	}()
	var res []valkey.ValkeyResult
	var clock valkey.ValkeyResult
	select {
	case r := <-done:
		res, clock = r.streams, r.time
	case <-ctx.Done():
		for _, st := range src.streams {
			s.errors.WithLabelValues(st.label).Inc()
			s.note(src.log, st, fmt.Errorf("XINFO GROUPS: %w", ctx.Err()))
		}
		return
	}
	now, err := serverTime(clock)
	if err != nil {
		now = time.Now() // the ages are then measured against this host's clock
	}
	for i, st := range src.streams {
		g, err := groupStats(res[2*i], res[2*i+1], st.group, now)
		if err != nil {
			s.errors.WithLabelValues(st.label).Inc()
			s.note(src.log, st, err)
			continue
		}
		s.note(src.log, st, nil)
		ch <- prometheus.MustNewConstMetric(s.pending, prometheus.GaugeValue, float64(g.pending), st.label)
		ch <- prometheus.MustNewConstMetric(s.consumers, prometheus.GaugeValue, float64(g.consumers), st.label)
		ch <- prometheus.MustNewConstMetric(s.oldest, prometheus.GaugeValue, g.oldestAge.Seconds(), st.label)
		if g.lagKnown {
			ch <- prometheus.MustNewConstMetric(s.lag, prometheus.GaugeValue, float64(g.lag), st.label)
		}
	}
}

// note logs a stream's numbers becoming unreadable (once, not per scrape)
// and readable again.
func (s *streamStats) note(log *zap.Logger, st streamRef, err error) {
	s.mu.Lock()
	was := s.failing[st.label]
	s.failing[st.label] = err != nil
	s.mu.Unlock()
	switch {
	case err != nil && !was:
		log.Warn("read the stream metrics; they are left out until this succeeds",
			zap.String("stream", st.key), zap.String("group", st.group), zap.Error(err))
	case err == nil && was:
		log.Info("read the stream metrics again", zap.String("stream", st.key))
	}
}

// groupNumbers are one consumer group's numbers.
type groupNumbers struct {
	pending, consumers, lag int64
	lagKnown                bool
	oldestAge               time.Duration
}

// groupStats reads group's numbers from the replies of XINFO GROUPS and
// XPENDING (summary form) on its stream.
func groupStats(info, pending valkey.ValkeyResult, group string, now time.Time) (groupNumbers, error) {
	var g groupNumbers
	groups, err := info.ToArray()
	if err != nil {
		return g, fmt.Errorf("XINFO GROUPS: %w", err)
	}
	found := false
	for _, raw := range groups {
		m, err := raw.AsMap()
		if err != nil {
			return g, fmt.Errorf("XINFO GROUPS: %w", err)
		}
		field := func(k string) *valkey.ValkeyMessage { v := m[k]; return &v }
		if name, _ := field("name").ToString(); name != group {
			continue
		}
		found = true
		if g.pending, err = field("pending").AsInt64(); err != nil {
			return g, fmt.Errorf("XINFO GROUPS pending: %w", err)
		}
		if g.consumers, err = field("consumers").AsInt64(); err != nil {
			return g, fmt.Errorf("XINFO GROUPS consumers: %w", err)
		}
		// lag is nil when Valkey cannot compute it (entries deleted or
		// trimmed past the group's position); the gauge is left out then.
		if lag, ok := m["lag"]; ok {
			if n, err := lag.AsInt64(); err == nil {
				g.lag, g.lagKnown = n, true
			}
		}
	}
	if !found {
		return g, fmt.Errorf("consumer group %s not found", group)
	}
	summary, err := pending.ToArray()
	if err != nil {
		return g, fmt.Errorf("XPENDING: %w", err)
	}
	if len(summary) < 2 {
		return g, errors.New("XPENDING: unexpected reply")
	}
	if n, err := summary[0].AsInt64(); err != nil || n == 0 {
		return g, nil // nothing pending: age 0
	}
	id, err := summary[1].ToString()
	if err != nil {
		return g, fmt.Errorf("XPENDING oldest id: %w", err)
	}
	added, err := entryTime(id)
	if err != nil {
		return g, fmt.Errorf("XPENDING oldest id: %w", err)
	}
	g.oldestAge = max(now.Sub(added), 0)
	return g, nil
}

// entryTime is the time in a stream entry id ("<ms>-<seq>").
func entryTime(id string) (time.Time, error) {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("entry id %q: %w", id, err)
	}
	return time.UnixMilli(n), nil
}

// serverTime decodes the reply of TIME ([seconds, microseconds]).
func serverTime(r valkey.ValkeyResult) (time.Time, error) {
	parts, err := r.AsStrSlice()
	if err != nil {
		return time.Time{}, err
	}
	if len(parts) != 2 {
		return time.Time{}, errors.New("TIME: unexpected reply")
	}
	sec, err1 := strconv.ParseInt(parts[0], 10, 64)
	usec, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return time.Time{}, fmt.Errorf("TIME: %w", err)
	}
	return time.Unix(sec, usec*1000), nil
}
