package journal

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pyrula/caseworker/bundle"
)

// Defaults of the backends' options (zero means default).
const (
	// DefaultNamespace is the key namespace when none is configured
	// (PYRULA_NAMESPACE).
	DefaultNamespace = "pyrula"
	// DefaultCompletedTTL is how long a finished run stays in the live
	// journal (PYRULA_COMPLETED_TTL).
	DefaultCompletedTTL = 24 * time.Hour
	// DefaultLeaseTTL is how long a lease lasts without renewal when
	// CreateParams and AcquireParams do not say (PYRULA_RUN_LEASE).
	DefaultLeaseTTL = 30 * time.Second
)

// Journal is a run journal: the live record of runs, optionally backed by an
// Archive of finished runs. Implementations: memjournal.Journal,
// valkeyjournal.Journal. A Journal is safe for concurrent use.
//
// Every method returns an error wrapping the context's error when ctx is
// done before it completes, and wraps every error with the operation and the
// run id. Errors that callers act on are the sentinels of this package: test
// with errors.Is.
type Journal interface {
	// Namespace is the namespace the journal keeps its runs under (the
	// namespace of a bundle's source).
	Namespace() string

	// Create records a new run: its meta (status running, last_seq 1) and
	// its run:submitted event (run_seq 1). When p.Owner is set the caller
	// holds the run's lease (epoch 1) on return; otherwise the returned
	// Lease has no owner and the run waits for Acquire.
	// Errors: ErrRunExists when a run of that id exists, live or archived;
	// ErrInvalid for a malformed run id, inputs or field.
	Create(ctx context.Context, p CreateParams) (Lease, error)

	// Acquire takes a run's lease for p.Owner with the next epoch, so that
	// the run can be resumed by a new worker; from then on writes under an
	// older lease fail with ErrLeaseLost. It succeeds when the run has no
	// owner, when its lease has expired, or when p.Owner already holds it.
	// A suspended run becomes running.
	// Errors: ErrRunNotFound; ErrRunFinished; ErrLeaseHeld when another
	// owner's lease has not expired.
	Acquire(ctx context.Context, p AcquireParams) (Lease, error)

	// Renew extends the lease to now plus lease.TTL and returns the renewed
	// lease. A lease that expired but was not taken by anyone else is
	// renewed as well (writes are fenced by epoch, not by time).
	// Errors: ErrLeaseLost; ErrRunFinished; ErrRunNotFound.
	Renew(ctx context.Context, lease Lease) (Lease, error)

	// Release gives the lease up, leaving the run with no owner and status
	// (StatusRunning: hand it back to be resumed by anyone, as on shutdown;
	// StatusSuspended: it waits for something outside, such as a signal).
	// The epoch is kept; the next Acquire gets the one after.
	// Errors: ErrLeaseLost; ErrRunFinished; ErrRunNotFound; ErrInvalid for
	// another status.
	Release(ctx context.Context, lease Lease, status Status) error

	// Append appends b's events (assigning run_seq last_seq+1, …, in order)
	// and records b's results, atomically and only while lease is the run's
	// lease. It returns the run's new last_seq: the events got run_seq
	// last-len(b.Events)+1 … last. Events with a zero At are stamped with
	// the journal's clock. Appending only results, or nothing (a fenced
	// no-op that checks the lease), is allowed.
	// Errors (nothing is written on any error): ErrLeaseLost;
	// ErrRunFinished; ErrRunNotFound; ErrSeqConflict; ErrResultConflict;
	// ErrInvalid for a terminal or run:submitted event, an invalid field or
	// result, or a result given twice in b.
	Append(ctx context.Context, lease Lease, b Batch) (int64, error)

	// Finish ends the run: it appends b like Append, except that b's last
	// event must be terminal (and the only terminal one); sets the status
	// that event implies and finished_at (its at); then seals the run (see
	// Seal). It returns the final last_seq.
	// When sealing fails (the archive is unreachable), the run is finished
	// but its live keys do not expire: Finish returns the error (not a
	// sentinel) and Seal can be called again later.
	// Errors: those of Append, and ErrInvalid when b does not end with a
	// terminal event.
	Finish(ctx context.Context, lease Lease, b Batch) (int64, error)

	// Seal moves a finished run towards the archive: when the journal has an
	// Archive it writes the run there (idempotently), and only then sets the
	// completed TTL on the run's live keys, so that a run's keys never
	// expire unarchived. Finish calls it; call it again to complete a Finish
	// whose sealing failed. Sealing a run that is only in the archive is a
	// no-op.
	// Errors: ErrRunNotFinished; ErrRunNotFound.
	Seal(ctx context.Context, runID string) error

	// Meta returns the run's meta, from the live journal or else from the
	// archive; Meta.Origin says which.
	// Errors: ErrRunNotFound.
	Meta(ctx context.Context, runID string) (Meta, error)

	// Events returns all the run's events in run_seq order (1, 2, …,
	// last_seq) and where they were read from.
	// Errors: ErrRunNotFound.
	Events(ctx context.Context, runID string) ([]Event, Origin, error)

	// Results returns all the run's result records, sorted by (kind, key)
	// in code-point order, and where they were read from.
	// Errors: ErrRunNotFound.
	Results(ctx context.Context, runID string) ([]bundle.Result, Origin, error)

	// Run returns the run's meta, events and results read at one instant
	// from one place (a consistent snapshot: what a capture needs).
	// Errors: ErrRunNotFound.
	Run(ctx context.Context, runID string) (*Run, error)
}

