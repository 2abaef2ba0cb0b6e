package runexec

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/flow/journallog"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/replay"
	"github.com/pyrula/caseworker/runevent"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/worker/internal/consumer"
	"github.com/pyrula/caseworker/worker/internal/replicas"
	"github.com/pyrula/caseworker/worker/internal/runwire"
)

// finishTimeout bounds the writes that end a run's delivery (ack, hand
// back, dead letter) once its context may be done.
const finishTimeout = 10 * time.Second

// Executor executes the runs submitted on the runs stream: at most
// RunConcurrency at once, each under its journal lease, renewed while it
// runs. Entries are acked once their run finished or was suspended; a run
// whose worker died stays pending, is claimed by the runs consumer once
// idle and resumed from its journal.
type Executor struct {
	deps    Deps
	cfg     Config
	client  valkey.Client
	logger  *zap.Logger
	journal journal.Journal
	reg     *flow.Registry
	report  Report
	stream  string
	log     *journallog.Log
	owner   string
	// runs is the consumer of the runs stream, with RunConcurrency slots
	// and the runs stream's policy (New).
	runs *consumer.Consumer
	// running holds the runs executing here: the lease owner is this
	// process, so the lease cannot keep a second runs entry of the same
	// run (a redelivered submission adds one) from executing it at once.
	running consumer.Set
	// executing holds the runs of running whose lease is held here, being
	// executed (not only acquired or refused).
	executing consumer.Set
	// suites holds the runs of executing that are suites, once run has
	// read their submission: a wake of a suite executing here is told
	// without reading the journal.
	suites consumer.Set
	// replicas waits for PYRULA_WAIT_REPLICAS replicas (none when 0).
	replicas replicas.Waiter
}

// Config is what the executor reads of the worker's configuration.
type Config struct {
	// Namespace prefixes its keys; the runs stream is <Namespace>:runs.
	Namespace string
	// ConsumerName is this worker's consumer in the runs group.
	ConsumerName string
	// RunConcurrency is how many runs execute at once.
	RunConcurrency int
	// MaxDeliveries is how many transient failures of a run dead-letter it.
	MaxDeliveries int
	// ClaimIdle and RunLease: a runs entry is reclaimed once idle past the
	// larger; the lease is renewed every third of RunLease.
	ClaimIdle, RunLease time.Duration
	// IdempotencyTTL is how long a run's failure count is kept.
	IdempotencyTTL time.Duration
	// ReadBlock is how long one read of the runs stream blocks.
	ReadBlock time.Duration
	// WaitReplicas, when above 0, makes what an execution wrote reach that
	// many replicas (WAIT, up to WaitTimeout each) before its runs entry is
	// acked: the run's end, a suite child's note, a suite's children.
	WaitReplicas int
	WaitTimeout  time.Duration
}

// Deps are the executor's collaborators, given by the worker.
type Deps struct {
	Client   valkey.Client
	Logger   *zap.Logger
	Journal  journal.Journal
	Registry *flow.Registry
	// LLMRef is the model client name of a message: its own, else the
	// worker's default.
	LLMRef func(own string) string
	// Models opens the model client a name names (nil for "").
	Models func(name string) (flow.ModelClient, error)
	// CaseModels is Models for a case run: under replayOnly the name is
	// only checked.
	CaseModels func(name string, replayOnly bool) (flow.ModelClient, error)
	// FixtureStore opens the fixture store a run_case names ("" for the
	// worker's own).
	FixtureStore func(expected string) (store.Store, error)
	// Report is where the executor reports what it does.
	Report Report
	// Tracer, when set, traces every execution of a run and, through the
	// run's context, its calls (trace.go). Nil: tracing is off.
	Tracer trace.Tracer
}

