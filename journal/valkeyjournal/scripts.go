package valkeyjournal

import "github.com/valkey-io/valkey-go"

// The scripts. Each touches only the keys of one run, which share a hash tag
// (one slot), so each runs atomically on a Valkey Cluster too. Every check
// runs before the first write, so a refused call changes nothing. Errors are
// replies whose first word names them (see scriptError). Lease times are in
// milliseconds of the server's clock (TIME), so that workers' clocks never
// matter.

// prelude is shared by the scripts.
const prelude = `
local TERMINAL = {complete = true, error = true, cancelled = true}
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function int(n) return string.format('%d', n) end
local CHUNK = 256
`

// fenced checks that ARGV[1] (owner) and ARGV[2] (epoch) hold the lease of a
// running run whose meta is KEYS[1], and leaves the HMGET reply in m.
const fenced = `
local m = redis.call('HMGET', KEYS[1], 'status', 'lease_owner', 'lease_epoch', 'last_seq')
if not m[1] then return redis.error_reply('PYRULA_NOTFOUND') end
if TERMINAL[m[1]] then return redis.error_reply('PYRULA_FINISHED ' .. m[1]) end
if m[2] ~= ARGV[1] or m[3] ~= ARGV[2] then
  return redis.error_reply('PYRULA_LEASE ' .. m[3] .. ' ' .. m[2])
end
`

// createScript: KEYS meta, events, results. ARGV owner, lease TTL (ms), the
// run:submitted event, then meta field/value pairs. Returns {epoch, until}.
var createScript = valkey.NewLuaScript(prelude + `
if redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3]) > 0 then
  return redis.error_reply('PYRULA_EXISTS')
end
local epoch, untl = 0, 0
if ARGV[1] ~= '' then
  epoch = 1
  untl = now_ms() + tonumber(ARGV[2])
end
local f = {'status', 'running', 'last_seq', '1', 'lease_owner', ARGV[1],
  'lease_epoch', int(epoch), 'lease_until', int(untl), 'finished_at', ''}
for i = 4, #ARGV do f[#f + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(f))
redis.call('XADD', KEYS[2], '0-1', 'event', ARGV[3])
return {epoch, untl}
`)

// writeScript appends and, with a status, finishes. KEYS meta, events,
// results. ARGV owner, epoch, terminal status (” to append), finished_at,
// TTL in ms to set on a finished run's keys (0: none), number of events,
// number of results, then per event its expected run_seq (0: any), head and
// tail, then per result its field and record. Returns the new last_seq.
// The results are checked and written CHUNK at a time (one HMGET, one
// HSET), not one call each: a call from a script costs the server more
// than the command it runs.
var writeScript = valkey.NewLuaScript(prelude + fenced + `
local seq = tonumber(m[4])
local n, r = tonumber(ARGV[6]), tonumber(ARGV[7])
local i = 8
for k = 1, n do
  local want = tonumber(ARGV[i])
  if want ~= 0 and want ~= seq + k then
    return redis.error_reply('PYRULA_SEQ ' .. int(want) .. ' ' .. int(seq + k))
  end
  i = i + 3
end
for k0 = 1, r, CHUNK do
  local k1 = math.min(r, k0 + CHUNK - 1)
  local fields = {}
  for k = k0, k1 do fields[#fields + 1] = ARGV[i + 2 * (k - 1)] end
  local cur = redis.call('HMGET', KEYS[3], unpack(fields))
  for k = k0, k1 do
    local c, j = cur[k - k0 + 1], i + 2 * (k - 1)
    if c and c ~= ARGV[j + 1] then
      return redis.error_reply('PYRULA_RESULT ' .. ARGV[j])
    end
  end
end
i = 8
for k = 1, n do
  seq = seq + 1
  local s = int(seq)
  redis.call('XADD', KEYS[2], '0-' .. s, 'event', ARGV[i + 1] .. s .. ARGV[i + 2])
  i = i + 3
end
for k0 = 1, r, CHUNK do
  local k1 = math.min(r, k0 + CHUNK - 1)
  redis.call('HSET', KEYS[3], unpack(ARGV, i + 2 * (k0 - 1), i + 2 * k1 - 1))
end
if ARGV[3] == '' then
  redis.call('HSET', KEYS[1], 'last_seq', int(seq))
else
  redis.call('HSET', KEYS[1], 'last_seq', int(seq), 'status', ARGV[3],
    'finished_at', ARGV[4], 'lease_until', '0')
  local ttl = tonumber(ARGV[5])
  if ttl > 0 then
    for _, key in ipairs(KEYS) do redis.call('PEXPIRE', key, ttl) end
  end
end
return seq
`)

// acquireScript: KEYS meta. ARGV owner, lease TTL (ms). Returns {epoch, until}.
var acquireScript = valkey.NewLuaScript(prelude + `
local m = redis.call('HMGET', KEYS[1], 'status', 'lease_owner', 'lease_epoch', 'lease_until')
if not m[1] then return redis.error_reply('PYRULA_NOTFOUND') end
if TERMINAL[m[1]] then return redis.error_reply('PYRULA_FINISHED ' .. m[1]) end
local now = now_ms()
if m[2] ~= '' and m[2] ~= ARGV[1] and tonumber(m[4]) > now then
  return redis.error_reply('PYRULA_HELD ' .. m[3] .. ' ' .. m[4] .. ' ' .. m[2])
end
local epoch = tonumber(m[3]) + 1
local untl = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'lease_owner', ARGV[1], 'lease_epoch', int(epoch),
  'lease_until', int(untl), 'status', 'running')
return {epoch, untl}
`)

// renewScript: KEYS meta. ARGV owner, epoch, lease TTL (ms). Returns until.
var renewScript = valkey.NewLuaScript(prelude + fenced + `
local untl = now_ms() + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'lease_until', int(untl))
return untl
`)

// releaseScript: KEYS meta. ARGV owner, epoch, status.
var releaseScript = valkey.NewLuaScript(prelude + fenced + `
redis.call('HSET', KEYS[1], 'lease_owner', '', 'lease_until', '0', 'status', ARGV[3])
return 1
`)

// sealScript: KEYS meta, events, results. ARGV TTL (ms).
var sealScript = valkey.NewLuaScript(prelude + `
local s = redis.call('HGET', KEYS[1], 'status')
if not s then return redis.error_reply('PYRULA_NOTFOUND') end
if not TERMINAL[s] then return redis.error_reply('PYRULA_NOTFINISHED ' .. s) end
for _, key in ipairs(KEYS) do redis.call('PEXPIRE', key, ARGV[1]) end
return 1
`)