// Archive is where finished runs are kept after they leave the live journal:
// pgarchive.Archive. Runs are addressed by namespace and run id. An Archive
// is safe for concurrent use. Every method's errors wrap the context's error
// when ctx is done.
type Archive interface {
	// Put stores a finished run (r.Meta.Status terminal) with its events
	// and results, all or nothing. Putting a run that is already archived
	// with the same last_seq succeeds and changes nothing.
	// Errors: ErrRunNotFinished; ErrRunExists when an archived run of that
	// id differs; ErrInvalid for a malformed run.
	Put(ctx context.Context, r *Run) error
	// Meta returns an archived run's meta (Origin OriginArchive).
	// Errors: ErrRunNotFound.
	Meta(ctx context.Context, namespace, runID string) (Meta, error)
	// Events returns an archived run's events in run_seq order.
	// Errors: ErrRunNotFound.
	Events(ctx context.Context, namespace, runID string) ([]Event, error)
	// Results returns an archived run's results sorted by (kind, key).
	// Errors: ErrRunNotFound.
	Results(ctx context.Context, namespace, runID string) ([]bundle.Result, error)
	// Run returns an archived run whole.
	// Errors: ErrRunNotFound.
	Run(ctx context.Context, namespace, runID string) (*Run, error)
}

// Status is a run's status.
type Status string

// Run statuses. Complete, error and cancelled are terminal.
const (
	// StatusRunning: submitted, executing, or handed back to be resumed.
	StatusRunning Status = "running"
	// StatusSuspended: waiting for something outside the run (a signal, an
	// interrupt's answer); not leased.
	StatusSuspended Status = "suspended"
	// StatusComplete: ended with run:complete.
	StatusComplete Status = "complete"
	// StatusError: ended with run:error.
	StatusError Status = "error"
	// StatusCancelled: ended with run:cancelled.
	StatusCancelled Status = "cancelled"
)

// Terminal reports whether s is the status of a finished run.
func (s Status) Terminal() bool {
	return s == StatusComplete || s == StatusError || s == StatusCancelled
}

// Valid reports whether s is one of the statuses.
func (s Status) Valid() bool {
	return s == StatusRunning || s == StatusSuspended || s.Terminal()
}

// Origin says where a run was read from: a bundle manifest's source.origin.
type Origin string

// Origins.
const (
	// OriginValkey: the live journal (memjournal reports it too, as the
	// stand-in for Valkey).
	OriginValkey Origin = "valkey"
	// OriginArchive: the PostgreSQL archive.
	OriginArchive Origin = "archive"
)

