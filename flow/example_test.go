package flow_test

import (
	"context"
	"fmt"
	"time"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/flowtest"
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
	log := flow.NewMemLog()
	clock := flowtest.NewAutoClock(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	rt, err := flow.NewRuntime(flow.Config{Registry: reg, Log: log, Clock: clock})
	if err != nil {
		panic(err)
	}
	out, err := rt.Run(context.Background(), flow.RunParams{RunID: "run_1", Target: "price"})
	if err != nil {
		panic(err)
	}
	for _, ev := range log.EventsJSON("run_1") {
		fmt.Println(string(ev))
	}
	fmt.Println(out.Status, string(out.Result))
	// Output:
	// {"run_seq":1,"kind":"run:start","at":"2026-11-30T10:00:00.000Z","inputs":{"sku":"SKU-42"},"code_version":"v1"}
	// {"run_seq":2,"kind":"call:start","at":"2026-11-30T10:00:00.000Z","call":{"kind":"step","key":"quote:0","fingerprint":"008a7708a242564951e66f3b77f2136f6f331ef13aaccf7ea65a8221a4e15806","effect":"read"},"input":"SKU-42"}
	// {"run_seq":3,"kind":"call:done","at":"2026-11-30T10:00:00.000Z","call":{"kind":"step","key":"quote:0","fingerprint":"008a7708a242564951e66f3b77f2136f6f331ef13aaccf7ea65a8221a4e15806","effect":"read"}}
	// {"run_seq":4,"kind":"call:start","at":"2026-11-30T10:00:00.000Z","call":{"kind":"sleep","key":"0","fingerprint":"a7a8d755648711717ad13caf6c5a400db6c30758a37d3436b20034357f452101","effect":"pure"},"input":{"seconds":300},"wake_at":"2026-11-30T10:05:00Z"}
	// {"run_seq":5,"kind":"call:done","at":"2026-11-30T10:05:00.000Z","call":{"kind":"sleep","key":"0","fingerprint":"a7a8d755648711717ad13caf6c5a400db6c30758a37d3436b20034357f452101","effect":"pure"}}
	// {"run_seq":6,"kind":"run:complete","at":"2026-11-30T10:05:00.000Z","result":1999}
	// complete 1999
}