// Report are the callbacks through which the executor reports to the
// worker (metrics, the runs stream's health); none may be nil.
type Report struct {
	// StreamFailed is told of a failed read of the runs stream; it returns
	// what the consumer should do (consumer.Events.Failed).
	StreamFailed func(ctx context.Context, err error) error
	// Read is told of the entries a read of the runs stream returned.
	Read func(entries []valkey.XRangeEntry)
	// Redelivered counts a runs entry reclaimed from another worker.
	Redelivered func()
	// RunStarted and RunEnded bracket a run executing here.
	RunStarted, RunEnded func()
	// Transient counts a transient failure of a run.
	Transient func()
	// DeadLettered counts a dead-lettered run.
	DeadLettered func()
	// RunFinished counts a run that finished or was suspended here, by the
	// message type it was submitted with.
	RunFinished func(typ messages.MessageType, out host.Outcome)
	// CaseOutcome is told of a case run's outcome.
	CaseOutcome func(o replay.Outcome)
	// SuiteChild counts a suite's child noted done here (once per child,
	// across redeliveries), by verdict.
	SuiteChild func(verdict string)
}

// New returns the executor, with a lease owner unique to this process
// incarnation (the consumer name and a random suffix). Its runs consumer
// follows the runs stream's policy: an entry is claimed again once idle
// runIdle, whatever its deliveries (a run's retries are paced by its lease,
// and an entry is also delivered again when its run was leased elsewhere
// or handed back at shutdown); failures are counted per run in the run's
// failures hash (countFailure), and a run that failed MaxDeliveries times,
// or cannot be executed at all, is dead-lettered while Execute still holds
// its lease (deadLetterEntry); the entry is kept alive by the lease
// renewal (keepAlive), not by the consumer.
func New(cfg Config, deps Deps) (*Executor, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("worker: lease owner: %w", err)
	}
	owner := cfg.ConsumerName + "/" + hex.EncodeToString(b[:])
	var x *Executor
	l, err := journallog.New(deps.Journal, journallog.Options{Owner: owner, LeaseTTL: cfg.RunLease,
		// A run's end (a child's, before its parent takes its result) on
		// the replicas, with PYRULA_WAIT_REPLICAS.
		AfterFinish: func(ctx context.Context, runID string) error { return x.confirmEnded(ctx, runID) },
		// A live model call's or write's start on the replicas before the
		// call is made, with PYRULA_WAIT_REPLICAS: a failover cannot then
		// erase a run that paid or wrote (its message, not yet acked,
		// would submit a new run that pays again).
		BeforeAct: func(ctx context.Context, runID string, seq int64) error { return x.confirmStarted(ctx, runID, seq) }})
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	x = &Executor{deps: deps, cfg: cfg, client: deps.Client, logger: deps.Logger, journal: deps.Journal,
		reg: deps.Registry, report: deps.Report, stream: runwire.RunsStream(cfg.Namespace), log: l, owner: owner,
		replicas: replicas.Waiter{Client: deps.Client, N: cfg.WaitReplicas, Timeout: cfg.WaitTimeout}}
	x.runs, err = consumer.New(consumer.Config{
		Stream: x.stream, Group: runwire.RunsGroup, Consumer: cfg.ConsumerName,
		Slots: cfg.RunConcurrency, Name: "the runs stream", ReadBlock: cfg.ReadBlock,
		Policy: consumer.Policy{
			ClaimIdle:   x.runIdle(),
			Failed:      x.countFailure,
			MaxFailures: cfg.MaxDeliveries,
			DeadLetter:  x.deadLetterEntry,
		},
	}, consumer.Deps{
		Client: deps.Client, Logger: deps.Logger,
		Events: consumer.Events{
			Failed: deps.Report.StreamFailed,
			Read:   deps.Report.Read,
			Reclaimed: func(d consumer.Delivery, _ string) {
				deps.Report.Redelivered()
				deps.Logger.Info("reclaimed a runs entry", zap.String("entry_id", d.Entry.ID), zap.String("run_id", d.Entry.FieldValues[runwire.RunField]))
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	return x, nil
}

// Consumer is the runs stream's consumer, which the worker runs with
// Execute as its handler.
func (x *Executor) Consumer() *consumer.Consumer { return x.runs }

// runIdle is how long a runs entry must be idle before another worker
// reclaims it: at least the lease, which is renewed (and the entry
// touched) three times within it while the run executes.
func (x *Executor) runIdle() time.Duration { return max(x.cfg.ClaimIdle, x.cfg.RunLease) }

// CreateGroup creates the runs stream's consumer group (MKSTREAM).
func (x *Executor) CreateGroup(ctx context.Context) error {
	c := x.client
	err := c.Do(ctx, c.B().XgroupCreate().Key(x.stream).Group(runwire.RunsGroup).Id("0").Mkstream().Build()).Error()
	if err != nil && !valkey.IsValkeyBusyGroup(err) {
		return fmt.Errorf("worker: create consumer group %s on %s: %w", runwire.RunsGroup, x.stream, err)
	}
	return nil
}

// ack acks runs entry id and reports whether it did (best effort: an entry
// left pending is reclaimed, finds its run finished and is acked then).
func (x *Executor) ack(ctx context.Context, id string) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	c := x.client
	if err := c.Do(ctx, c.B().Xack().Key(x.stream).Group(runwire.RunsGroup).Id(id).Build()).Error(); err != nil {
		x.logger.Warn("ack a runs entry", zap.String("entry_id", id), zap.Error(err))
		return false
	}
	return true
}

// touch resets the idle time of runs entry id (XCLAIM to this consumer),
// so that no other worker reclaims a run that is executing here.
func (x *Executor) touch(ctx context.Context, id string) error {
	c := x.client
	return c.Do(ctx, c.B().Xclaim().Key(x.stream).Group(runwire.RunsGroup).Consumer(x.cfg.ConsumerName).
		MinIdleTime("0").Id(id).Justid().Build()).Error()
}

// errLeaseLost is the cause of a run's context when its lease was lost.
var errLeaseLost = errors.New("worker: the run's lease was lost")

// acked is the verdict of an entry x.ack tried to ack: Acked, or Retry
// when the ack failed.
func acked(ok bool) consumer.Verdict {
	if ok {
		return consumer.Acked()
	}
	return consumer.Retry(nil)
}

// runningPoll and runningWait: how often, and how long at most, Execute
// waits for another runs entry of the same run that is taking (or being
// refused) its lease here.
const (
	runningPoll = 5 * time.Millisecond
	runningWait = 5 * time.Second
)

// Execute is the runs stream's consumer.Handler: it executes the run of
// the runs entry d delivers under its lease, and acks the entry once the
// run finished or was suspended. A run leased by another live worker, a
// lost lease or a shutdown leaves the entry pending, uncounted; a transient
// failure is settled while the lease is still held (d.Settle): counted,
// and dead-lettered once the run failed MaxDeliveries times
// (deadLetterEntry), as is at once a run that cannot be executed at all;
// else the run is handed back and its entry left pending.
func (x *Executor) Execute(ctx context.Context, d consumer.Delivery) consumer.Verdict {
	e := d.Entry
	runID := e.FieldValues[runwire.RunField]
	log := x.logger.With(zap.String("entry_id", e.ID), zap.String("run_id", runID))
	if journal.CheckRunID(runID) != nil {
		log.Warn("runs entry without a valid run id; acked")
		return acked(x.ack(ctx, e.ID))
	}
	for waited := time.Duration(0); !x.running.Add(runID); waited += runningPoll {
		// Only a coordinator executing here under its lease checks the
		// suite's children once more after it suspends. Another entry of
		// the run that is only taking its lease here (or being refused
		// it) covers nothing: wait for it to be done, then go on as if
		// alone.
		if x.executing.Has(runID) {
			if x.suites.Has(runID) || x.isSuite(ctx, runID) {
				log.Debug("the suite is executing here; its check after it suspends covers this entry: acked")
				return acked(x.ack(ctx, e.ID))
			}
			log.Debug("the run is executing here under another runs entry; left pending")
			return consumer.Retry(nil)
		}
		if waited >= runningWait || !consumer.Sleep(ctx, runningPoll) {
			log.Debug("another runs entry of the run is being taken here; left pending")
			return consumer.Retry(nil)
		}
	}
	// Removed once: after a suspended suite's removal below, another
	// entry of the suite may be executing here.
	removed := false
	defer func() {
		if !removed {
			x.suites.Remove(runID)
			x.executing.Remove(runID)
			x.running.Remove(runID)
		}
	}()
	lease, err := x.journal.Acquire(ctx, journal.AcquireParams{RunID: runID, Owner: x.owner, TTL: x.cfg.RunLease})
	switch {
	case errors.Is(err, journal.ErrRunFinished):
		// Finished, but perhaps not archived: its Finish could not reach
		// the archive (PostgreSQL down), which left the entry pending.
		// Seal again (a no-op for a run already archived) before the ack.
		if serr := x.journal.Seal(ctx, runID); serr != nil {
			if ctx.Err() == nil {
				log.Warn("archive the finished run; left pending, to be archived when the archive is back", zap.Error(serr))
			}
			return consumer.Retry(nil)
		}
		// A suite's child: note it done again, in case a crash came
		// between its end and its note.
		if sub, _, err := runwire.Submitted(ctx, x.journal, runID); err == nil {
			if ref, ok := suiteRefOf(sub); ok {
				if err := x.childDone(ctx, runID, ref); err != nil {
					log.Warn("note the finished child in its suite; left pending", zap.Error(err))
					return consumer.Retry(nil)
				}
			}
		}
		return acked(x.ack(ctx, e.ID))
	case errors.Is(err, journal.ErrRunNotFound):
		log.Warn("runs entry of a run that is not in the journal; acked")
		return acked(x.ack(ctx, e.ID))
	case errors.Is(err, journal.ErrLeaseHeld):
		if d.Deliveries == 1 && x.isSuite(ctx, runID) {
			// A wake of a suite another worker is executing: that worker
			// checks the suite's children again once it suspends it. Only
			// a first delivery: an entry claimed again may be the one the
			// holder was executing when it died, which must stay pending
			// until its lease lapses and the suite is taken over.
			log.Debug("the suite is leased by another worker, which checks it again: acked")
			return acked(x.ack(ctx, e.ID))
		}
		log.Debug("the run is leased by another worker; left pending")
		return consumer.Retry(nil)
	case err != nil:
		if ctx.Err() == nil {
			log.Warn("acquire the run's lease; left pending", zap.Error(err))
		}
		return consumer.Retry(nil)
	}
	if err := x.log.Adopt(lease); err != nil {
		log.Error("adopt the run's lease", zap.Error(err))
		return consumer.Retry(nil)
	}
	x.executing.Add(runID)
	x.report.RunStarted()
	defer x.report.RunEnded()
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); x.keepAlive(runCtx, cancel, runID, e.ID, log) }()
	status, typ, err := x.run(runCtx, runID, log)
	cancel(nil)
	wg.Wait()
	switch {
	case err == nil:
		if err := x.confirmEnded(ctx, runID); err != nil {
			// The end may yet be lost to a failover: not acked, so that a
			// redelivery finds the run as its node has it.
			log.Warn("the run's end on the replicas; left pending", zap.Error(err))
			return consumer.Retry(nil)
		}
		log.Info("run ended", zap.String("status", string(status)))
		if typ == messages.RunSuite && status == host.StatusSuspended {
			// From now on a wake of the suite executes it, here too; then
			// check its children once more (recheckSuite).
			x.suites.Remove(runID)
			x.executing.Remove(runID)
			x.running.Remove(runID)
			removed = true
			if err := x.recheckSuite(ctx, runID); err != nil {
				log.Warn("check the suite's children once more; a child's entry wakes it", zap.Error(err))
			}
		}
		return acked(x.ack(ctx, e.ID))
	case errors.Is(context.Cause(runCtx), errLeaseLost) || errors.Is(err, journal.ErrLeaseLost):
		log.Warn("the run's lease was lost; another worker has it", zap.Error(err))
		return consumer.Retry(nil)
	}
	// Settled here, with the lease still held, which the dead letter
	// needs to end the run. Retrying cannot help a run that cannot be
	// executed: it is dead-lettered now (and, when that fails, counted
	// like a transient failure). After a shutdown nothing is counted.
	v := consumer.Retry(err)
	if errors.Is(err, errUnrunnable) {
		v = consumer.DeadLetter(err)
	}
	if v = d.Settle(ctx, v); v.Acked() {
		return v
	}
	// Shutdown or a transient failure: hand the run back so that any
	// worker resumes it when it reclaims the entry.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer rcancel()
	if rerr := x.log.Release(rctx, runID, journal.StatusRunning); rerr != nil {
		log.Warn("release the run's lease", zap.Error(rerr))
	}
	if ctx.Err() != nil {
		log.Info("run interrupted by shutdown; handed back", zap.Error(err))
	} else {
		log.Warn("run failed transiently; handed back and left pending", zap.Error(err))
	}
	return v
}