// Meta describes a run.
type Meta struct {
	// RunID is the run's id.
	RunID string
	// Namespace is the journal namespace the run was recorded under.
	Namespace string
	// TargetName is the registered target the run executes.
	TargetName string
	// CodeVersion is the code version the run was submitted with (run:start
	// events record the version that actually executed).
	CodeVersion string
	// Inputs is the run's inputs, a canonical JSON object.
	Inputs json.RawMessage
	// Status is the run's status.
	Status Status
	// LastSeq is the run_seq of the run's last event.
	LastSeq int64
	// LeaseOwner is the lease holder, "" when the run is not leased. A
	// finished run keeps the owner that finished it.
	LeaseOwner string
	// LeaseEpoch counts the leases handed out: 1 for the first owner, +1
	// for each Acquire. It never decreases.
	LeaseEpoch int64
	// LeaseUntil is when the lease expires (zero when not leased or
	// finished). Valkey measures it with the server's clock.
	LeaseUntil time.Time
	// CreatedAt is the at of the run:submitted event.
	CreatedAt time.Time
	// FinishedAt is the at of the terminal event; zero while running.
	FinishedAt time.Time
	// Origin is where the meta was read from (not stored).
	Origin Origin
}

// Lease is the right to write to a run's journal: the run's meta holds the
// owner and epoch of its one current lease. Keep it and pass it to Append,
// Finish, Renew and Release.
type Lease struct {
	// RunID is the leased run.
	RunID string
	// Owner identifies the holder; make it unique per process incarnation
	// (host name, pid, a random suffix), since an owner may re-acquire its
	// own unexpired lease.
	Owner string
	// Epoch is the lease's epoch; every Acquire increments it.
	Epoch int64
	// Until is when the lease expires unless renewed.
	Until time.Time
	// TTL is how long each renewal extends the lease.
	TTL time.Duration
}

// Run is a run read whole: its meta, all its events in run_seq order, and
// all its results sorted by (kind, key). Meta.Origin says where it was read.
type Run struct {
	// Meta is the run's meta; Meta.Origin says where the run was read.
	Meta Meta
	// Events are all the run's events, run_seq 1 … Meta.LastSeq.
	Events []Event
	// Results are all the run's result records, sorted by (kind, key).
	Results []bundle.Result
}

// CreateParams describe a new run.
type CreateParams struct {
	// RunID is the new run's id (see CheckRunID).
	RunID string
	// TargetName is the registered target the run executes.
	TargetName string
	// CodeVersion is the code version the run is submitted with.
	CodeVersion string
	// Inputs are the run's inputs, a JSON object; nil means {}.
	Inputs json.RawMessage
	// Owner, when set, takes the run's lease (epoch 1) at once.
	Owner string
	// LeaseTTL is the lease's time to live; zero means the journal's
	// default.
	LeaseTTL time.Duration
	// Fields are extra fields of the run:submitted event (its target_name
	// is set by Create).
	Fields map[string]json.RawMessage
	// At is when the run was submitted (the run:submitted event's at and
	// CreatedAt); zero means now.
	At time.Time
}

// AcquireParams say who takes a run's lease.
type AcquireParams struct {
	// RunID is the run to lease.
	RunID string
	// Owner is the new holder; required.
	Owner string
	// TTL is the lease's time to live; zero means the journal's default.
	TTL time.Duration
}

// Batch is what one Append or Finish writes, all or nothing.
type Batch struct {
	// Events are appended in order.
	Events []Event
	// Results are recorded under "kind:key" (ResultID).
	Results []bundle.Result
}

