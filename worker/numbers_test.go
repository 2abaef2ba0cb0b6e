package worker_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store/memstore"
)

// TestNumericOptionsRefused: a number that is not finite where a message
// option or any value of a body holds one (JSON can write 1e400, which no
// double holds), an integer option that is not an integer or does not fit
// in 64 bits, and a number given as a string are refused invalid_overrides
// at submission, on the first delivery, with a message naming the field in
// the message's terms. JSON has no NaN or Infinity: an envelope holding
// one is not JSON, refused as such.
func TestNumericOptionsRefused(t *testing.T) {
	t.Parallel()
	st := memstore.New(memstore.Options{})
	bundleSource := fmt.Sprintf(`{"bundle":{"fixture_hash":%q}}`, saveSample(t, st, "checkout-recorded.json"))
	e := setup(t, st, nil)
	runCase := func(options string) string {
		return `{"target_name":"checkout","source":` + bundleSource + `,"options":` + options + `}`
	}
	journal := func(fork string) string {
		return `{"target_name":"checkout","source":{"journal":{"run_id":"run_1","fork_after_seq":` + fork + `}}}`
	}
	price := func(rates string) string { return runCase(`{"prices":{` + rates + `}}`) }
	cases := []struct {
		id, typ, body, want string
	}{
		{"cost-overflow", "run_case", runCase(`{"max_cost_usd":1e400}`), `options.max_cost_usd 1e400 is not a finite number`},
		{"cost-negative-overflow", "run_case", runCase(`{"max_cost_usd":-1e400}`), `options.max_cost_usd -1e400 is not a finite number`},
		{"cost-string", "run_case", runCase(`{"max_cost_usd":"NaN"}`), `options.max_cost_usd is a JSON string, not a number`},
		{"budget-overflow", "run_case", runCase(`{"live_budget":1e400}`), `options.live_budget 1e400 is not a finite number`},
		{"budget-huge", "run_case", runCase(`{"live_budget":99999999999999999999}`), `options.live_budget 99999999999999999999 is too large: it must fit in 64 bits`},
		{"budget-fraction", "run_case", runCase(`{"live_budget":1.5}`), `options.live_budget 1.5 is not an integer`},
		{"price-overflow", "run_case", price(`"m":{"input_per_mtok":1e400,"output_per_mtok":1}`), `options.prices.m.input_per_mtok 1e400 is not a finite number`},
		{"price-overflow-named", "run_case", price(`"gpt-4.1":{"input_per_mtok":1,"output_per_mtok":2e308}`), `options.prices["gpt-4.1"].output_per_mtok 2e308 is not a finite number`},
		{"price-tier-overflow", "run_case", price(`"m":{"input_per_mtok":1,"output_per_mtok":1,"long_context":{"above_input_tokens":1e999,"input_per_mtok":1,"output_per_mtok":1}}`),
			`options.prices.m.long_context.above_input_tokens 1e999 is not a finite number`},
		{"price-too-high", "run_case", price(`"m":{"input_per_mtok":1e300,"output_per_mtok":1}`), `options.prices: m: input_per_mtok 1e+300 is above`},
		{"inputs-overflow", "run_case", runCase(`{"inputs":{"qty":1e400}}`), `options.inputs.qty 1e400 is not a finite number`},
		{"supply-overflow", "run_case", runCase(`{"supply":{"calls":{"step:quote:0":{"total":-1e400}}}}`), `options.supply.calls["step:quote:0"].total -1e400 is not a finite number`},
		{"int-too-long", "run_case", runCase(`{"inputs":{"n":` + strings.Repeat("9", 4301) + `}}`), `options.inputs.n is an integer of 4301 digits, more than 4300`},
		{"fork-overflow", "run_case", journal(`1e400`), `source.journal.fork_after_seq 1e400 is not a finite number`},
		{"fork-huge", "run_case", journal(`99999999999999999999`), `source.journal.fork_after_seq 99999999999999999999 is too large: it must fit in 64 bits`},
		{"fork-fraction", "run_case", journal(`2.5`), `source.journal.fork_after_seq 2.5 is not an integer`},
		{"fork-string", "run_case", journal(`"3"`), `source.journal.fork_after_seq is a JSON string, not an integer`},
		{"save-fork-overflow", "save_case", `{"target_name":"checkout","run_id":"run_1","fork_after_seq":1e400}`, `fork_after_seq 1e400 is not a finite number`},
		{"save-fork-exponent", "save_case", `{"target_name":"checkout","run_id":"run_1","fork_after_seq":1e20}`, `fork_after_seq 1e20 is not an integer`},
		{"start-inputs-overflow", "start_run", `{"target_name":"checkout","inputs":{"order":{"amount":1E+400}}}`, `inputs.order.amount 1E+400 is not a finite number`},
	}
	for _, c := range cases {
		e.sendRaw(`{"message_id":"` + c.id + `","type":"` + c.typ + `","body":` + c.body + `}`)
	}
	e.sendRaw(`{"message_id":"nan","type":"run_case","body":` + runCase(`{"max_cost_usd":NaN}`) + `}`)
	got := byID(e.waitReplies(len(cases) + 1))
	for _, c := range cases {
		r := got[c.id]
		if r.Status != messages.StatusRefused || r.Code != messages.InvalidOverrides || !strings.Contains(r.Message, c.want) {
			t.Errorf("%s: %s %s %q, want refused invalid_overrides %q", c.id, r.Status, r.Code, r.Message, c.want)
		}
	}
	if r := got[""]; r.Code != messages.InvalidOverrides || !strings.Contains(r.Message, "is not a JSON envelope") {
		t.Errorf("an envelope with NaN: %+v, want refused invalid_overrides as not a JSON envelope", r)
	}
	for _, c := range cases {
		e.noTransientError(c.id)
	}
}
