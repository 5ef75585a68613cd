-- batch.lua: `n` concurrent requests of one client under one limit or a stack of them
-- (each limit counting every request, none with a block), decided in one call: the first
-- `k` of them pass, counted in every limit as `k` single checks in a row would count them,
-- and the others are refused (counted nowhere). The store sends this when requests for one
-- key wait for a check in flight; a request alone goes through its own script.
--
-- Per limit, `fits` is the most of the `n` that limit lets pass, and `k` the least `fits`:
--   fixed window    fits = min(n, max - count)
--   sliding window  fits = min(n, max - cur - ceil(prev x (window - e) / window)), checked
--                   exactly as sliding_window_peek.lua compares
--   sliding log     fits = min(n, max - entries); k members `<member>:<j>` are logged
--   GCRA            fits = min(n, floor((tau - (TAT - now)) / T))
-- A passed request is told each limit's remaining after the `k` (never below 0, also when
-- an override lowered max under a count already higher) and reset; a refused one is told
-- what a check arriving after the `k` is told by each limit: its peek part on the counts
-- the `k` left (check.lua's first phase).
--
-- KEYS[i] the key of limit i, i = 1..L; ARGV[1] the time (see parts/clock.lua), ARGV[2]
-- n (1 to 100000), ARGV[3] the member prefix (a sliding log's, else ''), then per limit
-- ARGV[3i+1], ARGV[3i+2], ARGV[3i+3]: algorithm code (fw, sw, sl, gc), max, window in ms.
-- Returns `k`, then per limit `remaining reset_after` (the last passed request's, after the
-- `k`; the reset in ms, for GCRA in us: each earlier passed request's is one emission
-- interval less per request after it, rounded up to ms as gcra.lua rounds) and `allowed
-- remaining retry_after_ms reset_after_ms` (a refused request's; `0 0 0 0` when all `n`
-- pass), then `now_ms`.

local limits = (#ARGV - 3) / 3
if limits < 1 or limits % 1 ~= 0 or #KEYS ~= limits then
  return redis.error_reply(
    'ERR rate-limit batch script: expected one key per limit, and 3 arguments plus 3 per limit'
  )
end
local n, member = tonumber(ARGV[2]), ARGV[3]
if n == nil or n < 1 or n > 100000 or n % 1 ~= 0 then
  return redis.error_reply('ERR rate-limit batch script: n must be a whole number from 1 to 100000')
end
--@include parts/clock.lua
-- Every request of a batch counts one unit: a limit with a cost is checked one request per
-- call (the peek parts below read `cost`).
local cost, cost_arg = 1, '1'

-- Phase 1: what each limit holds, and how many of the `n` it lets pass.
local k, held = n, {}
for i = 1, limits do
  local key, code = KEYS[i], ARGV[3 * i + 1]
  local max, window = tonumber(ARGV[3 * i + 2]), tonumber(ARGV[3 * i + 3])
  --@include parts/bounds.lua
  local fits
  if code == 'fw' then
    local start = now - now % window
    local field = string.format('%d', start)
    local count = (redis.call('HGET', key, field) or 0) + 0
    fits = max - count
    held[i] = { start, field, count }
  elseif code == 'sw' then
    --@include parts/sliding_window_read.lua
    local weighted = prev * (window - e)
    -- Request j passes when room = max - cur - j >= 0 and weighted <= room x window.
    fits = math.max(0, math.min(n, max - cur - math.ceil(weighted / window)))
    while fits > 0 and weighted > (max - cur - fits) * window do
      fits = fits - 1
    end
    while fits < n and max - cur - fits - 1 >= 0 and weighted <= (max - cur - fits - 1) * window do
      fits = fits + 1
    end
    held[i] = { start, field, cur, weighted, e }
  elseif code == 'sl' then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - window))
    local count = redis.call('ZCARD', key)
    fits = max - count
    held[i] = { count }
  elseif code == 'gc' then
    --@include parts/gcra_tat.lua
    fits = math.floor((tolerance - (tat - now_us)) / interval)
    held[i] = { interval, tolerance, now_us, tat }
  else
    return redis.error_reply('ERR rate-limit batch script: unknown algorithm code')
  end
  if fits < k then
    k = math.max(0, fits)
  end
end

-- Phase 2: the `k` counted in every limit, and each limit's figures after them.
local reply = { string.format('%d', k) }
for i = 1, limits do
  local key, code = KEYS[i], ARGV[3 * i + 1]
  local max, window = tonumber(ARGV[3 * i + 2]), tonumber(ARGV[3 * i + 3])
  local h = held[i]
  local passed_remaining, passed_reset
  if code == 'fw' then
    local start, field, count = h[1], h[2], h[3]
    local left = window - (now - start)
    if k > 0 and redis.call('HINCRBY', key, field, k) == k then
      local ms, oldest = left, start
      --@include parts/new_window.lua
    end
    passed_remaining, passed_reset = max - count - k, left
  elseif code == 'sw' then
    local start, field, cur, weighted, e = h[1], h[2], h[3], h[4], h[5]
    if k > 0 and redis.call('HINCRBY', key, field, k) == k then
      local ms, oldest = 2 * window - e, start - window
      --@include parts/new_window.lua
    end
    passed_remaining = max - (cur + k) - math.ceil(weighted / window)
    passed_reset = 2 * window - e
  elseif code == 'sl' then
    local count = h[1]
    if k > 0 then
      local score, args = string.format('%d', now), {}
      for j = 1, k do
        args[2 * j - 1] = score
        args[2 * j] = member .. ':' .. j
      end
      redis.call('ZADD', key, unpack(args))
      local ms = window
      --@include parts/extend.lua
    end
    passed_remaining, passed_reset = max - count - k, window
  else
    local interval, tolerance, now_us, tat = h[1], h[2], h[3], h[4]
    local new_tat = tat + k * interval
    if k > 0 then
      local ms = math.ceil((new_tat - now_us) / 1000)
      --@include parts/ttl.lua
      redis.call('SET', key, string.format('%d', new_tat), 'PX', string.format('%d', ms))
    end
    passed_remaining = math.floor((tolerance - (new_tat - now_us)) / interval)
    passed_reset = new_tat - now_us
  end
  if passed_remaining < 0 then
    passed_remaining = 0
  end
  local allowed, remaining, retry_after, reset_after, ttl, value = 0, 0, 0, 0, 0, 0
  if k < n then
    if code == 'fw' then
      --@include parts/fixed_window_peek.lua
    elseif code == 'sw' then
      --@include parts/sliding_window_peek.lua
    elseif code == 'sl' then
      --@include parts/sliding_log_peek.lua
    else
      --@include parts/gcra_peek.lua
    end
  end
  reply[i + 1] = string.format(
    '%d %d %d %d %d %d', passed_remaining, passed_reset, allowed, remaining, retry_after, reset_after
  )
end
reply[limits + 2] = string.format('%d', now)
return table.concat(reply, ' ')
