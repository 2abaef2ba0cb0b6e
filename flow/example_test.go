package flow_test

import (
	"context"
	"fmt"
	"time"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/flowtest"
	"github.com/pyrula/caseworker/flow/host"
)

// A workflow with a read step and a durable sleep, run against an in-memory
// log: every call is journaled as call:start (with its input) and call:done
// (with its result record) before the target sees the result.
func Example() {
	reg := flow.NewRegistry()
	type Inputs struct {
		SKU string `json:"sku"`
	}
	quote := flow.DefineStep("quote", flow.Read, func(_ context.Context, sku string) (int, error) { return 1999, nil })
	err := flow.RegisterWorkflow(reg, flow.Workflow[Inputs, int]{
		Name:        "price",
		CodeVersion: "v1",
		Defaults:    Inputs{SKU: "SKU-42"},
		Steps:       []flow.Decl{quote},
		Run: func(ctx context.Context, in Inputs) (int, error) {
			p, err := quote.Call(ctx, in.SKU)
			if err != nil {
				return 0, err
			}
			return p, flow.Sleep(ctx, 300*time.Second)
		},
	})
	if err != nil {
		panic(err)
	}
	log := host.NewMemLog()
	clock := flowtest.NewAutoClock(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	rt, err := host.NewRuntime(host.Config{Registry: reg, Log: log, Clock: clock})
	if err != nil {
		panic(err)
	}
	out, err := rt.Run(context.Background(), host.RunParams{RunID: "run_1", Target: "price"})
	if err != nil {
		panic(err)
	}
	for _, ev := range log.EventsJSON("run_1") {
		fmt.Println(string(ev))
	}
	fmt.Println(out.Status, string(out.Result))
	// Output:
	// {"at":"2026-11-30T10:00:00.000000Z","code_version":"v1","inputs":{"sku":"SKU-42"},"kind":"run:start","run_seq":1}
	// {"at":"2026-11-30T10:00:00.000000Z","call":{"effect":"read","fingerprint":"008a7708a242564951e66f3b77f2136f6f331ef13aaccf7ea65a8221a4e15806","key":"quote:0","kind":"step"},"input":"SKU-42","kind":"call:start","run_seq":2}
	// {"at":"2026-11-30T10:00:00.000000Z","call":{"effect":"read","fingerprint":"008a7708a242564951e66f3b77f2136f6f331ef13aaccf7ea65a8221a4e15806","key":"quote:0","kind":"step"},"kind":"call:done","run_seq":3}
	// {"at":"2026-11-30T10:00:00.000000Z","call":{"effect":"pure","fingerprint":"a7a8d755648711717ad13caf6c5a400db6c30758a37d3436b20034357f452101","key":"0","kind":"sleep"},"input":{"seconds":300},"kind":"call:start","run_seq":4,"wake_at":"2026-11-30T10:05:00Z"}
	// {"at":"2026-11-30T10:05:00.000000Z","call":{"effect":"pure","fingerprint":"a7a8d755648711717ad13caf6c5a400db6c30758a37d3436b20034357f452101","key":"0","kind":"sleep"},"kind":"call:done","run_seq":5}
	// {"at":"2026-11-30T10:05:00.000000Z","kind":"run:complete","result":1999,"run_seq":6}
	// complete 1999
}
