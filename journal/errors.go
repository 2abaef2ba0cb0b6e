package journal

import (
	"errors"

	"github.com/pyrula/caseworker/journal/internal/wire"
)

// Errors of journals. Backends return them wrapped with the operation and
// the run ("valkeyjournal: append run-1: lease lost: …"); test with
// errors.Is.
var (
	// ErrRunNotFound means the run is in neither the live journal nor the
	// archive (or there is no archive): it never existed, or it finished
	// and aged out.
	ErrRunNotFound = errors.New("run not found")
	// ErrRunExists means Create found a run of that id, live or archived.
	ErrRunExists = errors.New("run already exists")
	// ErrLeaseLost means the writer's lease is no longer the run's lease:
	// another owner acquired the run (a higher epoch), or the lease was
	// released. The writer must stop working on the run; nothing was
	// written.
	ErrLeaseLost = errors.New("lease lost")
	// ErrLeaseHeld means Acquire found the run leased to another owner
	// whose lease has not expired.
	ErrLeaseHeld = errors.New("lease held by another owner")
	// ErrRunFinished means the run already ended (complete, error or
	// cancelled): it takes no more events and cannot be leased.
	ErrRunFinished = errors.New("run finished")
	// ErrRunNotFinished means Seal was called on a run that has not ended.
	ErrRunNotFinished = errors.New("run not finished")
	// ErrSeqConflict means an event given with a RunSeq would not get that
	// run_seq (another append came first). Nothing was written.
	ErrSeqConflict = errors.New("run_seq conflict")
	// ErrResultConflict means a result record for the same kind:key is
	// already recorded with different bytes (recording the same bytes again
	// is allowed). Nothing was written.
	ErrResultConflict = errors.New("result already recorded with a different value")
	// ErrInvalid means the input cannot be journaled: a malformed run id or
	// namespace, an event without a kind or with invalid JSON or reserved
	// field names, a terminal event outside Finish, a result with both or
	// neither of result and error, inputs that are not a JSON object.
	ErrInvalid = wire.ErrInvalid
)
