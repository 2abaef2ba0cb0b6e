package flow_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/flowtest"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/runevent"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is the fake clocks' start.
var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// env is one runtime with in-memory everything.
type env struct {
	reg   *flow.Registry
	log   *host.MemLog
	inbox *host.MemInbox
	clock *flowtest.Clock
	rt    *host.Runtime
	rand  atomic.Int64
}

type envOption func(*env, *host.Config)

// withClock uses a manual clock (waits until advanced) instead of an auto one.
func withManualClock() envOption {
	return func(e *env, c *host.Config) {
		e.clock = flowtest.NewClock(t0)
		c.Clock = e.clock
	}
}

func withResolver(r host.Resolver) envOption {
	return func(e *env, c *host.Config) { c.Resolver = r }
}

func setup(t *testing.T, opts ...envOption) *env {
	t.Helper()
	e := &env{reg: flow.NewRegistry(), log: host.NewMemLog(), inbox: host.NewMemInbox(), clock: flowtest.NewAutoClock(t0)}
	cfg := host.Config{
		Registry: e.reg, Log: e.log, Signals: e.inbox, Interrupts: e.inbox, Streams: e.inbox, Clock: e.clock,
		// Deterministic live randomness: 0.125, 0.25, 0.375, …
		Random: func() float64 { return float64(e.rand.Add(1)%8) / 8 },
	}
	for _, o := range opts {
		o(e, &cfg)
	}
	cfg.Clock = e.clock
	rt, err := host.NewRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.rt = rt
	return e
}

func (e *env) run(t *testing.T, runID, target string) host.Outcome {
	t.Helper()
	out, err := e.rt.Run(context.Background(), host.RunParams{RunID: runID, Target: target})
	if err != nil {
		t.Fatalf("run %s: %v", runID, err)
	}
	return out
}

func mustRegister(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func trace(e *env, runID string) []string { return flowtest.Trace(e.log.Events(runID)) }

func checkTrace(t *testing.T, e *env, runID string, want []string) {
	t.Helper()
	got := trace(e, runID)
	if !slices.Equal(got, want) {
		t.Fatalf("events of %s:\n got %q\nwant %q", runID, got, want)
	}
}

// checkFingerprints checks every call:start of the log: the fingerprint is
// the SHA-256 of the canonical input, and call:done repeats the call.
func checkFingerprints(t *testing.T, log *host.MemLog) {
	t.Helper()
	for _, id := range log.RunIDs() {
		starts := map[string]host.CallRef{}
		for _, ev := range log.Events(id) {
			switch ev.Kind {
			case runevent.CallStart:
				sum := sha256.Sum256(ev.Input)
				if got := hex.EncodeToString(sum[:]); got != ev.Call.Fingerprint {
					t.Errorf("%s %s: fingerprint %s, sha256(input) %s", id, ev.Call.ID(), ev.Call.Fingerprint, got)
				}
				starts[ev.Call.ID()] = *ev.Call
			case runevent.CallDone:
				if starts[ev.Call.ID()] != *ev.Call {
					t.Errorf("%s: call:done %+v does not repeat call:start %+v", id, *ev.Call, starts[ev.Call.ID()])
				}
			}
		}
	}
}

// result returns the recorded result record of kind:key.
func result(t *testing.T, log *host.MemLog, runID, id string) json.RawMessage {
	t.Helper()
	for _, r := range log.Results(runID) {
		if r.Kind+":"+r.Key == id {
			if r.Error != nil {
				return r.Error
			}
			return r.Result
		}
	}
	t.Fatalf("%s: no result %s", runID, id)
	return nil
}

// crashAt is a resolver that, when asked about the call id, cancels the run
// (as a crash would) and fails; otherwise it runs calls live.
func crashAt(id string, cancel context.CancelFunc) host.Resolver {
	return host.ResolverFunc(func(ctx context.Context, c host.Call) (host.Resolution, error) {
		if c.ID() == id {
			cancel()
			return host.Resolution{}, ctx.Err()
		}
		return host.Live(), nil
	})
}
