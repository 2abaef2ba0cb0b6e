package runexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/worker/internal/replicas"
)

// TestOutage: the failures a failover or a lost connection gives a run
// (taken from real servers where one can give them) are Valkey's and not
// counted toward its dead letter; the run's own failures, an HTTP call's
// and a context's deadline are.
func TestOutage(t *testing.T) {
	ctx := context.Background()
	c := testenv.ValkeyClient(t)
	key := testenv.UniqueName(t, "outage")
	t.Cleanup(func() { c.Do(context.Background(), c.B().Del().Key(key).Build()) })

	// WAIT on a server without replicas: 0 of 1 acknowledged.
	_, notAcked := replicas.Waiter{Client: c, N: 1, Timeout: 10 * time.Millisecond}.Do(ctx, c.B().Set().Key(key).Value("x").Build())
	_, refused := net.Dial("tcp", "127.0.0.1:1")
	wrongType := c.Do(ctx, c.B().Incr().Key(key).Build()).Error() // the value is not an integer
	_, httpRefused := http.Get("http://127.0.0.1:1/v1/messages")
	deadline, cancel := context.WithTimeout(ctx, time.Nanosecond)
	defer cancel()
	<-deadline.Done()

	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"replicas not acknowledging", fmt.Errorf("submit child: run r's creation on the replicas: %w", notAcked), true},
		{"a lost connection (EOF)", fmt.Errorf("submit child r: valkeyjournal: create r: %w", io.EOF), true},
		{"a refused connection", fmt.Errorf("read the run: %w", refused), true},
		{"a write lost to a failover", fmt.Errorf("confirm: %w", replicas.ErrLost), true},
		{"the client closing", valkey.ErrClosing, true},
		{"a Valkey error of the command", fmt.Errorf("count: %w", wrongType), false},
		{"an HTTP call's refused connection", fmt.Errorf("model call: %w", httpRefused), false},
		{"a context's deadline", fmt.Errorf("execute: %w", deadline.Err()), false},
		{"the run's own failure", errors.New("submit child: the target refused the inputs"), false},
		{"none", nil, false},
	} {
		if tc.err == nil && tc.name != "none" {
			t.Fatalf("%s: the server gave no error", tc.name)
		}
		if got := outage(tc.err); got != tc.want {
			t.Errorf("%s (%v): outage %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// TestOutageMoved: a node of the Valkey Cluster asked for a key of a slot
// it does not hold answers MOVED, Valkey's (a failover moves slots).
func TestOutageMoved(t *testing.T) {
	opt, err := valkey.ParseURL(testenv.ValkeyClusterURL(t))
	if err != nil {
		t.Fatal(err)
	}
	node, err := valkey.NewClient(valkey.ClientOption{InitAddress: opt.InitAddress[:1], ForceSingleClient: true, DisableCache: true,
		Username: opt.Username, Password: opt.Password, TLSConfig: opt.TLSConfig})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	for i := range 100 {
		err := node.Do(context.Background(), node.B().Get().Key("outage-moved-"+strconv.Itoa(i)).Build()).Error()
		if ve, ok := valkey.IsValkeyErr(err); ok {
			if _, moved := ve.IsMoved(); moved {
				if !outage(fmt.Errorf("submit child: %w", err)) {
					t.Errorf("outage(%v) = false, want true", err)
				}
				return
			}
		}
	}
	t.Fatal("no key of 100 was on another node: is it a cluster of one?")
}
