package memvalkey_test

import (
	"context"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"
	"go.uber.org/goleak"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/internal/testwait"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/journaltest"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
	"github.com/pyrula/caseworker/memvalkey"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start starts a server and a client for one test.
func start(t *testing.T) (*memvalkey.Server, valkey.Client) {
	t.Helper()
	s, err := memvalkey.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c, err := s.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return s, c
}

// TestJournalConformance runs the journal conformance suite on
// valkeyjournal, Lua scripts and all, against the embedded server: the
// journal of `worker demo` behaves as it does on Valkey.
func TestJournalConformance(t *testing.T) {
	journaltest.Run(t, func(t *testing.T) *journaltest.Harness {
		_, c := start(t)
		ns := testenv.UniqueName(t, "jt")
		j, err := valkeyjournal.New(c, valkeyjournal.Options{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		return &journaltest.Harness{
			Journal:      j,
			CompletedTTL: journal.DefaultCompletedTTL,
			Expire: func(t *testing.T, runID string) {
				m, e, r := valkeyjournal.Keys(ns, runID)
				if err := c.Do(context.Background(), c.B().Del().Key(m, e, r).Build()).Error(); err != nil {
					t.Fatal(err)
				}
			},
			KeyTTLs: func(t *testing.T, runID string) []time.Duration {
				m, e, r := valkeyjournal.Keys(ns, runID)
				var out []time.Duration
				for _, k := range []string{m, e, r} {
					ms, err := c.Do(context.Background(), c.B().Pttl().Key(k).Build()).AsInt64()
					if err != nil {
						t.Fatal(err)
					}
					switch {
					case ms == -2:
					case ms < 0:
						out = append(out, -1)
					default:
						out = append(out, time.Duration(ms)*time.Millisecond)
					}
				}
				return out
			},
		}
	})
}

// TestExpiry: TTLs run on the wall clock, and FastForward ages keys at once.
func TestExpiry(t *testing.T) {
	t.Parallel()
	s, c := start(t)
	ctx := context.Background()
	if err := c.Do(ctx, c.B().Set().Key("short").Value("x").Px(50*time.Millisecond).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, c.B().Set().Key("long").Value("x").Px(24*time.Hour).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 5*time.Second, "the 50 ms key expired", func() bool {
		n, err := c.Do(ctx, c.B().Exists().Key("short").Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	s.FastForward(24*time.Hour + time.Second)
	if n, err := c.Do(ctx, c.B().Exists().Key("long").Build()).AsInt64(); err != nil || n != 0 {
		t.Fatalf("EXISTS long after FastForward = %d, %v; want 0", n, err)
	}
}

// TestURL: the URL is a loopback redis:// URL that valkey-go accepts.
func TestURL(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	opt, err := valkey.ParseURL(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	if len(opt.InitAddress) != 1 || opt.InitAddress[0] != s.Addr() {
		t.Fatalf("URL %s parses to %v, want %s", s.URL(), opt.InitAddress, s.Addr())
	}
	opt.DisableCache = true
	c, err := valkey.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Do(context.Background(), c.B().Ping().Build()).Error(); err != nil {
		t.Fatal(err)
	}
}
