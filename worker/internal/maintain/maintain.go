// Package maintain owns the upkeep of the worker's streams that every
// worker runs on a timer: trimming the entries every consumer group has
// acked, and deleting the consumers that are gone (idle, nothing pending).
// Each step is one Lua script, so two workers running it at once do no
// harm.
//
// It imports nothing of the project.
package maintain

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap"
)

// fieldsLua defines fields(t): the table of an XINFO reply row, given as a
// flat array of names and values (Redis and Valkey) or as a table keyed by
// name (the embedded server, memvalkey).
const fieldsLua = `
local function fields(t)
  if t[1] == nil then return t end
  local f = {}
  for i = 1, #t, 2 do f[t[i]] = t[i + 1] end
  return f
end
`

// trimScript trims stream KEYS[1] of the entries every consumer group of it
// has acked: XTRIM MINID to the smallest, over its groups, of the group's
// last-delivered id and its oldest pending id. An entry below that bound
// was delivered to every group and is pending in none, so no entry that is
// pending or not yet delivered is ever dropped. It runs as one script, so
// no group moves between the look and the trim. A stream without groups is
// left alone. It returns the number of entries removed.
var trimScript = valkey.NewLuaScript(fieldsLua + `
local function cmp(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if #am ~= #bm then return #am < #bm and -1 or 1 end
  if am ~= bm then return am < bm and -1 or 1 end
  if #as ~= #bs then return #as < #bs and -1 or 1 end
  if as ~= bs then return as < bs and -1 or 1 end
  return 0
end
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
if #groups == 0 then return 0 end
local bound = nil
for _, g in ipairs(groups) do
  local f = fields(g)
  local b = f['last-delivered-id']
  if f['pending'] > 0 then
    local oldest = redis.call('XPENDING', KEYS[1], f['name'])[2]
    if cmp(oldest, b) < 0 then b = oldest end
  end
  if bound == nil or cmp(b, bound) < 0 then bound = b end
end
if bound == '0-0' then return 0 end
return redis.call('XTRIM', KEYS[1], 'MINID', bound)
`)

// cleanupScript deletes the consumers of group ARGV[1] on stream KEYS[1]
// that have no pending entries and have been idle (no read or claim
// attempted) longer than ARGV[2] milliseconds, except consumer ARGV[3]. The
// check and the delete are one script, so a consumer that still has pending
// entries is never deleted. It returns the names deleted.
var cleanupScript = valkey.NewLuaScript(fieldsLua + `
local deleted = {}
if redis.call('EXISTS', KEYS[1]) == 0 then return deleted end
local ok, consumers = pcall(redis.call, 'XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
if not ok then return deleted end
for _, c in ipairs(consumers) do
  local f = fields(c)
  if f['pending'] == 0 and f['idle'] > tonumber(ARGV[2]) and f['name'] ~= ARGV[3] then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])
    table.insert(deleted, f['name'])
  end
end
return deleted
`)

// Config says which consumer is this worker's own (never deleted) and how
// long another must be idle to be deleted.
type Config struct {
	Consumer       string        // this worker's consumer name
	ConsumerExpiry time.Duration // PYRULA_CONSUMER_EXPIRY
}

// Deps are what a Maintainer uses.
type Deps struct {
	Client valkey.Client
	Logger *zap.Logger // zap.NewNop when nil
}

// Stream is a stream and the consumer group on it to maintain.
type Stream struct {
	Stream, Group string
}

// Maintainer trims streams and deletes their dead consumers.
type Maintainer struct {
	cfg    Config
	client valkey.Client
	log    *zap.Logger
}

// New returns the Maintainer of cfg.
func New(cfg Config, deps Deps) (*Maintainer, error) {
	if deps.Client == nil {
		return nil, errors.New("maintain: a Valkey client is required")
	}
	if cfg.Consumer == "" {
		return nil, errors.New("maintain: the consumer name is required")
	}
	log := deps.Logger
	if log == nil {
		log = zap.NewNop()
	}
	return &Maintainer{cfg: cfg, client: deps.Client, log: log}, nil
}

// Pass trims each stream and deletes its group's dead consumers, logging
// what it removed; it returns every step's error, joined.
func (m *Maintainer) Pass(ctx context.Context, streams []Stream) error {
	var errs []error
	for _, s := range streams {
		n, err := m.Trim(ctx, s.Stream)
		if err != nil {
			errs = append(errs, err)
		} else if n > 0 {
			m.log.Debug("trimmed acked entries", zap.String("stream", s.Stream), zap.Int64("entries", n))
		}
		gone, err := m.CleanupConsumers(ctx, s.Stream, s.Group)
		if err != nil {
			errs = append(errs, err)
		}
		for _, name := range gone {
			m.log.Info("deleted an idle consumer without pending entries", zap.String("stream", s.Stream),
				zap.String("group", s.Group), zap.String("consumer", name))
		}
	}
	return errors.Join(errs...)
}

// Trim removes the entries of stream that every group of it has acked,
// returning how many.
func (m *Maintainer) Trim(ctx context.Context, stream string) (int64, error) {
	n, err := trimScript.Exec(ctx, m.client, []string{stream}, nil).AsInt64()
	if err != nil {
		return 0, fmt.Errorf("trim %s: %w", stream, err)
	}
	return n, nil
}

// CleanupConsumers deletes the consumers of group on stream idle longer
// than ConsumerExpiry with no pending entries (never this worker's own),
// returning their names.
func (m *Maintainer) CleanupConsumers(ctx context.Context, stream, group string) ([]string, error) {
	gone, err := cleanupScript.Exec(ctx, m.client, []string{stream},
		[]string{group, strconv.FormatInt(m.cfg.ConsumerExpiry.Milliseconds(), 10), m.cfg.Consumer}).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("delete idle consumers of %s on %s: %w", group, stream, err)
	}
	return gone, nil
}