// confirmEnded makes sure, with PYRULA_WAIT_REPLICAS, that run runID's end
// (its status no longer running: ended or suspended) is on the replicas of
// its node, and with it every earlier write of its slot (its journal, a
// suite's counters).
func (x *Executor) confirmEnded(ctx context.Context, runID string) error {
	meta, _, _ := valkeyjournal.Keys(x.cfg.Namespace, runID)
	return x.replicas.Confirm(ctx, x.client.B().Hget().Key(meta).Field("status").Build(),
		func(r valkey.ValkeyResult) bool {
			s, err := r.ToString()
			return err == nil && s != "" && s != string(journal.StatusRunning)
		},
		runwire.ReplicatedKey(x.cfg.Namespace, runID))
}

// confirmStarted makes sure, with PYRULA_WAIT_REPLICAS, that run runID's
// journal up to run_seq seq (a live call's call:start) is on the replicas
// of its node, and with it the run's creation and every earlier write of
// its slot.
func (x *Executor) confirmStarted(ctx context.Context, runID string, seq int64) error {
	meta, _, _ := valkeyjournal.Keys(x.cfg.Namespace, runID)
	return x.replicas.Confirm(ctx, x.client.B().Hget().Key(meta).Field("last_seq").Build(),
		func(r valkey.ValkeyResult) bool {
			n, err := r.AsInt64()
			return err == nil && n >= seq
		},
		runwire.ReplicatedKey(x.cfg.Namespace, runID))
}

