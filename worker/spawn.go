package worker

import (
	"sync"
	"sync/atomic"
	"time"
)

// spawnIdle is the most a handler goroutine waits for the next message
// before it ends (at least half of it); it bounds how long one outlives
// Stop.
const spawnIdle = 100 * time.Millisecond

// spawnTick is the period of the spawner's ticks: a goroutine that waits
// through two of them ends.
const spawnTick = spawnIdle / 2

// spawner runs each message's handler on a goroutine, reusing one that has
// just finished a message (its stack already grown to what handling needs)
// instead of starting a new goroutine per message: under load this saves
// about a tenth of the CPU a message costs (stack growth and goroutine
// creation). A waiting goroutine has no timer of its own (arming one for
// every wait costs the runtime's timer heap on every message): one timer,
// armed while handler goroutines exist, closes the tick channel every
// spawnTick, and a goroutine that sees two ticks while it waits ends. The
// zero value is ready.
type spawner struct {
	once sync.Once
	work chan func()
	// tick is closed, and replaced, every spawnTick while ticking.
	tick atomic.Pointer[chan struct{}]

	mu sync.Mutex
	// n counts the handler goroutines; ticking says the timer is armed.
	n       int
	ticking bool
}

// run runs fn on a waiting handler goroutine, or on a new one.
func (s *spawner) run(fn func()) {
	s.once.Do(func() {
		s.work = make(chan func())
		s.newTick()
	})
	select {
	case s.work <- fn:
	default:
		s.mu.Lock()
		s.n++
		if !s.ticking {
			s.ticking = true
			time.AfterFunc(spawnTick, s.ticked)
		}
		s.mu.Unlock()
		go s.loop(fn)
	}
}

// newTick makes a new tick channel the current one.
func (s *spawner) newTick() {
	ch := make(chan struct{})
	s.tick.Store(&ch)
}

// ticked closes the tick channel, after putting a new one in its place,
// and arms the timer for the next tick while handler goroutines are left.
func (s *spawner) ticked() {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.tick.Load()
	s.newTick()
	close(*old)
	if s.ticking = s.n > 0; s.ticking {
		time.AfterFunc(spawnTick, s.ticked)
	}
}

// loop runs fn, then whatever run hands it, until it waited through two
// ticks.
func (s *spawner) loop(fn func()) {
	for {
		fn()
		if fn = s.wait(); fn == nil {
			s.mu.Lock()
			s.n--
			s.mu.Unlock()
			return
		}
	}
}

// wait returns the next function run hands over, or nil once two ticks
// passed without one.
func (s *spawner) wait() func() {
	tick := *s.tick.Load()
	for ticks := 0; ; {
		select {
		case fn := <-s.work:
			return fn
		case <-tick:
			if ticks++; ticks == 2 {
				return nil
			}
			tick = *s.tick.Load()
		}
	}
}
