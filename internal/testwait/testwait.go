// Package testwait is the tests' one way to wait for something to happen:
// Eventually polls a condition until it holds, within a bound, instead of
// sleeping for a fixed time and hoping. It imports only the standard
// library and is imported only by tests.
package testwait

import (
	"testing"
	"time"
)

// Poll intervals of Eventually: the first check is immediate, then the
// wait between checks doubles from MinInterval up to MaxInterval, so that a
// condition that holds soon is seen soon, and one that takes long is not
// polled in a tight loop.
const (
	MinInterval = time.Millisecond
	MaxInterval = 20 * time.Millisecond
)

// Eventually calls cond until it returns true, and fails t with
// t.Fatalf, naming what was awaited and the bound, when it has not within
// `within`. cond is called once more at the deadline, so a condition that
// holds by then passes however slow the polling was. cond runs on the
// test's goroutine; it may call t.Fatal itself to stop waiting for good.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	wait := MinInterval
	for !cond() {
		left := time.Until(deadline)
		if left <= 0 {
			if cond() {
				return
			}
			t.Fatalf("%s: not within %v", what, within)
			return
		}
		time.Sleep(min(wait, left))
		wait = min(2*wait, MaxInterval)
	}
}
