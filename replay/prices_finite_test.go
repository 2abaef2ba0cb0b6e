package replay_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/replay"
)

// TestParsePricesFinite: a rate JSON can write but a float64 cannot hold
// (1e400 would be infinity) is refused with the field it is in, as is a
// rate so large that costs could overflow to infinity; every accepted
// table prices a call at a finite cost that encodes.
func TestParsePricesFinite(t *testing.T) {
	for _, tc := range []struct{ prices, want string }{
		{`{"m":{"input_per_mtok":1e400,"output_per_mtok":1}}`, "input_per_mtok 1e400 is not a finite number"},
		{`{"m":{"input_per_mtok":1,"output_per_mtok":-1e400}}`, "output_per_mtok -1e400 is not a finite number"},
		{`{"m":{"input_per_mtok":1,"output_per_mtok":1,"cache_read_per_mtok":1e999}}`, "cache_read_per_mtok 1e999 is not a finite number"},
		{`{"m":{"input_per_mtok":1,"output_per_mtok":1,"long_context":{"above_input_tokens":10,"input_per_mtok":1e400,"output_per_mtok":1}}}`,
			"long_context.input_per_mtok 1e400 is not a finite number"},
		{`{"m":{"input_per_mtok":1,"output_per_mtok":1,"long_context":{"above_input_tokens":1e30,"input_per_mtok":1,"output_per_mtok":1}}}`,
			"long_context.above_input_tokens 1e30 is not a valid int64"},
		{`{"m":{"input_per_mtok":1e308,"output_per_mtok":1}}`, "m: input_per_mtok 1e+308 is above 1e+06"},
		{`{"m":{"input_per_mtok":1,"output_per_mtok":1,"cache_write_per_mtok":1000001}}`, "m: cache_write_per_mtok 1.000001e+06 is above 1e+06"},
		{`{"m":{"input_per_mtok":-0.5,"output_per_mtok":1}}`, "m: rates must not be negative (input_per_mtok -0.5)"},
	} {
		_, err := replay.ParsePrices([]byte(tc.prices))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParsePrices(%s) = %v, want an error containing %q", tc.prices, err, tc.want)
		}
	}

	p, err := replay.ParsePrices([]byte(`{"m":{"input_per_mtok":1e6,"output_per_mtok":1e6}}`))
	if err != nil {
		t.Fatal(err)
	}
	most := flow.Usage{InputTokens: 1 << 62, OutputTokens: 1 << 62, CacheCreationInputTokens: 1 << 62, CacheReadInputTokens: 1 << 62}
	if _, err := json.Marshal(replay.USD(p["m"].Cost(most) * 1e6)); err != nil {
		t.Fatalf("the cost at the highest rate does not encode: %v", err)
	}
}
