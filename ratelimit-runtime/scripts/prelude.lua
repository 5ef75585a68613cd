-- prelude.lua: the clock, the arguments and the integer arithmetic every algorithm shares.
--
-- Each check script is concatenated from these files: a limit checked alone runs its own
-- algorithm's script (prelude, one algorithm, single.lua); a stack of limits runs the
-- general one (prelude, the four algorithms, check.lua). Either way one check is one
-- EVALSHA. Everything here is local to that script.
--
-- Redis runs the whole chunk on every call, so every `local function` is a new closure per
-- call, and every table a new allocation: the files keep both few. Helpers are only those
-- used more than once; algorithms pass their state as multiple return values, not tables.
--
-- Numbers that Redis itself wrote (TIME, our own counters) are turned into Lua numbers by
-- arithmetic (`s + 0`, `s * 1000`), which converts once; `tonumber` converts twice and is
-- kept for the caller's arguments, where a non-number must become a clear error.
--
-- ARGV[1] is the injected time in milliseconds (tests), or the empty string: then the
-- time is Redis's own clock (TIME), so every app instance shares one clock.

local rl_injected = ARGV[1] ~= ''

local function rl_now_ms()
  if not rl_injected then
    local t = redis.call('TIME')
    return t[1] * 1000 + math.floor(t[2] / 1000)
  end
  local now = tonumber(ARGV[1])
  if now == nil or now < 0 or now ~= math.floor(now) then
    error('rate-limit script: ARGV[1] must be empty or a whole number of milliseconds')
  end
  return now
end

-- Lua numbers are doubles: integers are exact up to 2^53, but a/b may round up to the next
-- integer for large operands. These correct the quotient so floor/ceil are exact whenever
-- the operands themselves are exact.
local function rl_floor_div(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

local function rl_ceil_div(a, b)
  return -rl_floor_div(-a, b)
end

-- A number as a plain integer string is `rl_format('%d', n)`. Numbers passed to redis.call
-- are otherwise converted with limited precision (tostring uses %.14g), which silently
-- corrupts timestamps.
local rl_format = string.format

-- One limit's reply: `allowed (0/1) remaining retry_after_ms reset_after_ms`. `%d` writes a
-- whole number, as Redis itself would convert a Lua number in an integer reply.
local RL_REPLY = '%d %d %d %d'

-- The TTL of a key in milliseconds, at least 1. With the store's clock the exact value is
-- used. With an injected clock Redis still expires keys on its own clock, which the
-- caller's clock need not follow (a test may stand still for a while between two checks),
-- so a key is then kept at least ten minutes and at least one whole window: a key must not
-- vanish while the caller's clock still reads it.
local RL_INJECTED_TTL_FLOOR = 600000

local function rl_ttl_ms(ms, window)
  if rl_injected then
    if ms < window then
      ms = window
    end
    if ms < RL_INJECTED_TTL_FLOOR then
      ms = RL_INJECTED_TTL_FLOOR
    end
  end
  if ms < 1 then
    ms = 1
  end
  return ms
end

-- Makes `key` live at least `ttl` ms more (see rl_ttl_ms), and never shortens its life: a
-- count at an earlier time than the key has seen (a failover to a node whose clock runs
-- behind) must not expire what a later time counted or logged there. A key without a TTL
-- (just created) reads -1 and gets one.
local function rl_extend(key, ttl, window)
  local ms = rl_ttl_ms(ttl, window)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, rl_format('%d', ms))
  end
end

-- A window algorithm's first count in a new window (field `field` of the hash at `key`):
-- the key lives `ttl` ms more (at least, see rl_extend), and every field older than this
-- window and `keep` (the previous window, which a sliding window still reads) goes. With
-- the store's clock an older field has expired with its key already; with an injected
-- clock keys are kept longer and would gather stale windows. A newer field stays: a clock
-- that stepped back (a failover to a node running behind) must not reset a budget.
local function rl_new_window(key, field, keep, ttl, window)
  rl_extend(key, ttl, window)
  local fields = redis.call('HKEYS', key)
  if #fields > 1 then
    local oldest_kept = (keep or field) + 0
    for _, other in ipairs(fields) do
      if other + 0 < oldest_kept then
        redis.call('HDEL', key, other)
      end
    end
  end
end

-- Limit i's max and window (ARGV[3i+1], ARGV[3i+2]), or nil when either is not a positive
-- number.
local function rl_bounds(i)
  local max = tonumber(ARGV[3 * i + 1])
  local window = tonumber(ARGV[3 * i + 2])
  if max == nil or max < 1 or window == nil or window < 1 then
    return nil
  end
  return max, window
end

local RL_BAD_BOUNDS = 'ERR rate-limit script: max and window must be positive integers'
