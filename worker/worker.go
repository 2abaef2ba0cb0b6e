package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valkey-io/valkey-go"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/internal/redact"
	"github.com/pyrula/caseworker/internal/valkeyconn"
	"github.com/pyrula/caseworker/journal"
	jresolve "github.com/pyrula/caseworker/journal/resolve"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/resolve"
	"github.com/pyrula/caseworker/version"
	"github.com/pyrula/caseworker/worker/internal/batch"
	"github.com/pyrula/caseworker/worker/internal/consumer"
	"github.com/pyrula/caseworker/worker/internal/intake"
	"github.com/pyrula/caseworker/worker/internal/maintain"
	"github.com/pyrula/caseworker/worker/internal/runexec"
	"github.com/pyrula/caseworker/worker/internal/runwire"
)

// Params are what New needs besides the Config.
type Params struct {
	// Logger receives the worker's logs (zap.NewNop when nil).
	Logger *zap.Logger
	// Registerer receives the worker's metrics (none registered when nil).
	Registerer prometheus.Registerer
	// Registry holds the targets save_case may capture runs of.
	Registry *flow.Registry
	// Store, when set, is the fixture store to use instead of the one the
	// Config names; the worker does not close it. Tests use it.
	Store store.Store
	// Client, when set, is the Valkey client to use instead of one
	// connected to Config.ValkeyURL; the worker does not close it.
	Client valkey.Client
	// LoopClient, when set with Client, sends the round trips of the
	// message stream's loop (the commands of the handlers it runs on its
	// own goroutine, with its reads of new messages); nothing else uses it,
	// and the worker does not close it. Nil: Client sends them. A worker
	// that connects itself opens a second client, of one connection per
	// node, for that loop. New refuses a LoopClient without a Client.
	LoopClient valkey.Client
	// Getenv reads the environment of the built-in model clients
	// (ANTHROPIC_API_KEY, OPENAI_BASE_URL, …); os.Getenv when nil.
	Getenv func(string) string
	// TracerProvider, when set, receives the worker's spans: one per
	// message with its steps, one per execution of a run with its calls
	// (docs/operate.md, "Traces"). Nil: tracing is off, and no span is
	// started.
	TracerProvider trace.TracerProvider
}

// tracerName names the worker's spans' instrumentation scope.
const tracerName = "github.com/pyrula/caseworker/worker"

// Worker consumes the message stream. Create it with New, then Start and
// Stop it.
type Worker struct {
	cfg     Config
	log     *zap.Logger
	reg     *flow.Registry
	metrics *metrics

	client      valkey.Client
	ownClient   bool
	loopClient  valkey.Client // the message stream loop's rounds (Params.LoopClient); nil: client
	store       store.Store   // nil: no fixture store
	ownStore    bool
	journal     journal.Journal
	opened      *jresolve.Journal // the journal as opened, to close
	givenStore  store.Store
	givenClient valkey.Client
	givenLoop   valkey.Client

	batch  *batch.Batcher       // groups the per-message Valkey commands and the message stream's reads under load
	spawn  spawner              // runs the message handlers on reused goroutines (spawn.go)
	intake *intake.Intake       // consumes the message stream (intake.go wires it)
	exec   *runexec.Executor    // executes the runs stream, with its consumer (runs.go wires it)
	upkeep *maintain.Maintainer // trims the streams and deletes dead consumers (maintain.go)
	models modelClients         // live model clients by llm_ref
	tracer trace.Tracer         // nil: tracing is off

	// casePos and runsPos are the consumer groups on the message and runs
	// streams, with the newest entry id known delivered (group.go).
	casePos, runsPos *groupPos

	mu       sync.Mutex
	started  bool
	stopping bool
	cancel   context.CancelFunc // stops reading
	hard     context.CancelFunc // cancels in-flight work
	loops    sync.WaitGroup     // the two consumer loops (each until its handlers ended) and the maintenance loop
	stopOnce sync.Once
	stopped  chan struct{}

	healthy atomic.Bool // the last Valkey round trip succeeded
}

// New checks cfg (after Defaults) and returns a Worker that is not started.
func New(cfg Config, p Params) (*Worker, error) {
	cfg, err := cfg.Defaults()
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if p.LoopClient != nil && p.Client == nil {
		return nil, errors.New("worker: Params.LoopClient is set without Params.Client: give both, or neither (the worker then connects both itself)")
	}
	m, err := newMetrics(p.Registerer)
	if err != nil {
		return nil, fmt.Errorf("worker: register metrics: %w", err)
	}
	log := p.Logger
	if log == nil {
		log = zap.NewNop()
	}
	reg := p.Registry
	if reg == nil {
		reg = flow.NewRegistry()
	}
	getenv := p.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	var tracer trace.Tracer
	if p.TracerProvider != nil {
		tracer = p.TracerProvider.Tracer(tracerName, trace.WithInstrumentationVersion(version.Version))
	}
	return &Worker{
		cfg: cfg, log: log, reg: reg, metrics: m, tracer: tracer,
		givenStore: p.Store, givenClient: p.Client, givenLoop: p.LoopClient,
		models:  modelClients{reg: reg, getenv: getenv},
		stopped: make(chan struct{}),
	}, nil
}

