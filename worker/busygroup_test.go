package worker_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap/zaptest"

	"github.com/pyrula/caseworker/worker"
)

// notBusyGroupClient answers XGROUP CREATE with a server error of code ERR
// whose text mentions BUSYGROUP (produced by the real server, through
// EVAL), instead of creating the group.
type notBusyGroupClient struct{ valkey.Client }

func (c notBusyGroupClient) Do(ctx context.Context, cmd valkey.Completed) valkey.ValkeyResult {
	if args := cmd.Commands(); len(args) >= 2 && strings.EqualFold(args[0], "XGROUP") && strings.EqualFold(args[1], "CREATE") {
		return c.Client.Do(ctx, c.Client.B().Eval().
			Script("return redis.error_reply('ERR not created: this is no BUSYGROUP error')").Numkeys(0).Build())
	}
	return c.Client.Do(ctx, cmd)
}

// Start keeps an existing consumer group when the server answers BUSYGROUP
// (by its error code), but an error that merely mentions BUSYGROUP in its
// text stops Start.
func TestBusyGroupByErrorCode(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, nil)
	start := func(c valkey.Client, consumer string) error {
		cfg := e.cfg
		cfg.ConsumerName = consumer
		w, err := worker.New(cfg, worker.Params{Client: c, Registry: e.reg, Registerer: prometheus.NewRegistry(), Logger: zaptest.NewLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		err = w.Start(context.Background())
		t.Cleanup(func() { w.Stop(context.Background()) })
		return err
	}
	// Both groups exist (the env's worker created them): BUSYGROUP.
	if err := start(e.client, "c2"); err != nil {
		t.Fatalf("Start with existing groups: %v", err)
	}
	err := start(notBusyGroupClient{e.client}, "c3")
	if err == nil || !strings.Contains(err.Error(), "create consumer group") || !strings.Contains(err.Error(), "no BUSYGROUP error") {
		t.Fatalf("Start: %v, want the group creation error", err)
	}
}