// countFailure is the runs stream's consumer.Policy.Failed: it counts a
// transient failure of the run of d (noteFailure) and returns the
// failures counted so far, 0 when they are not counted: an outage never
// dead-letters runs, neither a failure that is Valkey's (outage) nor one
// when Valkey cannot count it.
func (x *Executor) countFailure(ctx context.Context, d consumer.Delivery, cause error) int64 {
	x.report.Transient()
	if outage(cause) {
		return 0
	}
	runID := d.Entry.FieldValues[runwire.RunField]
	n, err := x.noteFailure(ctx, runID, cause)
	if err != nil {
		x.logger.Warn("count the run's failure", zap.String("entry_id", d.Entry.ID), zap.String("run_id", runID), zap.Error(err))
	}
	return n
}

// deadLetterEntry is the runs stream's consumer.Policy.DeadLetter: the
// dead letter of the run of d (deadLetter), settled by execute while it
// holds the run's lease.
func (x *Executor) deadLetterEntry(ctx context.Context, d consumer.Delivery, cause error, failures int64) bool {
	runID := d.Entry.FieldValues[runwire.RunField]
	log := x.logger.With(zap.String("entry_id", d.Entry.ID), zap.String("run_id", runID))
	return x.deadLetter(ctx, d.Entry.ID, runID, failures, cause, log)
}

