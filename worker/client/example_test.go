package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/examples"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/memvalkey"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/runevent"
	"github.com/pyrula/caseworker/worker"
	"github.com/pyrula/caseworker/worker/client"
)

// The platform's side of a start_run: send it, wait for the reply, follow
// the run to its end. Here the worker runs on the embedded server, as in
// `worker demo`; against Valkey only the valkey client differs.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := memvalkey.Start()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	vc, err := srv.NewClient()
	if err != nil {
		panic(err)
	}
	defer vc.Close()
	reg := flow.NewRegistry()
	if _, err := examples.Register(reg); err != nil {
		panic(err)
	}
	w, err := worker.New(worker.Config{Namespace: "example", ConsumerName: "example"}, worker.Params{Client: vc, Registry: reg})
	if err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Stop(ctx)

	cl, err := client.New(vc, client.Options{Namespace: "example"})
	if err != nil {
		panic(err)
	}
	_, reply, err := cl.Request(ctx, client.Message{
		MessageID: "order-1", Type: messages.StartRun,
		Body: json.RawMessage(`{"target_name":"checkout","inputs":{"qty":3}}`),
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("reply:", reply.Status)
	run, err := client.RunResult(reply)
	if err != nil {
		panic(err)
	}
	end, err := cl.Follow(ctx, run.Events, func(ev journal.Event) error {
		if ev.Kind == runevent.RunStart || journal.IsTerminal(ev.Kind) {
			fmt.Println("event:", ev.Kind)
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("ended:", end.Status)
	// Output:
	// reply: ok
	// event: run:start
	// event: run:complete
	// ended: complete
}
