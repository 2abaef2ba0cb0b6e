package intake

import (
	"context"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap"

	"github.com/pyrula/caseworker/flow"
	jresolve "github.com/pyrula/caseworker/journal/resolve"
	"github.com/pyrula/caseworker/llm"
	lresolve "github.com/pyrula/caseworker/llm/resolve"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/memstore"
	"github.com/pyrula/caseworker/worker/internal/batch"
)

// newTestIntake returns an intake over client c with the targets of reg, a
// memory fixture store and no model keys, as the worker wires it; cfg's
// durations and limits left at zero get the worker's defaults.
func newTestIntake(tb testing.TB, c valkey.Client, reg *flow.Registry, cfg Config) *Intake {
	tb.Helper()
	if cfg.IdempotencyTTL == 0 {
		cfg.IdempotencyTTL = 24 * time.Hour
	}
	if cfg.ClaimIdle == 0 {
		cfg.ClaimIdle = 30 * time.Second
	}
	cfg.Concurrency, cfg.SaveConcurrency, cfg.MaxDeliveries = max(cfg.Concurrency, 4), max(cfg.SaveConcurrency, 1), max(cfg.MaxDeliveries, 5)
	cfg.ReadBlock = max(cfg.ReadBlock, 50*time.Millisecond)
	j, err := jresolve.Open(context.Background(), jresolve.Config{Client: c, Namespace: cfg.Namespace})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = j.Close() })
	fixtures := memstore.New(memstore.Options{})
	noEnv := func(string) string { return "" }
	models := func(name string) (flow.ModelClient, error) {
		if name == "" {
			return nil, nil
		}
		m, err := lresolve.Open(name, reg, noEnv, llm.Policy{})
		if err != nil {
			return nil, messages.Errorf(messages.InvalidOverrides, "%v", err)
		}
		return m, nil
	}
	in, err := New(cfg, Deps{
		Client: c, Batch: batch.New(batch.Config{Timeout: 10 * time.Second}, batch.Deps{Client: c}),
		Logger: zap.NewNop(), Journal: j, Registry: reg,
		LLMRef: func(own string) string { return own },
		Models: models,
		CaseModels: func(name string, replayOnly bool) (flow.ModelClient, error) {
			if name == "" || !replayOnly {
				return models(name)
			}
			if err := lresolve.Check(name, reg); err != nil {
				return nil, messages.Errorf(messages.InvalidOverrides, "%v", err)
			}
			return nil, nil
		},
		FixtureStore: func(expected string) (store.Store, error) {
			if err := store.CheckBinding(fixtures, expected); err != nil {
				return nil, err
			}
			return fixtures, nil
		},
		Go:     func(fn func()) { go fn() },
		Report: nopReport(),
	})
	if err != nil {
		tb.Fatal(err)
	}
	return in
}

// nopReport is a Report whose callbacks do nothing.
func nopReport() Report {
	return Report{
		StreamFailed:    func(_ context.Context, err error) error { return err },
		Read:            func([]valkey.XRangeEntry) {},
		Healthy:         func() {},
		Received:        func(string) {},
		HandlingStarted: func() {}, HandlingEnded: func() {},
		Answered:     func(string, messages.ReplyStatus, time.Duration) {},
		Duplicate:    func() {},
		Transient:    func(string) {},
		Redelivered:  func() {},
		DeadLettered: func(string, messages.ReplyStatus) {},
	}
}
