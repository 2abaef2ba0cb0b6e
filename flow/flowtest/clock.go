// Package flowtest holds test helpers for code that runs flow targets: a
// fake clock (Clock) and a compact form of a run's events (Trace). It
// imports flow/host and runevent and nothing else of the project; only tests import it.
package flowtest

import (
	"context"
	"sync"
	"time"

	"github.com/pyrula/caseworker/flow/host"
)

// Clock is a fake host.Clock. Its time moves only when told (Advance, Set),
// or, for an auto clock, when something sleeps: SleepUntil then moves the
// time to the wake time at once. It records every wait asked of it.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	auto    bool
	waits   []time.Duration
	changed chan struct{} // closed and replaced whenever now or the sleepers change
	asleep  int
}

var _ host.Clock = (*Clock)(nil)

// NewClock returns a clock that reads start and waits until advanced.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start, changed: make(chan struct{})}
}

// NewAutoClock returns a clock that reads start and, instead of waiting,
// jumps to each wake time.
func NewAutoClock(start time.Time) *Clock {
	c := NewClock(start)
	c.auto = true
	return c
}

func (c *Clock) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Now implements host.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// SleepUntil implements host.Clock. It records t - Now as a wait.
func (c *Clock) SleepUntil(ctx context.Context, t time.Time) error {
	c.mu.Lock()
	c.waits = append(c.waits, t.Sub(c.now))
	if c.auto && t.After(c.now) {
		c.now = t
		c.notifyLocked()
	}
	c.asleep++
	c.notifyLocked()
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.asleep--
		c.notifyLocked()
		c.mu.Unlock()
	}()
	for {
		c.mu.Lock()
		now, changed := c.now, c.changed
		c.mu.Unlock()
		if !now.Before(t) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// Advance moves the time forward by d, waking sleepers whose time came.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.notifyLocked()
}

// Set sets the time.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
	c.notifyLocked()
}

// Waits returns the waits asked so far, in order: for each SleepUntil, the
// wake time minus the time it was called.
func (c *Clock) Waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

// Sleepers returns how many SleepUntil calls are waiting now.
func (c *Clock) Sleepers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.asleep
}

// WaitForSleepers blocks until at least n SleepUntil calls are waiting, or
// until ctx is done (it returns false then).
func (c *Clock) WaitForSleepers(ctx context.Context, n int) bool {
	for {
		c.mu.Lock()
		asleep, changed := c.asleep, c.changed
		c.mu.Unlock()
		if asleep >= n {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}
