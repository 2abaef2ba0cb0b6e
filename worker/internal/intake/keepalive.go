package intake

import (
	"context"
	"fmt"
	"time"

	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap"

	"github.com/pyrula/caseworker/worker/internal/consumer"
)

// touchScript resets the idle time of the entries ARGV[3..] of stream
// KEYS[1] that are pending to consumer ARGV[2] of group ARGV[1] (XCLAIM
// with min-idle 0, JUSTID and RETRYCOUNT set to the entry's own count, so
// that no server counts a delivery: Redis does not for JUSTID, but the
// embedded server does unless RETRYCOUNT says otherwise), and leaves
// the others alone: an entry another worker has claimed meanwhile is never
// taken back, and an acked one is not claimed again. The check and the
// claim are one script. It returns the number of entries touched.
var touchScript = valkey.NewLuaScript(`
local n = 0
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2])
  if #p == 1 then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'RETRYCOUNT', p[1][4], 'JUSTID')
    n = n + 1
  end
end
return n
`)

// touchBatch is the most entry ids one touchScript call is given.
const touchBatch = 100

// keepAliveLoop touches the message stream entries this worker is handling
// (in.cases.Active) every third of ClaimIdle until ctx is done, so that a handler
// that outlives ClaimIdle (a large save_case, a slow store) keeps its entry
// idle less than ClaimIdle and no other worker of the group reclaims it
// while this one is alive: the work runs once and is answered once. Parked
// entries (left pending after a failure) are not touched, so they become
// idle and are reclaimed with their backoff. Runs entries are touched by
// the executor with their lease (executor.keepAlive).
func (in *Intake) keepAliveLoop(ctx context.Context) {
	every := max(in.cfg.ClaimIdle/3, 10*time.Millisecond)
	failing := false
	for consumer.Sleep(ctx, every) {
		err := in.touchActive(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			failing = true
			in.log.Warn("touch the message stream entries in flight", zap.Error(err))
		case err == nil && failing:
			failing = false
			in.log.Info("touching the message stream entries in flight works again")
		}
	}
}

// touchActive is one pass of keepAliveLoop.
func (in *Intake) touchActive(ctx context.Context) error {
	ids := in.cases.Active.List()
	for len(ids) > 0 {
		n := min(len(ids), touchBatch)
		args := append([]string{in.cfg.ConsumerGroup, in.cfg.ConsumerName}, ids[:n]...)
		if err := touchScript.Exec(ctx, in.client, []string{in.cfg.CaseStream}, args).Error(); err != nil {
			return fmt.Errorf("touch entries of %s: %w", in.cfg.CaseStream, err)
		}
		ids = ids[n:]
	}
	return nil
}
