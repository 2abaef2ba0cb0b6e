// Package batch owns the group commit of the worker's per-message Valkey
// commands: concurrent handlers' commands travel together in one DoMulti,
// and the XACKs of one stream and group become one XACK.
//
// It imports nothing of the project.
package batch

import (
	"cmp"
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"
)

// maxBatch caps the commands of one batch.
const maxBatch = 256

// maxYields caps how many times the leader of a batch yields, while
// handlers keep queueing commands, before it sends the batch.
const maxYields = 8

// Batcher sends the per-message commands of concurrent handlers (record
// reads and writes, replies, acks) to Valkey in batches: one DoMulti at a
// time, carrying every command queued while the previous one was in flight
// (group commit, no added wait). A lone command goes out at once; under
// load a round trip and its system calls serve many messages instead of
// one. Each caller still waits for its own result before its next command,
// so the order of one message's steps (ack after reply after record) is
// unchanged. XACKs of one stream and group queued together become one
// XACK of all their ids.
//
// Create it with New; the caller that finds no batch in flight leads:
// it sends the queue, hands out the results and, if more queued meanwhile,
// passes the lead to the first of those callers.
type Batcher struct {
	client  valkey.Client
	rounds  valkey.Client // Round's client (Deps.RoundClient), else client
	timeout time.Duration

	mu      sync.Mutex
	queue   []*batchCall
	leading bool
}

// batchCall is one queued command and, once sent, its result.
type batchCall struct {
	cmd valkey.Completed
	// ack, when isAck, is an XACK of its id on its stream and group
	// (merged with others).
	ack   ackArgs
	isAck bool
	res   valkey.ValkeyResult
	err   error // for merged acks
	lead  bool  // woken to lead the next batch instead of with a result
	// done receives one value when the call has its result or the lead.
	done chan struct{}
}

type ackArgs struct{ stream, group, id string }

// calls recycles batchCalls (and their channels): every message takes
// three or four of them.
var calls = sync.Pool{New: func() any { return &batchCall{done: make(chan struct{}, 1)} }}

func getCall() *batchCall { return calls.Get().(*batchCall) }

// putCall recycles bc, whose done channel is empty (each wait consumed its
// one value).
func putCall(bc *batchCall) {
	*bc = batchCall{done: bc.done}
	calls.Put(bc)
}

// Config bounds the batches.
type Config struct {
	// Timeout bounds each batch's round trip, which runs to its end even
	// when the ctx of the caller that leads it is cancelled (it carries
	// other callers' commands). Zero means DefaultTimeout.
	Timeout time.Duration
}

// DefaultTimeout is the bound of a batch when Config.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// Deps are what a Batcher uses.
type Deps struct {
	// Client sends the batches.
	Client valkey.Client
	// RoundClient, when set, sends the Rounds instead: a client that only
	// the one goroutine driving the Tasks uses keeps each connection's
	// calls on their caller's goroutine (valkey-go hands the calls on a
	// connection that several goroutines share to the connection's own
	// reader and writer goroutines, a wake-up each way per round trip).
	RoundClient valkey.Client
}

// New returns a Batcher sending on deps.Client (and its Rounds on
// deps.RoundClient when set).
func New(cfg Config, deps Deps) *Batcher {
	return &Batcher{client: deps.Client, rounds: cmp.Or(deps.RoundClient, deps.Client), timeout: cmp.Or(cfg.Timeout, DefaultTimeout)}
}

// Do sends cmd in the next batch and returns its result; under the context
// of a Task, the Task's driver sends it (Round). A batch runs to
// its end under Config.Timeout even when the ctx of the caller that leads
// it is cancelled, since it carries other handlers' commands. cmd must
// have a key: on a Valkey Cluster the batch's commands go to the nodes of
// their slots, and the client refuses (panics on) a DoMulti that mixes a
// keyless command with keys of several slots.
func (b *Batcher) Do(ctx context.Context, cmd valkey.Completed) valkey.ValkeyResult {
	call := getCall()
	call.cmd = cmd
	b.submit(ctx, call)
	res := call.res
	putCall(call)
	return res
}

