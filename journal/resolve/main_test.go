package resolve_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that Close leaves nothing running (the archive's pool,
// the client Open connected), but for valkey-go's own delayed retry of a
// closed client's connection, which sleeps out its backoff.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*call).DelayDo.func1"))
}
