package valkeyjournal_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines, but for valkey-go's own delayed
// retry of a closed client's connection, which sleeps out its backoff, and
// its cluster client's delayed close (5 s) of connections a slot map
// refresh replaced.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*call).DelayDo.func1"),
		goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient)._refresh.func2"))
}