// submit hands call to the Task ctx runs in, whose driver sends it in its
// next Round, or else sends it in the next batch (run).
func (b *Batcher) submit(ctx context.Context, call *batchCall) {
	if t := taskOf(ctx); t != nil {
		t.hand(call)
		return
	}
	b.run(ctx, call)
}

// Ack XACKs entry id of stream for group in the next batch, or, under the
// context of a Task, in its driver's next Round.
func (b *Batcher) Ack(ctx context.Context, stream, group, id string) error {
	call := getCall()
	call.ack, call.isAck = ackArgs{stream, group, id}, true
	b.submit(ctx, call)
	err := call.err
	putCall(call)
	return err
}

func (b *Batcher) run(ctx context.Context, call *batchCall) {
	b.mu.Lock()
	b.queue = append(b.queue, call)
	if b.leading {
		b.mu.Unlock()
		<-call.done
		if !call.lead {
			return
		}
		b.mu.Lock() // leading passed to this caller, whose command is queued
	}
	b.leading = true
	for {
		// Let the handlers that the last batch just woke queue their next
		// command first (batches grow from about 6 to about 9 commands),
		// yielding again while they keep coming (a lone command still
		// goes out after one yield).
		for queued, i := len(b.queue), 0; i < maxYields; i++ {
			b.mu.Unlock()
			runtime.Gosched()
			b.mu.Lock()
			if len(b.queue) == queued {
				break // nobody queued meanwhile
			}
			queued = len(b.queue)
		}
		n := min(len(b.queue), maxBatch)
		batch := b.queue[:n:n]
		b.queue = b.queue[n:]
		b.mu.Unlock()
		b.send(ctx, b.client, batch)
		mine := false
		for _, bc := range batch {
			if bc == call {
				mine = true
			} else {
				bc.done <- struct{}{}
			}
		}
		b.mu.Lock()
		if mine {
			if len(b.queue) == 0 {
				b.leading = false
			} else {
				next := b.queue[0]
				next.lead = true
				next.done <- struct{}{}
			}
			b.mu.Unlock()
			return
		}
	}
}

// send sends one batch as one DoMulti on c and sets each call's result.
func (b *Batcher) send(ctx context.Context, c valkey.Client, batch []*batchCall) {
	cmds := make(valkey.Commands, 0, len(batch))
	type ackGroup struct {
		idx   int // of its command in cmds
		calls []*batchCall
		ids   []string
	}
	var acks map[ackArgs]*ackGroup // keyed by stream and group, id empty
	var order []*ackGroup
	idx := make([]int, len(batch)) // command index of each plain call
	for i, bc := range batch {
		if !bc.isAck {
			idx[i] = len(cmds)
			cmds = append(cmds, bc.cmd)
			continue
		}
		k := ackArgs{stream: bc.ack.stream, group: bc.ack.group}
		if acks == nil {
			acks = map[ackArgs]*ackGroup{}
		}
		g := acks[k]
		if g == nil {
			g = &ackGroup{}
			acks[k] = g
			order = append(order, g)
		}
		g.calls = append(g.calls, bc)
		g.ids = append(g.ids, bc.ack.id)
	}
	for _, g := range order {
		a := &g.calls[0].ack
		g.idx = len(cmds)
		cmds = append(cmds, c.B().Xack().Key(a.stream).Group(a.group).Id(g.ids...).Build())
	}
	// The batch carries other handlers' commands: it must not fail with the
	// leader's cancellation.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
	defer cancel()
	res := c.DoMulti(ctx, cmds...)
	for i, bc := range batch {
		if !bc.isAck {
			bc.res = res[idx[i]]
		}
	}
	for _, g := range order {
		err := res[g.idx].Error()
		for _, bc := range g.calls {
			bc.err = err
		}
	}
}