// failuresKey is the hash counting a run's transient failures (field n) and
// keeping the last one's error (field error), under the run's hash tag.
func (x *Executor) failuresKey(runID string) string {
	return x.cfg.Namespace + ":{" + runID + "}:failures"
}

// noteFailure counts a transient failure of run runID and keeps its error
// (for PYRULA_IDEMPOTENCY_TTL); it returns the failures counted so far.
func (x *Executor) noteFailure(ctx context.Context, runID string, cause error) (int64, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	c, key := x.client, x.failuresKey(runID)
	res := c.DoMulti(ctx,
		c.B().Hincrby().Key(key).Field("n").Increment(1).Build(),
		c.B().Hset().Key(key).FieldValue().FieldValue("error", cause.Error()).Build(),
		c.B().Pexpire().Key(key).Milliseconds(x.cfg.IdempotencyTTL.Milliseconds()).Build())
	n, err := res[0].AsInt64()
	if err != nil {
		return 0, fmt.Errorf("HINCRBY %s: %w", key, err)
	}
	return n, nil
}

// deadLetter ends run runID, which failed transiently failures times (the
// last with cause), or cannot be executed at all (cause is errUnrunnable,
// failures 0), while this worker holds its lease: it XADDs the runs
// entry to <ns>:runs:dead (fields run_id, entry_id, error, failures), ends
// the run with run:error runtime_error (after a case:outcome line for a
// case run), notes a suite's child done in its suite (childDone), and acks
// the entry. It reports whether the entry was acked;
// when a step fails the run is left to be retried.
func (x *Executor) deadLetter(ctx context.Context, entryID, runID string, failures int64, cause error, log *zap.Logger) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	c := x.client
	dead := x.stream + ":dead"
	err := c.Do(ctx, c.B().Xadd().Key(dead).Id("*").FieldValue().FieldValue(runwire.RunField, runID).
		FieldValue("entry_id", entryID).FieldValue("error", cause.Error()).
		FieldValue("failures", strconv.FormatInt(failures, 10)).Build()).Error()
	if err != nil {
		log.Warn("write the run's dead letter", zap.Error(err))
		return false
	}
	meta, err := x.journal.Meta(ctx, runID)
	if err != nil {
		log.Warn("read the dead-lettered run", zap.Error(err))
		return false
	}
	var outcome *replay.Refusal
	msg := fmt.Sprintf("dead-lettered to %s after %d transient failures; last error: %v", dead, failures, cause)
	if errors.Is(cause, errUnrunnable) {
		msg = fmt.Sprintf("dead-lettered to %s: %v", dead, cause)
	}
	sub, _, subErr := runwire.Submitted(ctx, x.journal, runID)
	if subErr == nil {
		var typ string
		_ = json.Unmarshal(sub.Extra[runwire.FieldMessageType], &typ)
		if messages.MessageType(typ) == messages.RunCase {
			outcome = &replay.Refusal{RunID: runID, Target: meta.TargetName, Code: messages.RuntimeError, Message: msg}
		}
	}
	if _, err := x.fail(ctx, meta, messages.RuntimeError, msg, outcome); err != nil {
		log.Warn("end the dead-lettered run", zap.Error(err))
		return false
	}
	// A suite's child ends here too: noted done (failed), so that its
	// suite does not wait for it. On a failure the entry stays pending;
	// its redelivery finds the run finished and notes it (Execute).
	if ref, ok := suiteRefOf(sub); ok {
		if err := x.childDone(ctx, runID, ref); err != nil {
			log.Warn("note the dead-lettered child in its suite", zap.Error(err))
			return false
		}
	}
	x.report.DeadLettered()
	log.Warn("run dead-lettered", zap.String("code", string(messages.RuntimeError)), zap.Int64("failures", failures))
	return x.ack(ctx, entryID)
}

