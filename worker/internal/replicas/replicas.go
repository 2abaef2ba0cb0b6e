// Package replicas makes a write of the worker wait for the replicas of
// the node that holds it (PYRULA_WAIT_REPLICAS), so that a failover of that
// node to one of its replicas cannot lose it once the worker has acted on
// it (replied, acked). WAIT covers only the writes of the connection that
// sends it, so every wait here goes over a dedicated connection bound to
// the written key's slot: either the write itself is sent there (Do), or,
// for a write another part of the worker made (a journal script), the
// write is first read back there and then followed by a small write of
// the same slot (Confirm), whose replication covers every write made
// before it on that node. Reading it back first is what catches a write
// lost to a failover between the write and the wait: the new master does
// not have it, and the caller fails transiently instead of acting on it.
//
// It imports only valkey-go and the standard library.
package replicas

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/valkey-io/valkey-go"
)

// ErrLost is returned by Confirm when the write is not on the node that
// now holds its slot: lost to a failover before its replicas had it.
var ErrLost = errors.New("the write is not on the node that holds it (lost to a failover?)")

// Waiter waits for N replicas, each WAIT blocking up to Timeout. Its zero
// value (N 0) waits for none: Do sends its command as the client would,
// and Confirm does nothing.
type Waiter struct {
	Client  valkey.Client
	N       int
	Timeout time.Duration
}

// On reports whether w waits for replicas.
func (w Waiter) On() bool { return w.N > 0 }

// Do sends cmd and, when w is on, waits for the replicas of its node on the
// same connection. A WAIT answered by fewer replicas is an error: the
// write may still be lost, so the caller must not act on it yet.
func (w Waiter) Do(ctx context.Context, cmd valkey.Completed) (valkey.ValkeyMessage, error) {
	if !w.On() {
		return w.Client.Do(ctx, cmd).ToMessage()
	}
	var msg valkey.ValkeyMessage
	err := w.Client.Dedicated(func(c valkey.DedicatedClient) error {
		var err error
		if msg, err = c.Do(ctx, cmd).ToMessage(); err != nil {
			return err
		}
		return w.wait(ctx, c)
	})
	return msg, err
}

// DoMulti sends cmds (writes of one slot) and, when w is on, waits for the
// replicas of their node on the same connection, as Do.
func (w Waiter) DoMulti(ctx context.Context, cmds ...valkey.Completed) error {
	send := func(do func(...valkey.Completed) []valkey.ValkeyResult) error {
		for _, r := range do(cmds...) {
			if err := r.Error(); err != nil {
				return err
			}
		}
		return nil
	}
	if !w.On() {
		return send(func(cmds ...valkey.Completed) []valkey.ValkeyResult { return w.Client.DoMulti(ctx, cmds...) })
	}
	return w.Client.Dedicated(func(c valkey.DedicatedClient) error {
		if err := send(func(cmds ...valkey.Completed) []valkey.ValkeyResult { return c.DoMulti(ctx, cmds...) }); err != nil {
			return err
		}
		return w.wait(ctx, c)
	})
}

// Confirm makes sure, when w is on, that a write already made through
// another connection is on the replicas of its node: on a dedicated
// connection it sends check (a read of the written key), asks present
// whether its answer shows the write (ErrLost when not), then writes
// barrierKey (a key of the same slot, expiring within a minute) and waits
// for the replicas.
func (w Waiter) Confirm(ctx context.Context, check valkey.Completed, present func(valkey.ValkeyResult) bool, barrierKey string) error {
	if !w.On() {
		return nil
	}
	return w.Client.Dedicated(func(c valkey.DedicatedClient) error {
		res := c.Do(ctx, check)
		if err := res.Error(); err != nil && !valkey.IsValkeyNil(err) {
			return err
		}
		if !present(res) {
			return ErrLost
		}
		if err := c.Do(ctx, c.B().Set().Key(barrierKey).Value("1").Px(time.Minute).Build()).Error(); err != nil {
			return err
		}
		return w.wait(ctx, c)
	})
}

// wait sends WAIT on c: what c wrote, and everything its node had before,
// reaches N replicas within Timeout, or it is an error.
func (w Waiter) wait(ctx context.Context, c valkey.DedicatedClient) error {
	// WAIT's timeout is in milliseconds, and 0 would block for ever.
	timeout := max(w.Timeout.Milliseconds(), 1)
	n, err := c.Do(ctx, c.B().Wait().Numreplicas(int64(w.N)).Timeout(timeout).Build()).AsInt64()
	if err != nil {
		return fmt.Errorf("wait for replicas: %w", err)
	}
	if n < int64(w.N) {
		return fmt.Errorf("wait for replicas: %w", &NotAcknowledged{Got: n, Want: w.N})
	}
	return nil
}

// NotAcknowledged is the error of a WAIT that fewer replicas than needed
// acknowledged within the timeout.
type NotAcknowledged struct {
	Got  int64 // replicas that acknowledged
	Want int   // replicas needed
}

func (e *NotAcknowledged) Error() string {
	return fmt.Sprintf("%d of %d acknowledged", e.Got, e.Want)
}
