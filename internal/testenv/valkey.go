package testenv

import (
	"testing"

	"github.com/valkey-io/valkey-go"
)

// ValkeyClient connects to the test Valkey (ValkeyURL), without client-side
// caching, and closes the client when t ends.
func ValkeyClient(t testing.TB) valkey.Client {
	t.Helper()
	opt, err := valkey.ParseURL(ValkeyURL(t))
	if err != nil {
		t.Fatalf("parse %s: %v", EnvValkeyURL, err)
	}
	opt.DisableCache = true
	c, err := valkey.NewClient(opt)
	if err != nil {
		t.Fatalf("connect to Valkey: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}