// Config returns the worker's configuration with its defaults filled in.
func (w *Worker) Config() Config { return w.cfg }

// Start connects to Valkey (and the archive and fixture store when
// configured), creates the consumer group if it is missing (MKSTREAM) and
// starts reading: first the consumer's own pending entries, then new ones.
// It returns once reading has started; ctx bounds the setup only.
func (w *Worker) Start(ctx context.Context) (err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started || w.stopping {
		return errors.New("worker: Start called twice or after Stop")
	}
	defer func() {
		if err != nil {
			w.closeResources()
		}
	}()
	if err := w.open(ctx); err != nil {
		return err
	}
	if err := w.createGroup(ctx); err != nil {
		return err
	}
	if w.intake, err = newIntake(w); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if w.upkeep, err = maintain.New(maintain.Config{Consumer: w.cfg.ConsumerName, ConsumerExpiry: w.cfg.ConsumerExpiry},
		maintain.Deps{Client: w.client, Logger: w.log}); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if w.exec, err = newExecutor(w); err != nil {
		return err
	}
	if err := w.exec.CreateGroup(ctx); err != nil {
		return err
	}
	w.casePos = &groupPos{label: streamCase, stream: w.cfg.CaseStream, group: w.cfg.ConsumerGroup}
	w.runsPos = &groupPos{label: streamRuns, stream: w.runsStream(), group: runwire.RunsGroup}
	for _, p := range []*groupPos{w.casePos, w.runsPos} {
		if _, err := w.observeGroup(ctx, p); err != nil {
			return fmt.Errorf("worker: %w", err)
		}
	}
	w.healthy.Store(true)
	w.instrument()
	readCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	workCtx, hard := context.WithCancel(context.WithoutCancel(ctx))
	w.cancel, w.hard = cancel, hard
	w.started = true
	// Each consumer loop reads until readCtx is done and returns once its
	// handlers (under workCtx) ended: see Stop.
	w.loops.Go(func() { w.consume(w.intake.Consumer(), readCtx, workCtx, w.intake.Handle) })
	w.loops.Go(func() { w.consume(w.exec.Consumer(), readCtx, workCtx, w.exec.Execute) })
	w.loops.Go(func() { w.maintainLoop(readCtx) })
	w.log.Info("worker started",
		zap.String("stream", w.cfg.CaseStream), zap.String("group", w.cfg.ConsumerGroup),
		zap.String("consumer", w.cfg.ConsumerName), zap.Int("concurrency", w.cfg.Concurrency),
		zap.String("runs_stream", w.runsStream()), zap.Int("run_concurrency", w.cfg.RunConcurrency),
		zap.Bool("fixture_store", w.store != nil))
	return nil
}

// open connects what the worker uses.
func (w *Worker) open(ctx context.Context) error {
	if w.givenClient != nil {
		w.client, w.loopClient = w.givenClient, w.givenLoop
	} else {
		opt, err := valkeyconn.Options(w.cfg.ValkeyURL, w.cfg.valkeySettings())
		if errors.Is(err, valkeyconn.ErrInvalidURL) {
			return messages.Errorf(messages.InvalidOverrides, "PYRULA_VALKEY_URL: not a redis:// or rediss:// URL")
		}
		if err != nil {
			return messages.Errorf(messages.InvalidOverrides, "%v", err)
		}
		connect := func(opt valkey.ClientOption) (valkey.Client, error) {
			c, err := valkey.NewClient(opt)
			if err != nil {
				return nil, fmt.Errorf("worker: connect to Valkey at %s (PYRULA_VALKEY_URL): %w", redact.Secrets(w.cfg.ValkeyURL), err)
			}
			return c, nil
		}
		if w.client, err = connect(opt); err != nil {
			return err
		}
		w.ownClient = true
		// The loop's own client: only its goroutine sends on it, so that
		// valkey-go sends each round on that goroutine (batch.Deps).
		opt.PipelineMultiplex = -1
		if w.loopClient, err = connect(opt); err != nil {
			return err
		}
	}
	w.batch = batch.New(batch.Config{Timeout: finishTimeout}, batch.Deps{Client: w.client, RoundClient: w.loopClient})
	j, err := jresolve.Open(ctx, jresolve.Config{URL: w.cfg.ValkeyURL, Client: w.client, Namespace: w.cfg.Namespace,
		CompletedTTL: w.cfg.CompletedTTL, ArchiveDSN: w.cfg.PostgresDSN})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	w.opened = j
	w.journal = j
	if w.givenStore != nil {
		w.store = w.givenStore
		return nil
	}
	env := map[string]string{resolve.EnvFixtureStore: w.cfg.FixtureStore, resolve.EnvPostgresDSN: w.cfg.PostgresDSN}
	u, err := resolve.URL("", func(k string) string { return env[k] })
	if code, ok := messages.CodeOf(err); ok && code == messages.NoFixtureStore {
		return nil // save_case and delete_case_bundle are refused
	}
	if err != nil {
		return fmt.Errorf("worker: fixture store: %w", err)
	}
	s, err := resolve.Open(ctx, u)
	if err != nil {
		return fmt.Errorf("worker: open fixture store: %w", err)
	}
	w.store, w.ownStore = s, true
	return nil
}

