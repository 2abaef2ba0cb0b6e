package core

import (
	"context"
	"time"
)

// Clock is the run's time: the "at" of its events, live now() reads, and the
// waits of durable sleeps and signal timeouts. Tests inject a fake one
// (flowtest.Clock); a case run may inject a clock that never waits.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// SleepUntil blocks until the clock reads t or later, or until ctx is
	// done, when it returns context.Cause(ctx). A t in the past returns nil
	// at once.
	SleepUntil(ctx context.Context, t time.Time) error
}

// SystemClock is the Clock of the machine.
type SystemClock struct{}

var _ Clock = SystemClock{}

// Now implements Clock.
func (SystemClock) Now() time.Time { return time.Now() }

// SleepUntil implements Clock with a timer.
func (SystemClock) SleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
