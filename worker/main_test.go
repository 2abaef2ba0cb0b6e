package worker_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: every
// worker a test starts is stopped, every client closed. Two goroutines of
// valkey-go end on their own after their client closed: the delayed retry
// of a closed client's connection, and the cluster client's delayed close
// (5 s) of connections a slot map refresh replaced.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*call).DelayDo.func1"),
		goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient)._refresh.func2"))
}
