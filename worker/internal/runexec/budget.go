package runexec

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/replay"
	"github.com/pyrula/caseworker/suite"
)

// A suite's budget (max_cost_usd, max_live_calls) lives in its counters
// hash (suiteKey: max_nusd, max_calls, calls, reserved_nusd, spent_nusd, in
// nano-dollars) and its reservations hash (suiteKey + ":reserved":
// reservation id → worst case), so that every worker's children draw on
// one budget, each reservation one script.

// reserveScript reserves one live call and ARGV[2] nano-dollars under
// reservation id ARGV[1] (kept ARGV[3] ms) when the suite's ceilings allow
// it: {1}, else {0, "calls"|"cost", used, ceiling}.
var reserveScript = valkey.NewLuaScript(`
local h, r = KEYS[1], KEYS[2]
local worst = tonumber(ARGV[2])
local maxc = redis.call('HGET', h, 'max_calls')
local calls = tonumber(redis.call('HGET', h, 'calls') or '0')
if maxc and calls + 1 > tonumber(maxc) then
  return {0, 'calls', calls, tonumber(maxc)}
end
local maxn = redis.call('HGET', h, 'max_nusd')
local committed = tonumber(redis.call('HGET', h, 'spent_nusd') or '0') + tonumber(redis.call('HGET', h, 'reserved_nusd') or '0')
if maxn and committed + worst > tonumber(maxn) then
  return {0, 'cost', committed, tonumber(maxn)}
end
redis.call('HINCRBY', h, 'calls', 1)
redis.call('HINCRBY', h, 'reserved_nusd', worst)
redis.call('HSET', r, ARGV[1], worst)
redis.call('PEXPIRE', r, ARGV[3])
return {1}
`)

// settleScript ends reservation ARGV[1]: its worst case given back and
// ARGV[2] nano-dollars spent. A reservation already settled is left.
var settleScript = valkey.NewLuaScript(`
local w = redis.call('HGET', KEYS[2], ARGV[1])
if not w then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HINCRBY', KEYS[1], 'reserved_nusd', -tonumber(w))
redis.call('HINCRBY', KEYS[1], 'spent_nusd', ARGV[2])
return 1
`)

// nusd is usd in nano-dollars, rounded up: a reservation never comes out
// below the price it stands for.
func nusd(usd float64) int64 { return int64(math.Ceil(usd * 1e9)) }

// usdOf is n nano-dollars in dollars.
func usdOf(n int64) replay.USD { return replay.USD(float64(n) / 1e9) }

// suiteBudget is a suite's budget as a child's case run draws on it
// (replay.SharedBudget).
type suiteBudget struct {
	x        *Executor
	suiteID  string
	capsCost bool
	// prefix makes this case run's reservation ids unique: the child's run
	// id and a random nonce, so that a call sent again after a crash
	// reserves again, and the lost one stays counted.
	prefix string
}

var _ replay.SharedBudget = (*suiteBudget)(nil)

// childBudget returns the budget of suite suiteID (its state st) for child
// runID, nil when the suite has none.
func (x *Executor) childBudget(st childState, suiteID, runID string) (*suiteBudget, error) {
	if !st.capsCost && !st.capsCall {
		return nil, nil
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("reservation nonce: %w", err)
	}
	return &suiteBudget{x: x, suiteID: suiteID, capsCost: st.capsCost, prefix: runID + "|" + hex.EncodeToString(b[:]) + "|"}, nil
}

func (b *suiteBudget) keys() []string {
	k := b.x.suiteKey(b.suiteID)
	return []string{k, k + ":reserved"}
}

// CapsCost implements replay.SharedBudget.
func (b *suiteBudget) CapsCost() bool { return b.capsCost }

// Reserve implements replay.SharedBudget.
func (b *suiteBudget) Reserve(ctx context.Context, id string, worstUSD float64) (string, error) {
	ttl := strconv.FormatInt(b.x.cfg.IdempotencyTTL.Milliseconds(), 10)
	res, err := reserveScript.Exec(ctx, b.x.client, b.keys(), []string{b.prefix + id, strconv.FormatInt(nusd(worstUSD), 10), ttl}).ToArray()
	if err != nil || len(res) == 0 {
		return "", fmt.Errorf("suite %s: %v", b.suiteID, err)
	}
	if ok, _ := res[0].AsInt64(); ok == 1 {
		return "", nil
	}
	if len(res) != 4 {
		return "", fmt.Errorf("suite %s: the reservation answered %d values", b.suiteID, len(res))
	}
	what, _ := res[1].ToString()
	used, _ := res[2].AsInt64()
	ceiling, _ := res[3].AsInt64()
	if what == "calls" {
		return fmt.Sprintf("it would be the suite's live call %d, over its max_live_calls %d", used+1, ceiling), nil
	}
	return fmt.Sprintf("it could cost up to %s USD on top of %s USD the suite spent or reserved, over its max_cost_usd %s",
		usdText(nusd(worstUSD)), usdText(used), usdText(ceiling)), nil
}

// Settle implements replay.SharedBudget.
func (b *suiteBudget) Settle(ctx context.Context, id string, actualUSD float64) {
	err := settleScript.Exec(context.WithoutCancel(ctx), b.x.client, b.keys(), []string{b.prefix + id, strconv.FormatInt(nusd(actualUSD), 10)}).Error()
	if err != nil {
		b.x.logger.Warn("settle a live call against the suite's budget; it stays counted at its worst case")
	}
}

// usdText is n nano-dollars as dollars.
func usdText(n int64) string {
	raw, _ := usdOf(n).MarshalJSON()
	return string(raw)
}

// budgetFields are the suite's ceilings as its counters hash keeps them.
func budgetFields(b messages.RunSuiteBody) []string {
	var f []string
	if b.MaxCostUSD != nil {
		f = append(f, "max_nusd", strconv.FormatInt(int64(math.Floor(*b.MaxCostUSD*1e9)), 10))
	}
	if b.MaxLiveCalls != nil {
		f = append(f, "max_calls", strconv.Itoa(*b.MaxLiveCalls))
	}
	return f
}

// suiteBudgetState reads what the suite's budget holds, for its outcome;
// nil when the suite has none.
func (x *Executor) suiteBudgetState(ctx context.Context, suiteID string) (*suite.Budget, error) {
	c := x.client
	m, err := c.Do(ctx, c.B().Hgetall().Key(x.suiteKey(suiteID)).Build()).AsStrMap()
	if err != nil {
		return nil, fmt.Errorf("read suite %s's budget: %w", suiteID, err)
	}
	maxN, hasCost := m["max_nusd"]
	maxC, hasCalls := m["max_calls"]
	if !hasCost && !hasCalls {
		return nil, nil
	}
	num := func(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
	b := &suite.Budget{LiveCalls: int(num(m["calls"])), SpentUSD: usdOf(num(m["spent_nusd"])),
		UnsettledUSD: usdOf(num(m["reserved_nusd"]))}
	if hasCost {
		v := usdOf(num(maxN))
		b.MaxCostUSD = &v
	}
	if hasCalls {
		v := int(num(maxC))
		b.MaxLiveCalls = &v
	}
	return b, nil
}