// createGroup creates the consumer group at the start of the stream,
// creating the stream too; an existing group is kept.
func (w *Worker) createGroup(ctx context.Context) error {
	err := w.client.Do(ctx, w.client.B().XgroupCreate().Key(w.cfg.CaseStream).Group(w.cfg.ConsumerGroup).Id("0").Mkstream().Build()).Error()
	if err != nil && !valkey.IsValkeyBusyGroup(err) {
		return fmt.Errorf("worker: create consumer group %s on %s: %w", w.cfg.ConsumerGroup, w.cfg.CaseStream, err)
	}
	return nil
}

// Ready reports whether the worker is started, not stopping, and its last
// Valkey round trip succeeded: what /readyz serves.
func (w *Worker) Ready() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.started && !w.stopping && w.healthy.Load()
}

// Stop stops reading at once and waits for in-flight messages and runs to
// finish until ctx is done. When ctx ends first it cancels what is still
// running (those messages and runs stay pending and are redelivered or
// resumed; nothing is lost) and returns ctx's error, waiting at most
// stopCancelGrace more for the cancelled work to wind down: Stop returns
// even when that work ignores the cancellation. What the worker opened is
// closed once everything has ended, in the background when Stop returned
// early; a later Stop waits for that (bounded by its own ctx). It is safe
// to call twice, and before Start.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	w.stopping = true
	started := w.started
	w.mu.Unlock()
	w.stopOnce.Do(func() {
		go func() {
			defer close(w.stopped)
			if !started {
				return
			}
			w.cancel()
			w.loops.Wait() // the consumer loops wait for their handlers
			w.hard()
			w.mu.Lock()
			defer w.mu.Unlock()
			w.closeResources()
		}()
	})
	select {
	case <-w.stopped:
		return nil
	case <-ctx.Done():
	}
	select {
	case <-w.stopped: // both were ready
		return nil
	default:
	}
	if !started {
		return nil
	}
	err := fmt.Errorf("worker: stop: in-flight work did not finish: %w", ctx.Err())
	w.hard()
	t := time.NewTimer(stopCancelGrace)
	defer t.Stop()
	select {
	case <-w.stopped:
	case <-t.C:
		w.log.Warn("stop: cancelled work has not ended; returning without waiting for it", zap.Duration("waited", stopCancelGrace))
	}
	return err
}

// stopCancelGrace is how long Stop waits, once its context ended and the
// in-flight work was cancelled, for that work to wind down (a run hands
// its lease back) before it returns anyway.
const stopCancelGrace = time.Second

// closeResources closes what the worker opened itself. Called with mu held.
func (w *Worker) closeResources() {
	w.metrics.streams.detach()
	if w.ownStore && w.store != nil {
		if err := w.store.Close(); err != nil {
			w.log.Warn("close the fixture store", zap.Error(err))
		}
		w.ownStore = false
	}
	if w.opened != nil {
		w.opened.Close()
		w.opened = nil
	}
	if w.ownClient && w.client != nil {
		w.client.Close()
		if w.loopClient != nil {
			w.loopClient.Close()
		}
		w.ownClient = false
	}
}

// consume runs consumer c's loop with handler h (consumer.Run) until
// ctx is done and the handlers it started ended.
func (w *Worker) consume(c *consumer.Consumer, ctx, work context.Context, h consumer.Handler) {
	if err := c.Run(ctx, work, h); err != nil {
		w.log.Error("consume "+c.Config().Name, zap.Error(err))
	}
}

// runsStream is the stream of submitted runs, <ns>:runs.
func (w *Worker) runsStream() string { return runwire.RunsStream(w.cfg.Namespace) }
