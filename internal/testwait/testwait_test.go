package testwait_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/pyrula/caseworker/internal/testwait"
)

// recorder is a testing.TB whose Fatalf records the failure instead of
// ending the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

// A condition that becomes true is waited for: Eventually returns as soon
// as it holds, without failing.
func TestEventuallyWaitsForTheCondition(t *testing.T) {
	t.Parallel()
	r := &recorder{TB: t}
	ready := time.Now().Add(50 * time.Millisecond)
	calls := 0
	start := time.Now()
	testwait.Eventually(r, time.Minute, "the clock", func() bool { calls++; return time.Now().After(ready) })
	if r.failed != "" {
		t.Fatalf("failed: %s", r.failed)
	}
	if took := time.Since(start); took < 50*time.Millisecond || took > 30*time.Second {
		t.Errorf("returned after %v; want soon after the condition held (50ms)", took)
	}
	if calls < 2 {
		t.Errorf("cond called %d times; want it polled", calls)
	}
}

// A condition that never holds fails the test once the bound has passed,
// with a message naming what was awaited and the bound.
func TestEventuallyFailsAfterTheBound(t *testing.T) {
	t.Parallel()
	r := &recorder{TB: t}
	start := time.Now()
	testwait.Eventually(r, 100*time.Millisecond, "the reply", func() bool { return false })
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Errorf("gave up after %v, before the bound (100ms)", took)
	}
	if want := "the reply: not within 100ms"; r.failed != want {
		t.Errorf("failure %q, want %q", r.failed, want)
	}
}

// A condition that holds at once is checked once, without sleeping.
func TestEventuallyChecksFirst(t *testing.T) {
	t.Parallel()
	r := &recorder{TB: t}
	calls := 0
	testwait.Eventually(r, time.Nanosecond, "now", func() bool { calls++; return true })
	if r.failed != "" || calls != 1 {
		t.Errorf("calls %d, failure %q; want one call and no failure", calls, r.failed)
	}
}
