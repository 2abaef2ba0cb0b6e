package examples_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/examples"
	"github.com/pyrula/caseworker/flow/flowtest"
	"github.com/pyrula/caseworker/flow/host"
)

// Run the checkout example with no inputs against an in-memory log.
func ExampleRegister() {
	reg := flow.NewRegistry()
	fx, err := examples.Register(reg)
	if err != nil {
		panic(err)
	}
	log := host.NewMemLog()
	rt, err := host.NewRuntime(host.Config{
		Registry: reg,
		Log:      log,
		Clock:    flowtest.NewAutoClock(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)),
		Random:   func() float64 { return 0.25 },
	})
	if err != nil {
		panic(err)
	}
	out, err := rt.Run(context.Background(), host.RunParams{RunID: "run_1", Target: examples.Checkout})
	if err != nil {
		panic(err)
	}
	fmt.Println(out.Status, "reservations:", fx.Reservations.Load(), "emails:", fx.Emails.Load())
	for _, line := range flowtest.Trace(log.Events("run_1")) {
		fmt.Println(line)
	}
	var res examples.CheckoutResult
	_ = json.Unmarshal(out.Result, &res)
	fmt.Println(res.Receipt)
	// Output:
	// complete reservations: 1 emails: 1
	// run:start
	// call:start step:quote:0
	// call:done step:quote:0
	// call:start step:reserve:0
	// call:done step:reserve:0
	// call:start sleep:0
	// call:done sleep:0
	// call:start now:0
	// call:done now:0
	// call:start random:0
	// call:done random:0
	// call:start step:sigsend:0
	// call:done step:sigsend:0
	// call:start signal:approval:0
	// call:done signal:approval:0
	// call:start step:format_receipt:0
	// call:done step:format_receipt:0
	// call:start step:child:0
	// call:done step:child:0
	// run:complete
	// 2 x SKU-42: EUR 39.98, reservation rsv_0001, confirmation C250000 at 2026-11-30T10:00:00Z
}

// The registration that `pyrula targets` prints and a bundle's manifest
// records.
func ExampleRegister_targets() {
	reg := flow.NewRegistry()
	if _, err := examples.Register(reg); err != nil {
		panic(err)
	}
	for _, t := range reg.Targets() {
		line, _ := json.Marshal(t)
		fmt.Println(string(line))
	}
	// Output:
	// {"name":"checkout","kind":"workflow","code_version":"examples/v1","registration":{"tools":[],"steps":[{"id":"quote","name":"quote","effect":"read"},{"id":"reserve","name":"reserve","effect":"write"},{"id":"format_receipt","name":"format_receipt","effect":"pure"},{"id":"sigsend:0","name":"approval","effect":"write"},{"id":"child:0","name":"send_receipt","effect":"write"}]},"inputs":{"approval":"approved","delay_ms":10,"email":"jurgen@example.com","qty":2,"sku":"SKU-42"},"package":"github.com/pyrula/caseworker/flow/examples"}
	// {"name":"refund_policy","kind":"agent","code_version":"examples/v1","registration":{"tools":[],"steps":[]},"inputs":{"order_status":"delivered","reason":"damaged"},"model":"local-policy-1","package":"github.com/pyrula/caseworker/flow/examples"}
	// {"name":"send_receipt","kind":"workflow","code_version":"examples/v1","registration":{"tools":[],"steps":[{"id":"send_email","name":"send_email","effect":"write"}]},"inputs":{"body":"Thank you for your order.","email":"jurgen@example.com"},"package":"github.com/pyrula/caseworker/flow/examples"}
	// {"name":"support_agent","kind":"agent","code_version":"examples/v1","registration":{"tools":[{"name":"lookup_order","writes":false},{"name":"refund","writes":true},{"name":"refund_policy","writes":false}],"steps":[]},"inputs":{"message":"My order ord_7Q2K arrived damaged — can I get a refund?","ticket_id":"T-5521"},"model":"local-support-1","package":"github.com/pyrula/caseworker/flow/examples"}
	// {"name":"triage","kind":"workflow","code_version":"examples/v1","registration":{"tools":[],"steps":[{"id":"classify","name":"classify","effect":"read"},{"id":"lookup","name":"lookup","effect":"read"},{"id":"child:0","name":"triage","effect":"write"}]},"inputs":{"ask_reviewer":false,"follow_updates":false,"lookup_ms":0,"second_opinion":"","snooze_ms":0,"ticket":"T-5521"},"package":"github.com/pyrula/caseworker/flow/examples"}
}
