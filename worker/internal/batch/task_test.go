package batch_test

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/worker/internal/batch"
)

// TestTasks: handlers run as tasks of the test's goroutine, each a sequence
// of dependent commands (INCR of its own key, GET, XADD, XREADGROUP, then
// an XACK) through the Batcher. Round sends every task's command in one
// DoMulti, with an extra command after them, and each task gets its own
// results; one task detaches half way and ends on a goroutine of its own,
// its commands in the Batcher's batches. The rounds go on the RoundClient,
// the batches on the Client.
func TestTasks(t *testing.T) {
	t.Parallel()
	raw, ns := freshNamespace(t, "tasks")
	c := &countingDoMulti{Client: raw}
	rc := &countingDoMulti{Client: testenv.ValkeyClient(t)}
	stream := newStream(t, raw, ns)
	ctx := context.Background()
	b := batch.New(batch.Config{}, batch.Deps{Client: c, RoundClient: rc})
	p := batch.NewTasks(4)
	defer p.Close()
	const tasks, detaching = 16, 5
	steps := make([]int, tasks) // the commands each task got the right result of
	handler := func(i int) func(ctx context.Context) {
		return func(ctx context.Context) {
			key := ns + ":k" + strconv.Itoa(i)
			if n, err := b.Do(ctx, c.B().Incr().Key(key).Build()).AsInt64(); err != nil || n != 1 {
				t.Errorf("task %d: INCR = %d, %v", i, n, err)
				return
			}
			steps[i]++
			if i == detaching {
				batch.Detach(ctx)
			}
			if s, err := b.Do(ctx, c.B().Get().Key(key).Build()).ToString(); err != nil || s != "1" {
				t.Errorf("task %d: GET = %q, %v", i, s, err)
				return
			}
			steps[i]++
			if err := b.Do(ctx, c.B().Xadd().Key(stream).Id("*").FieldValue().FieldValue("k", key).Build()).Error(); err != nil {
				t.Errorf("task %d: XADD: %v", i, err)
				return
			}
			steps[i]++
			res, err := b.Do(ctx, c.B().Xreadgroup().Group("g", "c"+strconv.Itoa(i)).Count(1).Streams().Key(stream).Id(">").Build()).AsXRead()
			if err != nil || len(res[stream]) != 1 {
				t.Errorf("task %d: XREADGROUP = %v, %v", i, res, err)
				return
			}
			steps[i]++
			if err := b.Ack(ctx, stream, "g", res[stream][0].ID); err != nil {
				t.Errorf("task %d: ack: %v", i, err)
				return
			}
			steps[i]++
		}
	}
	var live []*batch.Task
	for i := range tasks {
		task := p.Start(ctx, handler(i))
		if !task.Pending() || task.Done() || task.Detached() {
			t.Fatalf("task %d after Start: pending %v, done %v, detached %v; want it waiting for its INCR",
				i, task.Pending(), task.Done(), task.Detached())
		}
		live = append(live, task)
	}
	var wg sync.WaitGroup
	rounds := 0
	for len(live) > 0 {
		rounds++
		extra := b.Round(ctx, live, c.B().Incr().Key(ns+":rounds").Build())
		if n, err := extra[0].AsInt64(); err != nil || n != int64(rounds) {
			t.Fatalf("round %d: the extra INCR = %d, %v", rounds, n, err)
		}
		next := live[:0]
		for _, task := range live {
			switch {
			case task.Pending():
				next = append(next, task)
			case task.Detached():
				wg.Go(task.Resume)
			case !task.Done():
				t.Fatal("a task neither waits, detached nor ended")
			}
		}
		live = next
	}
	wg.Wait()
	for i, n := range steps {
		if n != 5 {
			t.Errorf("task %d: %d of its 5 commands got their result", i, n)
		}
	}
	if rounds != 5 {
		t.Errorf("%d rounds, want 5 (one per command of a task)", rounds)
	}
	// Five rounds of 15–16 tasks' commands and the extra one on the
	// RoundClient; the detached task's four commands in batches of their
	// own on the Client.
	if rc.batches != rounds || c.batches != 4 {
		t.Errorf("%d DoMulti calls on the RoundClient, %d on the Client; want the %d rounds' and the detached task's 4",
			rc.batches, c.batches, rounds)
	}
	// Every INCR, the other tasks' GET, XADD and XREADGROUP, their acks as
	// one XACK, and the extra INCRs in the rounds; the detached task's last
	// four in its batches.
	if want := 16 + 15*3 + 1 + rounds; rc.cmds != want || c.cmds != 4 {
		t.Errorf("%d commands sent in rounds, %d in batches; want %d (the 15 tasks' acks merged into one) and 4", rc.cmds, c.cmds, want)
	}
	pending, err := raw.Do(ctx, raw.B().Xpending().Key(stream).Group("g").Build()).ToArray()
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := pending[0].AsInt64(); n != 0 {
		t.Errorf("%d entries still pending after every ack", n)
	}
}

// TestTaskWithoutCommands: a handler that sends nothing ends in Start; one
// that detaches at once waits for Resume; Detach outside a task does
// nothing, and a Round of no commands sends nothing.
func TestTaskWithoutCommands(t *testing.T) {
	t.Parallel()
	c := &countingDoMulti{Client: testenv.ValkeyClient(t)}
	b := batch.New(batch.Config{}, batch.Deps{Client: c})
	p := batch.NewTasks(1)
	defer p.Close()
	ctx := context.Background()
	ran := false
	if task := p.Start(ctx, func(context.Context) { ran = true }); !task.Done() || task.Pending() || task.Detached() || !ran {
		t.Fatalf("a handler without commands: done %v, pending %v, detached %v, ran %v", task.Done(), task.Pending(), task.Detached(), ran)
	}
	after := false
	task := p.Start(ctx, func(ctx context.Context) {
		batch.Detach(ctx)
		batch.Detach(ctx) // detached already: goes on
		after = b.Do(ctx, c.B().Ping().Build()).Error() == nil
	})
	if !task.Detached() || task.Done() || after {
		t.Fatalf("a detached task: detached %v, done %v, went on %v", task.Detached(), task.Done(), after)
	}
	task.Resume()
	if !task.Done() || !after {
		t.Fatalf("a resumed task: done %v, its PING answered %v", task.Done(), after)
	}
	batch.Detach(ctx) // outside a task
	if res := b.Round(ctx, []*batch.Task{task}); res != nil || c.batches != 1 {
		t.Fatalf("a Round of nothing: %v, %d DoMulti calls (want the PING's 1)", res, c.batches)
	}
}
