package batch

import (
	"context"
	"iter"
	"sync"

	"github.com/valkey-io/valkey-go"
)

// A Task runs a handler as a coroutine of the goroutine that starts it
// (Tasks.Start), so that one goroutine runs many messages' handlers with
// no hand-off through the Go scheduler: each command the handler sends
// through the Batcher (Do, Ack) with the Task's context is handed back to
// that goroutine instead (Pending), which sends the commands of all its
// tasks in one round trip (Round) and resumes each with its result. A
// handler about to do long or blocking work calls Detach first: its Task
// then goes on on a goroutine of its own (Resume), its commands in the
// Batcher's batches like any other handler's.
//
// A Task's context must not reach another goroutine's Batcher calls
// before Detach: only the Task's own coroutine can hand a command back.
// A Task is driven by one goroutine at a time.
type Task struct {
	tasks    *Tasks
	co       *coro
	call     *batchCall // the command waiting for Round, nil if none
	detached bool       // Detach was called: its commands go to the batches
	done     bool       // the handler returned
}

// coro is a coroutine that runs handlers one after another: kept for the
// next Task once one ends, its stack keeps the size its handlers grew it
// to (a fresh goroutine's would grow, copied, for every message).
type coro struct {
	next  func() (struct{}, bool)
	stop  func()
	yield func(struct{}) bool
	fn    func()
	ended bool // fn returned (it yields then, for the next one)
}

// Tasks starts Tasks on coroutines it keeps for the next ones, at most
// max of them idle. Close ends the idle ones.
type Tasks struct {
	mu     sync.Mutex
	free   []*coro
	max    int
	closed bool
}

// NewTasks returns Tasks keeping at most max idle coroutines.
func NewTasks(max int) *Tasks { return &Tasks{max: max} }

// taskKey is the context key of the Task a handler runs in.
type taskKey struct{}

// taskOf returns the Task ctx runs in, nil when none or when it detached.
func taskOf(ctx context.Context) *Task {
	if t, ok := ctx.Value(taskKey{}).(*Task); ok && !t.detached {
		return t
	}
	return nil
}

// Start starts fn under ctx as a Task and runs it until its first
// command, its Detach or its end.
func (p *Tasks) Start(ctx context.Context, fn func(ctx context.Context)) *Task {
	t := &Task{tasks: p, co: p.get()}
	tctx := context.WithValue(ctx, taskKey{}, t)
	t.co.fn = func() { fn(tctx) }
	t.resume()
	return t
}

// get returns an idle coroutine, or a new one.
func (p *Tasks) get() *coro {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		co := p.free[n-1]
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return co
	}
	p.mu.Unlock()
	co := &coro{}
	co.next, co.stop = iter.Pull(func(yield func(struct{}) bool) {
		co.yield = yield
		for {
			fn := co.fn
			co.fn = nil
			fn()
			co.ended = true
			if !yield(struct{}{}) {
				return
			}
		}
	})
	return co
}

// put keeps co, whose handler ended, for the next Task, or ends it.
func (p *Tasks) put(co *coro) {
	co.ended = false
	p.mu.Lock()
	if !p.closed && len(p.free) < p.max {
		p.free = append(p.free, co)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	co.stop()
}

// Close ends the idle coroutines; those of Tasks still running end with
// their handlers.
func (p *Tasks) Close() {
	p.mu.Lock()
	free := p.free
	p.free, p.closed = nil, true
	p.mu.Unlock()
	for _, co := range free {
		co.stop()
	}
}

// resume runs the handler until its next command, its Detach or its end;
// at its end the coroutine goes back to Tasks.
func (t *Task) resume() {
	t.co.next()
	if t.co.ended {
		t.done = true
		co := t.co
		t.co = nil
		t.tasks.put(co)
	}
}

// Pending reports whether the handler waits for a command's result
// (Round sends it).
func (t *Task) Pending() bool { return t.call != nil }

// Done reports whether the handler returned.
func (t *Task) Done() bool { return t.done }

// Detached reports whether the handler called Detach and waits to be
// resumed on a goroutine of its own (Resume).
func (t *Task) Detached() bool { return t.detached && !t.done }

// Resume runs a detached Task to its end, on the caller's goroutine.
func (t *Task) Resume() {
	for !t.done {
		t.resume()
	}
}

// hand hands call back to the Task's driver and returns once Round has set
// its result.
func (t *Task) hand(call *batchCall) {
	t.call = call
	t.co.yield(struct{}{})
}

// Detach, called by a handler running in a Task (ctx), hands the Task back
// to its driver, which resumes it on a goroutine of its own: call it
// before long or blocking work. Outside a Task it does nothing.
func Detach(ctx context.Context) {
	if t := taskOf(ctx); t != nil {
		t.detached = true
		t.co.yield(struct{}{})
	}
}

// Round sends the commands the pending tasks wait for, then extra, in one
// DoMulti (a Task's XACK merged with the others of its stream and group),
// and resumes each of those tasks with its result until its next command,
// its Detach or its end. It returns the results of extra. Like a batch, it
// runs to its end under Config.Timeout even when ctx is cancelled. It
// sends on Deps.RoundClient when set, else on Deps.Client.
func (b *Batcher) Round(ctx context.Context, tasks []*Task, extra ...valkey.Completed) []valkey.ValkeyResult {
	calls := make([]*batchCall, 0, len(tasks)+len(extra))
	for _, t := range tasks {
		if t.call != nil {
			calls = append(calls, t.call)
		}
	}
	waiting := len(calls)
	for _, cmd := range extra {
		call := getCall()
		call.cmd = cmd
		calls = append(calls, call)
	}
	if len(calls) == 0 {
		return nil
	}
	b.send(ctx, b.rounds, calls)
	var res []valkey.ValkeyResult
	if len(extra) > 0 {
		res = make([]valkey.ValkeyResult, len(extra))
		for i, call := range calls[waiting:] {
			res[i] = call.res
			putCall(call)
		}
	}
	for _, t := range tasks {
		if t.call != nil {
			t.call = nil // the handler takes its result and recycles the call
			t.resume()
		}
	}
	return res
}