// CheckRunID returns an error wrapping ErrInvalid unless id can name a run:
// 1 to 200 characters from [A-Za-z0-9._:@/+=-], starting with a letter or a
// digit. Run ids become part of Valkey keys inside a hash tag, so braces and
// spaces are refused.
func CheckRunID(id string) error {
	if len(id) == 0 || len(id) > 200 {
		return fmt.Errorf("%w: run id %.210q must have 1 to 200 characters", ErrInvalid, id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if alnum || i > 0 && (c == '.' || c == '_' || c == ':' || c == '@' || c == '/' || c == '+' || c == '=' || c == '-') {
			continue
		}
		return fmt.Errorf("%w: run id %q has a character outside [A-Za-z0-9._:@/+=-] or does not start with a letter or digit", ErrInvalid, id)
	}
	return nil
}

// CheckNamespace returns an error wrapping ErrInvalid unless ns can be a
// journal namespace: 1 to 100 characters from [A-Za-z0-9._:-].
func CheckNamespace(ns string) error {
	if len(ns) == 0 || len(ns) > 100 {
		return fmt.Errorf("%w: namespace %.110q must have 1 to 100 characters", ErrInvalid, ns)
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-' {
			continue
		}
		return fmt.Errorf("%w: namespace %q has a character outside [A-Za-z0-9._:-]", ErrInvalid, ns)
	}
	return nil
}

// FinishedQuery selects finished runs of one target (Lister.Finished).
type FinishedQuery struct {
	// Target is the target_name of the runs; required.
	Target string
	// Status is the terminal status of the runs; StatusComplete when empty.
	Status Status
	// After and Before bound when the runs finished: After ≤ finished_at <
	// Before; a zero time does not bound.
	After, Before time.Time
}

// Matches reports whether meta m is a run q selects.
func (q FinishedQuery) Matches(m Meta) bool {
	status := q.Status
	if status == "" {
		status = StatusComplete
	}
	return m.TargetName == q.Target && m.Status == status && !m.FinishedAt.IsZero() &&
		(q.After.IsZero() || !m.FinishedAt.Before(q.After)) && (q.Before.IsZero() || m.FinishedAt.Before(q.Before))
}

// RunRef names a finished run and when it finished.
type RunRef struct {
	RunID      string
	FinishedAt time.Time
}

// Lister lists the finished runs a journal holds, the live tier and its
// archive together, each run once, in run id order. The journals of this
// module implement it; a suite's journal selection needs it.
type Lister interface {
	Finished(ctx context.Context, q FinishedQuery) ([]RunRef, error)
}

// TailReader reads a run's last events without the rest: a finished case
// run's outcome is in its last two. valkeyjournal and memjournal implement
// it.
type TailReader interface {
	// Tail returns the run's last n events (all of them when it has fewer),
	// in run_seq order, live or archived; ErrRunNotFound for a run the
	// journal does not know.
	Tail(ctx context.Context, runID string, n int) ([]Event, error)
}

// HeadReader reads a run's meta and first events without the rest: a
// run's first event, run:submitted, says how it was submitted, which a
// worker reads each time it takes the run up. valkeyjournal and
// memjournal implement it.
type HeadReader interface {
	// Head returns the run's meta and its first n events (all of them when
	// it has fewer), in run_seq order, live or archived, read at one
	// instant; ErrRunNotFound for a run the journal does not know.
	Head(ctx context.Context, runID string, n int) (Meta, []Event, error)
}

// ReadHead returns run runID's meta and first n events: through j's
// HeadReader when it has one, else from the run read whole (Run).
func ReadHead(ctx context.Context, j Journal, runID string, n int) (Meta, []Event, error) {
	if h, ok := j.(HeadReader); ok {
		return h.Head(ctx, runID, n)
	}
	r, err := j.Run(ctx, runID)
	if err != nil {
		return Meta{}, nil, err
	}
	return r.Meta, r.Events[:min(len(r.Events), max(n, 0))], nil
}

// ArchiveLister lists the runs an Archive holds under namespace, in run id
// order; pgarchive implements it.
type ArchiveLister interface {
	Finished(ctx context.Context, namespace string, q FinishedQuery) ([]RunRef, error)
}

// MergeRuns is the runs of a and b, each run id once (a's when both have
// it), in run id order.
func MergeRuns(a, b []RunRef) []RunRef {
	seen := make(map[string]bool, len(a))
	out := make([]RunRef, 0, len(a)+len(b))
	for _, r := range a {
		seen[r.RunID] = true
		out = append(out, r)
	}
	for _, r := range b {
		if !seen[r.RunID] {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(x, y RunRef) int { return strings.Compare(x.RunID, y.RunID) })
	return out
}
