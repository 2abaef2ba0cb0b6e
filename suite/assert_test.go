package suite_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/replay"
	"github.com/pyrula/caseworker/suite"
)

func str(s string) *string { return &s }

// CheckAssertion holds or says what it found, for each kind of check.
func TestCheckAssertion(t *testing.T) {
	result := json.RawMessage(`{"reply":"Thanks, refunded","turns":2,"tags":["refund","vip"],"amount":12.50,"a key":{"b":[1,{"c":true}]}}`)
	out := replay.Outcome{CostUSD: 0.25, LiveCalls: 3}
	two, five := 2, 5
	quarter, tenth := 0.25, 0.1
	for _, c := range []struct {
		a     messages.SuiteAssertion
		found string // "" when it holds
	}{
		{messages.SuiteAssertion{Path: "$.turns", Equals: json.RawMessage(`2`)}, ""},
		{messages.SuiteAssertion{Path: "$.amount", Equals: json.RawMessage(`12.5`)}, ""},
		{messages.SuiteAssertion{Path: "$.turns", Equals: json.RawMessage(`3`)}, `$.turns is 2, not 3`},
		{messages.SuiteAssertion{Path: `$["a key"].b[1]`, Equals: json.RawMessage(`{"c": true}`)}, ""},
		{messages.SuiteAssertion{Equals: json.RawMessage(`{"turns":2}`)}, `$ is {"a key":{"b":[1,{"c":true}]},"amount":12.50,"reply":"Thanks, refunded","tags":["refund","vip"],"turns":2}, not {"turns":2}`},
		{messages.SuiteAssertion{Path: "$.reply", Contains: str("refund")}, ""},
		{messages.SuiteAssertion{Path: "$.reply", Contains: str("sorry")}, `$.reply is "Thanks, refunded", without "sorry"`},
		{messages.SuiteAssertion{Path: "$.tags", Contains: str("vip")}, ""},
		{messages.SuiteAssertion{Path: "$.tags", Contains: str("vi")}, `$.tags is ["refund","vip"], without the element "vi"`},
		{messages.SuiteAssertion{Path: "$.turns", Contains: str("2")}, `$.turns is 2, not a string or an array`},
		{messages.SuiteAssertion{Path: "$.reply", Matches: str(`^Thanks\b`)}, ""},
		{messages.SuiteAssertion{Path: "$.reply", Matches: str(`(?i)^sorry`)}, `$.reply is "Thanks, refunded", which "(?i)^sorry" does not match`},
		{messages.SuiteAssertion{Path: "$.missing", Equals: json.RawMessage(`1`)}, `the result has no $.missing`},
		{messages.SuiteAssertion{Path: "$.tags[5]", Equals: json.RawMessage(`1`)}, `the result has no $.tags[5]`},
		{messages.SuiteAssertion{MaxCostUSD: &quarter}, ""},
		{messages.SuiteAssertion{MaxCostUSD: &tenth}, `cost_usd 0.25 is over 0.1`},
		{messages.SuiteAssertion{MaxLiveCalls: &five}, ""},
		{messages.SuiteAssertion{MaxLiveCalls: &two}, `live_calls 3 is over 2`},
	} {
		if got := suite.CheckAssertion(c.a, result, out); got != c.found {
			t.Errorf("%s: found %q, want %q", suite.AssertionText(c.a), got, c.found)
		}
	}
	if got := suite.CheckAssertion(messages.SuiteAssertion{Equals: json.RawMessage(`1`)}, nil, out); got != "the run has no result" {
		t.Errorf("no result: %q", got)
	}
}

// An assertion that cannot be checked is refused, naming why.
func TestCheckAssertionShape(t *testing.T) {
	neg := -1.0
	for _, c := range []struct {
		a    messages.SuiteAssertion
		want string
	}{
		{messages.SuiteAssertion{}, "exactly one of"},
		{messages.SuiteAssertion{Equals: json.RawMessage(`1`), Matches: str("x")}, "exactly one of"},
		{messages.SuiteAssertion{Path: "reply", Equals: json.RawMessage(`1`)}, "does not start with $"},
		{messages.SuiteAssertion{Path: "$.", Equals: json.RawMessage(`1`)}, "a member name must follow the dot"},
		{messages.SuiteAssertion{Path: "$[x]", Equals: json.RawMessage(`1`)}, "is not an index"},
		{messages.SuiteAssertion{Path: `$["a`, Equals: json.RawMessage(`1`)}, "[ without ]"},
		{messages.SuiteAssertion{Matches: str("(")}, "not an RE2 pattern"},
		{messages.SuiteAssertion{MaxCostUSD: &neg}, "negative"},
		{messages.SuiteAssertion{Path: "$.x", MaxCostUSD: new(float64)}, "path applies to"},
	} {
		err := suite.CheckAssertionShape(c.a)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error with %q", c.a, err, c.want)
		}
	}
	if err := suite.CheckAssertionShape(messages.SuiteAssertion{Path: `$["a \"q\""][0].b`, Contains: str("x")}); err != nil {
		t.Errorf("a valid path refused: %v", err)
	}
}
