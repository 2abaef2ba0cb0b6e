package batch_test

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/valkey-io/valkey-go"
	"go.uber.org/goleak"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/worker/internal/batch"
)

// countingDoMulti counts the DoMulti calls (batches) made through it.
type countingDoMulti struct {
	valkey.Client
	mu      sync.Mutex
	batches int
	cmds    int
}

func (c *countingDoMulti) DoMulti(ctx context.Context, cmds ...valkey.Completed) []valkey.ValkeyResult {
	c.mu.Lock()
	c.batches++
	c.cmds += len(cmds)
	c.mu.Unlock()
	return c.Client.DoMulti(ctx, cmds...)
}

// freshNamespace returns a client and a fresh key prefix whose keys the
// test's end deletes.
func freshNamespace(t *testing.T, name string) (valkey.Client, string) {
	t.Helper()
	c := testenv.ValkeyClient(t)
	ns := testenv.UniqueName(t, name)
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := c.Do(ctx, c.B().Keys().Pattern(ns+":*").Build()).AsStrSlice()
		for _, k := range keys {
			c.Do(ctx, c.B().Del().Key(k).Build())
		}
	})
	return c, ns
}

// newStream creates stream <ns>:s with group "g" and returns its key.
func newStream(t *testing.T, c valkey.Client, ns string) string {
	t.Helper()
	stream := ns + ":s"
	if err := c.Do(context.Background(), c.B().XgroupCreate().Key(stream).Group("g").Id("0").Mkstream().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	return stream
}

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*call).DelayDo.func1"))
}

// TestBatcher: many goroutines each run a sequence of dependent commands
// (INCR of their own key, then GET, then XADD and an XACK) through one
// Batcher: every caller gets its own results, the acks of one stream are
// merged, and the commands travel in fewer round trips than commands.
func TestBatcher(t *testing.T) {
	t.Parallel()
	raw, ns := freshNamespace(t, "batch")
	c := &countingDoMulti{Client: raw}
	stream := newStream(t, raw, ns)
	ctx := context.Background()
	const callers, rounds = 32, 20
	b := batch.New(batch.Config{}, batch.Deps{Client: c})
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			key := ns + ":k" + strconv.Itoa(g)
			for r := 1; r <= rounds; r++ {
				n, err := b.Do(ctx, c.B().Incr().Key(key).Build()).AsInt64()
				if err != nil || n != int64(r) {
					t.Errorf("caller %d: INCR = %d, %v; want %d", g, n, err, r)
					return
				}
				s, err := b.Do(ctx, c.B().Get().Key(key).Build()).ToString()
				if err != nil || s != strconv.Itoa(r) {
					t.Errorf("caller %d: GET = %q, %v; want %d", g, s, err, r)
					return
				}
				if err := b.Do(ctx, c.B().Xadd().Key(stream).Id("*").FieldValue().FieldValue("g", key).Build()).Error(); err != nil {
					t.Errorf("caller %d: XADD: %v", g, err)
					return
				}
				res, err := b.Do(ctx, c.B().Xreadgroup().Group("g", "c"+strconv.Itoa(g)).Count(1).Streams().Key(stream).Id(">").Build()).AsXRead()
				if err != nil || len(res[stream]) != 1 {
					t.Errorf("caller %d: XREADGROUP = %v, %v", g, res, err)
					return
				}
				if err := b.Ack(ctx, stream, "g", res[stream][0].ID); err != nil {
					t.Errorf("caller %d: ack: %v", g, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	pending, err := raw.Do(ctx, raw.B().Xpending().Key(stream).Group("g").Build()).ToArray()
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := pending[0].AsInt64(); n != 0 {
		t.Errorf("%d entries still pending after every ack", n)
	}
	total := callers * rounds * 5
	t.Logf("%d calls in %d batches of %d commands", total, c.batches, c.cmds)
	if c.cmds > total {
		t.Errorf("%d commands for %d calls: acks were not merged", c.cmds, total)
	}
	if c.batches >= total {
		t.Errorf("%d batches for %d calls: nothing was batched", c.batches, total)
	}
}

// TestBatcherLoneCommand: a command with nothing else queued goes out at
// once, alone, and an error reply reaches its caller only.
func TestBatcherLoneCommand(t *testing.T) {
	t.Parallel()
	c := testenv.ValkeyClient(t)
	ctx := context.Background()
	b := batch.New(batch.Config{}, batch.Deps{Client: c})
	key := testenv.UniqueName(t, "batch-lone")
	t.Cleanup(func() { c.Do(ctx, c.B().Del().Key(key).Build()) })
	if err := b.Do(ctx, c.B().Set().Key(key).Value("x").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	// XADD to a string key: WRONGTYPE.
	if err := b.Do(ctx, c.B().Xadd().Key(key).Id("*").FieldValue().FieldValue("f", "v").Build()).Error(); err == nil {
		t.Fatal("XADD to a string key succeeded")
	}
	if err := b.Ack(ctx, key, "g", "1-1"); err == nil {
		t.Fatal("XACK on a string key succeeded")
	}
	if s, err := b.Do(ctx, c.B().Get().Key(key).Build()).ToString(); err != nil || s != "x" {
		t.Fatalf("GET = %q, %v", s, err)
	}
}
