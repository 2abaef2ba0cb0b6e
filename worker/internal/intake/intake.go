// Package intake is the worker's message intake: it consumes the message
// stream with its own consumer (worker/internal/consumer), checks each
// entry's envelope, claims the message id in its idempotency record,
// dispatches the message (save_case, delete_case_bundle, start_run,
// run_case: a run is only submitted, to the runs stream, for the run
// executor), records and publishes its one reply, acks the entry, and
// dead-letters a message that keeps failing.
//
// Its collaborators come as a Deps struct, and what it reports (metrics,
// the stream's health and position) goes through the Report callbacks, so
// that it never reaches into the worker or the run executor. It imports
// the layers it works with (bundle, canonjson, flow, journal and
// journal/capture, replay, store, messages, version, internal/tracing) and
// the worker's own consumer, batch, envelope, replicas and runwire
// packages; never worker or worker/internal/runexec.
package intake

import (
	"context"
	"time"

	"github.com/valkey-io/valkey-go"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/worker/internal/batch"
	"github.com/pyrula/caseworker/worker/internal/consumer"
	"github.com/pyrula/caseworker/worker/internal/replicas"
	"github.com/pyrula/caseworker/worker/internal/runwire"
)

// Config is what the intake reads of the worker's configuration.
type Config struct {
	// Namespace prefixes the idempotency records' keys and the runs stream.
	Namespace string
	// CaseStream is the message stream, ConsumerGroup its group and
	// ConsumerName this worker's consumer in it.
	CaseStream, ConsumerGroup, ConsumerName string
	// ReplyStream is where a message without reply_to is answered.
	ReplyStream string
	// Concurrency is how many messages are handled at once.
	Concurrency int
	// SaveConcurrency is how many save_case build a bundle at once.
	SaveConcurrency int
	// ClaimIdle is how long a failed entry waits before a claim (doubled
	// per delivery); entries in flight are touched every third of it.
	ClaimIdle time.Duration
	// MaxDeliveries dead-letters an entry delivered that many times.
	MaxDeliveries int
	// MaxMessageBytes refuses larger entries unread.
	MaxMessageBytes int
	// IdempotencyTTL is how long a message id's record is kept.
	IdempotencyTTL time.Duration
	// WaitReplicas, when above 0, makes a reply's record wait for that many
	// replicas (WAIT), up to WaitTimeout.
	WaitReplicas int
	WaitTimeout  time.Duration
	// ReadBlock is how long one read of the message stream blocks.
	ReadBlock time.Duration
}

// Deps are the intake's collaborators, given by the worker.
type Deps struct {
	Client valkey.Client
	// Batch groups the per-message Valkey commands; the worker shares it
	// with nothing else that is not per-message.
	Batch   *batch.Batcher
	Logger  *zap.Logger
	Journal journal.Journal
	// Registry holds the targets a message may name.
	Registry *flow.Registry
	// LLMRef is the model client name of a message: its own, else the
	// worker's default.
	LLMRef func(own string) string
	// Models opens the model client a name names (nil for ""); a start_run
	// is refused when it cannot.
	Models func(name string) (flow.ModelClient, error)
	// CaseModels is Models for a case run: under replayOnly the name is
	// only checked.
	CaseModels func(name string, replayOnly bool) (flow.ModelClient, error)
	// FixtureStore returns the worker's fixture store checked against the
	// one a message expects ("" for any): no_fixture_store without one,
	// binding_mismatch when they differ.
	FixtureStore func(expected string) (store.Store, error)
	// Go runs a handler on a goroutine.
	Go func(fn func())
	// Tracer, when set, traces every message: its span and the spans of
	// its steps (trace.go). Nil: tracing is off and no span is started.
	Tracer trace.Tracer
	// Report is where the intake reports what it does.
	Report Report
}

// Report are the callbacks through which the intake reports to the worker
// (metrics, the message stream's health and position); none may be nil.
// A type is the message's type as the envelope gives it, "" when the entry
// was refused before its type was read.
type Report struct {
	// StreamFailed is told of a failed read or reclaim pass of the message
	// stream; it returns what the consumer should do
	// (consumer.Events.Failed).
	StreamFailed func(ctx context.Context, err error) error
	// Read is told of the entries a read of the message stream returned.
	Read func(entries []valkey.XRangeEntry)
	// Healthy is told that a Valkey round trip succeeded.
	Healthy func()
	// Received counts an entry at its first delivery.
	Received func(typ string)
	// HandlingStarted and HandlingEnded bracket a delivery being handled.
	HandlingStarted, HandlingEnded func()
	// Answered counts a message answered (recorded, replied and acked),
	// with how long its handling took.
	Answered func(typ string, status messages.ReplyStatus, took time.Duration)
	// Duplicate counts a message answered from its recorded reply.
	Duplicate func()
	// Transient counts a transient failure: the entry stays pending.
	Transient func(typ string)
	// Redelivered counts an entry reclaimed from another worker.
	Redelivered func()
	// DeadLettered counts a dead-lettered message and its one reply.
	DeadLettered func(typ string, status messages.ReplyStatus)
}

// Intake consumes the message stream: create it with New, run its
// Consumer with Handle.
type Intake struct {
	cfg     Config
	deps    Deps
	report  Report
	client  valkey.Client
	batch   *batch.Batcher
	log     *zap.Logger
	journal journal.Journal
	reg     *flow.Registry
	// runsStream is where runs are submitted, <ns>:runs.
	runsStream string
	// saves holds one token per save_case building a bundle.
	saves chan struct{}
	// cases is the message stream's consumer.
	cases *consumer.Consumer
	// replicas waits for PYRULA_WAIT_REPLICAS replicas on the reply and a
	// run's submission (none when 0).
	replicas replicas.Waiter
	// oneWrite: a message's record, reply and ack are one script (a single
	// Valkey, no PYRULA_WAIT_REPLICAS, no traces; finish).
	oneWrite bool
	// ttl is IdempotencyTTL as the records' PX argument (ttlArg).
	ttl string
}

// New returns the intake with its consumer.
func New(cfg Config, deps Deps) (*Intake, error) {
	in := &Intake{
		cfg: cfg, deps: deps, report: deps.Report,
		client: deps.Client, batch: deps.Batch, log: deps.Logger, journal: deps.Journal, reg: deps.Registry,
		runsStream: runwire.RunsStream(cfg.Namespace),
		saves:      make(chan struct{}, max(cfg.SaveConcurrency, 1)),
		replicas:   replicas.Waiter{Client: deps.Client, N: cfg.WaitReplicas, Timeout: cfg.WaitTimeout},
		oneWrite:   deps.Client.Mode() != valkey.ClientModeCluster && cfg.WaitReplicas <= 0 && deps.Tracer == nil,
		ttl:        ttlArg(cfg.IdempotencyTTL),
	}
	c, err := in.newConsumer()
	if err != nil {
		return nil, err
	}
	in.cases = c
	return in, nil
}

// Consumer is the message stream's consumer, to run with Handle.
func (in *Intake) Consumer() *consumer.Consumer { return in.cases }
