package memjournal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/memjournal"
	"github.com/pyrula/caseworker/runevent"
)

// Example records a run of one call the way the runtime does: Create takes
// the lease, each call appends call:start and then call:done with its result,
// and Finish ends the run. The events read back are the run's journal.
func Example() {
	ctx := context.Background()
	clock := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	j, _ := memjournal.New(memjournal.Options{Now: func() time.Time { return clock }})

	lease, err := j.Create(ctx, journal.CreateParams{
		RunID: "run_abc123", TargetName: "checkout", CodeVersion: "v1",
		Inputs: json.RawMessage(`{"sku":"SKU-42"}`), Owner: "worker-1",
	})
	if err != nil {
		panic(err)
	}
	call := journal.Call{Kind: "step", Key: "quote:0", Fingerprint: "9f2c", Effect: "read"}
	start, _ := journal.NewEvent(runevent.CallStart, map[string]any{"call": call, "input": map[string]string{"sku": "SKU-42"}})
	done, _ := journal.NewEvent(runevent.CallDone, map[string]any{"call": call})
	if _, err := j.Append(ctx, lease, journal.Batch{Events: []journal.Event{start}}); err != nil {
		panic(err)
	}
	if _, err := j.Append(ctx, lease, journal.Batch{
		Events:  []journal.Event{done},
		Results: []bundle.Result{{Kind: string(call.Kind), Key: call.Key, Fingerprint: call.Fingerprint, Result: json.RawMessage(`{"price":12.5}`)}},
	}); err != nil {
		panic(err)
	}
	end, _ := journal.NewEvent(runevent.RunComplete, nil)
	last, err := j.Finish(ctx, lease, journal.Batch{Events: []journal.Event{end}})
	if err != nil {
		panic(err)
	}

	run, _ := j.Run(ctx, "run_abc123")
	fmt.Println(run.Meta.Status, last, run.Meta.Origin)
	for _, e := range run.Events {
		raw, _ := e.JSON()
		fmt.Println(string(raw))
	}
	// Output:
	// complete 4 valkey
	// {"at":"2025-01-02T03:04:05.000000Z","kind":"run:submitted","run_seq":1,"target_name":"checkout"}
	// {"at":"2025-01-02T03:04:05.000000Z","call":{"effect":"read","fingerprint":"9f2c","key":"quote:0","kind":"step"},"input":{"sku":"SKU-42"},"kind":"call:start","run_seq":2}
	// {"at":"2025-01-02T03:04:05.000000Z","call":{"effect":"read","fingerprint":"9f2c","key":"quote:0","kind":"step"},"kind":"call:done","run_seq":3}
	// {"at":"2025-01-02T03:04:05.000000Z","kind":"run:complete","run_seq":4}
}
