package worker

import (
	"sync"
	"time"
)

// spawnIdle is how long a handler goroutine waits for the next message
// before it ends; it bounds how long one outlives Stop.
const spawnIdle = 100 * time.Millisecond

// spawner runs each message's handler on a goroutine, reusing one that has
// just finished a message (its stack already grown to what handling needs)
// instead of starting a new goroutine per message: under load this saves
// about a tenth of the CPU a message costs (stack growth and goroutine
// creation). The zero value is ready.
type spawner struct {
	once sync.Once
	work chan func()
}

// run runs fn on an idle handler goroutine, or on a new one.
func (s *spawner) run(fn func()) {
	s.once.Do(func() { s.work = make(chan func()) })
	select {
	case s.work <- fn:
	default:
		go s.loop(fn)
	}
}

// loop runs fn, then whatever run hands it, until it has been idle for
// spawnIdle.
func (s *spawner) loop(fn func()) {
	t := time.NewTimer(spawnIdle)
	defer t.Stop()
	for {
		fn()
		t.Reset(spawnIdle)
		select {
		case fn = <-s.work:
		case <-t.C:
			return
		}
	}
}
