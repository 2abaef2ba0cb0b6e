package testenv

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"
)

// ValkeyClient connects to the test Valkey (ValkeyURL), without client-side
// caching, and closes the client when t ends.
func ValkeyClient(t testing.TB) valkey.Client {
	t.Helper()
	return ValkeyClientAt(t, ValkeyURL(t), "")
}

// ValkeyClusterClient connects to the test Valkey Cluster
// (ValkeyClusterURL), without client-side caching, and closes the client
// when t ends. It fails t when the server is not a cluster, so that a test
// meant for one cannot pass on a single server.
func ValkeyClusterClient(t testing.TB) valkey.Client {
	t.Helper()
	c := ValkeyClientAt(t, ValkeyClusterURL(t), "")
	if m := c.Mode(); m != valkey.ClientModeCluster {
		t.Fatalf("%s names a Valkey in %s mode, not a cluster", EnvValkeyClusterURL, m)
	}
	return c
}

// ValkeyClientAt connects to the Valkey at url (a test's own server,
// ValkeyURL or ValkeyClusterURL), without client-side caching. When t ends
// it deletes the keys of namespace ns (DeleteNamespace; none when ns is
// empty) and closes the client.
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
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := DeleteNamespace(ctx, c, ns); err != nil {
				t.Logf("testenv: %v", err) // best effort: the keys are the test's own
			}
		}
		c.Close()
	})
	return c
}

// ScanKeys returns the keys matching pattern (a SCAN MATCH pattern), sorted,
// each once. On a cluster SCAN sees only the node it is sent to, so every
// node of c is scanned.
func ScanKeys(ctx context.Context, c valkey.Client, pattern string) ([]string, error) {
	seen := map[string]bool{}
	for addr, node := range c.Nodes() {
		var cursor uint64
		for {
			se, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
			if err != nil {
				return nil, fmt.Errorf("SCAN %s on %s: %w", pattern, addr, err)
			}
			for _, k := range se.Elements {
				seen[k] = true
			}
			if cursor = se.Cursor; cursor == 0 {
				break
			}
		}
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys, nil
}

// DeleteNamespace deletes every key starting "ns:" (found with ScanKeys, so
// on every node of a cluster). The keys are deleted one DEL each, through c,
// which sends each to the node that holds it.
func DeleteNamespace(ctx context.Context, c valkey.Client, ns string) error {
	keys, err := ScanKeys(ctx, c, ns+":*")
	if err != nil {
		return fmt.Errorf("delete namespace %s: %w", ns, err)
	}
	var errs []error
	for len(keys) > 0 {
		n := min(len(keys), 500)
		cmds := make(valkey.Commands, n)
		for i, k := range keys[:n] {
			cmds[i] = c.B().Del().Key(k).Build()
		}
		for i, r := range c.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				errs = append(errs, fmt.Errorf("DEL %s: %w", keys[i], err))
			}
		}
		keys = keys[n:]
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("delete namespace %s: %w", ns, err)
	}
	return nil
}

// ServerCPU is the Valkey server's user and system CPU time so far (INFO
// cpu), 0 when it cannot be read: a benchmark reports the server's CPU per
// operation from two readings (the server's, so on a Valkey nothing else
// uses).
func ServerCPU(c valkey.Client) time.Duration {
	info, err := c.Do(context.Background(), c.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		return 0
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}
