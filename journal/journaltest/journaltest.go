// Package journaltest is the conformance suite of journal.Journal. Every
// backend runs it from its own tests, alone and with an archive:
//
//	func TestConformance(t *testing.T) {
//		journaltest.Run(t, func(t *testing.T) *journaltest.Harness {
//			clock := journaltest.NewClock(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
//			j, err := memjournal.New(memjournal.Options{Now: clock.Now})
//			if err != nil {
//				t.Fatal(err)
//			}
//			return &journaltest.Harness{Journal: j, CompletedTTL: journal.DefaultCompletedTTL, Advance: clock.Advance}
//		})
//	}
//
// The suite checks what callers rely on: creating runs, run_seq assignment
// and order, exact stored bytes, results by kind:key, lease fencing (an old
// lease cannot write after another owner acquired the run, including while
// it is appending), concurrent appenders under one lease, expiry, release and
// renewal, finishing, the completed TTL, archive fallback with identical
// bytes and origin, the errors of each method, and cancellation.
//
// journaltest imports journal and bundle, and no backend.
package journaltest

import (
	"sync"
	"testing"
	"time"

	"github.com/pyrula/caseworker/journal"
)

// Harness is one journal under test, with the hooks the suite needs to see
// or move what the journal keeps. newHarness returns a new one for every
// subtest, with a namespace (and clock) of its own.
type Harness struct {
	// Journal is the journal under test.
	Journal journal.Journal
	// CompletedTTL is the completed TTL the journal was configured with.
	CompletedTTL time.Duration
	// Archived is true when the journal has an archive.
	Archived bool
	// Advance, when set, moves the journal's clock forward by d (an
	// injected clock). Without it the suite waits, in real time, for
	// short leases to expire, and needs Expire and KeyTTLs.
	Advance func(d time.Duration)
	// Expire, when set, makes the live copy of a run disappear as the end
	// of its TTL would (Valkey: delete its keys). Without it the suite
	// uses Advance(CompletedTTL).
	Expire func(t *testing.T, runID string)
	// KeyTTLs, when set, returns the remaining time to live of each live
	// key of the run that exists (Valkey: PTTL), negative for a key
	// without expiry.
	KeyTTLs func(t *testing.T, runID string) []time.Duration
}

// Clock is a fake clock for journal tests. It stands still until Advance
// moves it; it is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock reading start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Run runs the conformance suite. newHarness is called once per subtest;
// subtests run in parallel.
func Run(t *testing.T, newHarness func(t *testing.T) *Harness) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, *Harness)
	}{
		{"CreateAndRead", testCreateAndRead},
		{"CreateUnowned", testCreateUnowned},
		{"CreateExists", testCreateExists},
		{"AppendAssignsRunSeq", testAppendAssignsSeq},
		{"Tail", testTail},
		{"Head", testHead},
		{"ExactBytes", testExactBytes},
		{"ExpectedRunSeq", testExpectedSeq},
		{"Results", testResults},
		{"Pages", testPages},
		{"ResultConflict", testResultConflict},
		{"ManyResults", testManyResults},
		{"InvalidInput", testInvalid},
		{"NotFound", testNotFound},
		{"FencingAfterTakeover", testFencing},
		{"AcquireWhileHeld", testAcquireHeld},
		{"Renew", testRenew},
		{"ReleaseAndSuspend", testRelease},
		{"ConcurrentAppendersOneLease", testConcurrentAppend},
		{"TakeoverDuringAppends", testTakeoverDuringAppends},
		{"Finish", testFinish},
		{"FinishStatuses", testFinishStatuses},
		{"Finished", testFinished},
		{"CompletedTTL", testCompletedTTL},
		{"ExpiredRun", testExpired},
		{"Cancelled", testCancelled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			if h.Advance == nil && (h.Expire == nil || h.KeyTTLs == nil) {
				t.Fatal("journaltest: a harness without Advance needs Expire and KeyTTLs")
			}
			tt.fn(t, h)
		})
	}
}
