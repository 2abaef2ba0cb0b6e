package valkeyjournal_test

import (
	"context"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/journaltest"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
)

// newClient connects to the test Valkey and closes the client when t ends.
func newClient(t testing.TB) valkey.Client {
	t.Helper()
	return testenv.ValkeyClient(t)
}

// cleanup deletes every key of namespace ns when t ends, on every node of
// a cluster.
func cleanup(t testing.TB, c valkey.Client, ns string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := testenv.DeleteNamespace(ctx, c, ns); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
}

// newHarness returns a Valkey journal in a namespace of its own, on the
// test Valkey.
func newHarness(opts valkeyjournal.Options) func(t *testing.T) *journaltest.Harness {
	return newHarnessOn(newClient, opts)
}

// newHarnessOn is newHarness on the server connect connects to (the test
// Valkey, or the test Valkey Cluster).
func newHarnessOn(connect func(testing.TB) valkey.Client, opts valkeyjournal.Options) func(t *testing.T) *journaltest.Harness {
	return func(t *testing.T) *journaltest.Harness {
		c := connect(t)
		o := opts
		o.Namespace = testenv.UniqueName(t, "jt")
		cleanup(t, c, o.Namespace)
		if o.Archive != nil {
			o.Archive = archiveFor(t, o.Namespace)
		}
		j, err := valkeyjournal.New(c, o)
		if err != nil {
			t.Fatal(err)
		}
		return &journaltest.Harness{
			Journal:      j,
			CompletedTTL: cmpOr(o.CompletedTTL, journal.DefaultCompletedTTL),
			Archived:     o.Archive != nil,
			Expire:       func(t *testing.T, runID string) { expire(t, c, o.Namespace, runID) },
			KeyTTLs:      func(t *testing.T, runID string) []time.Duration { return keyTTLs(t, c, o.Namespace, runID) },
		}
	}
}

func cmpOr(a, b time.Duration) time.Duration {
	if a != 0 {
		return a
	}
	return b
}

// expire deletes a run's keys, as the end of their TTL would.
func expire(t *testing.T, c valkey.Client, ns, runID string) {
	t.Helper()
	m, e, r := valkeyjournal.Keys(ns, runID)
	if err := c.Do(context.Background(), c.B().Del().Key(m, e, r).Build()).Error(); err != nil {
		t.Fatalf("DEL keys of %s: %v", runID, err)
	}
}

// keyTTLs reads the PTTL of each existing key of the run.
func keyTTLs(t *testing.T, c valkey.Client, ns, runID string) []time.Duration {
	t.Helper()
	m, e, r := valkeyjournal.Keys(ns, runID)
	var out []time.Duration
	for _, k := range []string{m, e, r} {
		ms, err := c.Do(context.Background(), c.B().Pttl().Key(k).Build()).AsInt64()
		if err != nil {
			t.Fatalf("PTTL %s: %v", k, err)
		}
		if ms == -2 { // no such key
			continue
		}
		if ms < 0 {
			out = append(out, -1)
		} else {
			out = append(out, time.Duration(ms)*time.Millisecond)
		}
	}
	return out
}

func TestConformance(t *testing.T) {
	journaltest.Run(t, newHarness(valkeyjournal.Options{}))
}

func TestConformanceShortTTL(t *testing.T) {
	journaltest.Run(t, newHarness(valkeyjournal.Options{CompletedTTL: 90 * time.Second}))
}

// TestConformanceCluster runs the suite on a Valkey Cluster: every script
// and every read transaction of a run touches only that run's keys, which
// share the hash tag {run_id} and so one slot; a command over two slots
// would be refused.
func TestConformanceCluster(t *testing.T) {
	journaltest.Run(t, newHarnessOn(testenv.ValkeyClusterClient, valkeyjournal.Options{}))
}
