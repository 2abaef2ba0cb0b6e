package testenv

import (
	"context"
	"testing"

	"github.com/valkey-io/valkey-go"
)

// ValkeyClient connects to the test Valkey (ValkeyURL), without client-side
// caching, and closes the client when t ends.
func ValkeyClient(t testing.TB) valkey.Client {
	t.Helper()
	return ValkeyClientAt(t, ValkeyURL(t), "")
}

// ValkeyClientAt connects to the Valkey at url (a test's own server, or
// ValkeyURL), without client-side caching. When t ends it deletes the keys
// of namespace ns (every key starting "ns:", found with SCAN; none when ns
// is empty) and closes the client.
func ValkeyClientAt(t testing.TB, url, ns string) valkey.Client {
	t.Helper()
	opt, err := valkey.ParseURL(url)
	if err != nil {
		t.Fatalf("parse the Valkey URL: %v", err)
	}
	opt.DisableCache = true
	c, err := valkey.NewClient(opt)
	if err != nil {
		t.Fatalf("connect to Valkey: %v", err)
	}
	t.Cleanup(func() {
		if ns != "" {
			deleteNamespace(c, ns)
		}
		c.Close()
	})
	return c
}

// deleteNamespace deletes the keys starting "ns:", best effort.
func deleteNamespace(c valkey.Client, ns string) {
	ctx := context.Background()
	var cursor uint64
	for {
		se, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(ns+":*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			return
		}
		for _, k := range se.Elements {
			c.Do(ctx, c.B().Del().Key(k).Build())
		}
		if cursor = se.Cursor; cursor == 0 {
			return
		}
	}
}