// keepAlive renews the run's lease and touches its runs entry every third
// of the lease until ctx is done; a lost lease cancels the run.
func (x *Executor) keepAlive(ctx context.Context, cancel context.CancelCauseFunc, runID, entryID string, log *zap.Logger) {
	every := max(x.cfg.RunLease/3, 10*time.Millisecond)
	for consumer.Sleep(ctx, every) {
		held, err := x.log.Renew(ctx, runID)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, journal.ErrLeaseLost) {
			cancel(errLeaseLost)
			return
		}
		if err != nil && !errors.Is(err, journal.ErrRunFinished) {
			log.Warn("renew the run's lease", zap.Error(err))
		}
		if !held {
			return
		}
		if err := x.touch(ctx, entryID); err != nil && ctx.Err() == nil {
			log.Warn("touch the runs entry", zap.Error(err))
		}
	}
}

// run executes run runID (its lease adopted by x.log) as its run:submitted
// event says: start_run, run_case or run_suite (the suite's coordinator).
// It returns the run's status once it finished (terminal event written) or
// was suspended, and the type it was submitted with; an error means
// neither (shutdown, lost lease or a transient failure). A suite's child
// that finished is noted done in its suite (childDone).
func (x *Executor) run(ctx context.Context, runID string, log *zap.Logger) (_ host.Status, _ messages.MessageType, err error) {
	sub, meta, err := runwire.Submitted(ctx, x.journal, runID)
	if err != nil {
		return "", "", err
	}
	// Read under the run's lease: the Log may hold the run's first
	// deferrable batches (its run:start goes with its first write).
	x.log.Seen(runID, meta.LastSeq)
	typ, terr := runType(sub)
	var out host.Outcome
	ctx, span := x.startRunSpan(ctx, sub, meta, typ)
	defer func() { endRunSpan(span, out, err) }()
	if terr != nil {
		return "", "", terr // dead-lettered, and traced as such
	}
	switch typ {
	case messages.RunCase:
		out, err = x.runCase(ctx, meta, sub, log)
	case messages.RunSuite:
		x.suites.Add(runID)
		out, err = x.runSuite(ctx, meta, sub.Extra[runwire.FieldRequest], log)
	default:
		out, err = x.startRun(ctx, meta, sub)
	}
	if err != nil {
		return "", "", err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	if out.Status == host.StatusSuspended {
		if err := x.log.Release(rctx, runID, journal.StatusSuspended); err != nil {
			return "", "", err
		}
		if typ == messages.RunSuite {
			return out.Status, typ, nil // not finished: counted once it ends
		}
	}
	if ref, ok := suiteRefOf(sub); ok && out.Status != host.StatusSuspended {
		if err := x.childDone(rctx, runID, ref); err != nil {
			// The entry stays pending: its redelivery finds the run
			// finished and notes it again (Execute).
			return "", "", err
		}
	}
	x.report.RunFinished(typ, out)
	return out.Status, typ, nil
}

// errUnrunnable marks a run the executor can never execute as submitted:
// its run:submitted event has no readable message_type. Such a run is
// dead-lettered at once instead of being retried (execute).
var errUnrunnable = errors.New("the run cannot be executed")

// runType is the message type a run was submitted with (the message_type
// field of its run:submitted event): start_run or run_case. A missing
// field, one that is not a JSON string, or another type is errUnrunnable.
func runType(sub journal.Event) (messages.MessageType, error) {
	raw, ok := sub.Extra[runwire.FieldMessageType]
	if !ok {
		return "", fmt.Errorf("%w: its run:submitted event has no %s", errUnrunnable, runwire.FieldMessageType)
	}
	var typ string
	if err := json.Unmarshal(raw, &typ); err != nil {
		return "", fmt.Errorf("%w: the %s of its run:submitted event is not a JSON string: %.100s", errUnrunnable, runwire.FieldMessageType, raw)
	}
	switch t := messages.MessageType(typ); t {
	case messages.StartRun, messages.RunCase, messages.RunSuite:
		return t, nil
	}
	return "", fmt.Errorf("%w: the %s of its run:submitted event is %q, not %s, %s or %s", errUnrunnable, runwire.FieldMessageType, typ,
		messages.StartRun, messages.RunCase, messages.RunSuite)
}

// startRun executes a start_run run (sub is its run:submitted event): the
// flow runtime over the journal, which starts it or resumes it from its
// journal.
func (x *Executor) startRun(ctx context.Context, meta journal.Meta, sub journal.Event) (host.Outcome, error) {
	request := sub.Extra[runwire.FieldRequest]
	var b messages.StartRunBody
	if len(request) > 0 {
		if err := json.Unmarshal(request, &b); err != nil {
			return x.fail(ctx, meta, messages.InvalidOverrides, fmt.Sprintf("the run's request is not a start_run body: %v", err), nil)
		}
	}
	models, err := x.deps.Models(x.deps.LLMRef(b.LLMRef))
	if me := messages.AsError(err); me != nil {
		return x.fail(ctx, meta, me.Code, me.Message, nil)
	}
	var inputs map[string]json.RawMessage
	if len(meta.Inputs) > 0 {
		if err := json.Unmarshal(meta.Inputs, &inputs); err != nil {
			return x.fail(ctx, meta, messages.InvalidOverrides, fmt.Sprintf("the run's inputs are not a JSON object: %v", err), nil)
		}
	}
	rt, err := host.NewRuntime(host.Config{Registry: x.reg, Log: x.log})
	if err != nil {
		return host.Outcome{}, fmt.Errorf("worker: %w", err)
	}
	out, err := rt.Run(ctx, host.RunParams{RunID: meta.RunID, Target: meta.TargetName, Inputs: inputs, Models: models,
		Recorded: onlySubmitted(meta, sub)})
	if errors.Is(err, host.ErrUnknownTarget) || errors.Is(err, host.ErrInvalidInputs) {
		return x.fail(ctx, meta, messages.InvalidOverrides, err.Error(), nil)
	}
	return out, err
}

// onlySubmitted is the whole journal of run meta.RunID when its only
// event is sub, its run:submitted (a run no worker has started yet), read
// with meta while holding the run's lease: what the runtime starts from
// instead of reading the run again. Nil when the run holds more.
func onlySubmitted(meta journal.Meta, sub journal.Event) *host.Recorded {
	if meta.LastSeq != sub.RunSeq {
		return nil
	}
	return &host.Recorded{Events: []host.Event{sub}}
}

// fail ends a run that could not start with run:error code, writing
// outcome first (a case run's case:outcome line) when it is set.
func (x *Executor) fail(ctx context.Context, meta journal.Meta, code messages.Code, msg string, outcome *replay.Refusal) (host.Outcome, error) {
	at := time.Now().UTC()
	if outcome != nil {
		ev, err := outcome.Event(at)
		if err != nil {
			return host.Outcome{}, err
		}
		if _, err := x.log.Append(ctx, meta.RunID, host.Batch{Target: meta.TargetName, Events: []host.Event{ev}}); err != nil {
			return host.Outcome{}, err
		}
	}
	seq, err := x.log.Finish(ctx, meta.RunID, host.Event{Kind: runevent.RunError, At: at, Code: code, Message: msg})
	if errors.Is(err, host.ErrFinished) {
		return host.Outcome{RunID: meta.RunID, Status: host.StatusError, Code: code}, nil
	}
	if err != nil {
		return host.Outcome{}, err
	}
	return host.Outcome{RunID: meta.RunID, Status: host.StatusError, Code: code, Message: msg, LastSeq: seq}, nil
}
