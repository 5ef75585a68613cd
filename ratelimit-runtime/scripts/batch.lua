-- batch.lua: `n` concurrent requests of one client under one limit, decided in one call:
-- the first `k` of them pass (counted as `k` single checks in a row would count them), the
-- others are refused. The store sends this when requests for one key wait for a check in
-- flight; a request alone goes through its algorithm's own script.
--
-- Per algorithm, with `k` the most of the `n` that fit:
--   fixed window    k = min(n, max - count)
--   sliding window  k = min(n, max - cur - ceil(prev x (window - e) / window)), checked
--                   exactly as sliding_window_peek.lua compares
--   sliding log     k = min(n, max - entries), k members `<member>:<i>`
--   GCRA            k = min(n, floor((tau - (TAT - now)) / T))
-- remaining is what is left after the k (never below 0, also when an override lowered max
-- under a count already higher); retry_after and reset_after are what a single request
-- arriving after them would be told (0 retry when all n pass).
--
-- KEYS[1] the limit's key; ARGV: the time (see parts/clock.lua), max, window in ms,
-- algorithm code (fw, sw, sl, gc), n (1 to 100000), the member prefix (sliding log).
-- Returns `k remaining retry_after_ms reset_after_ms now_ms`.

if #KEYS ~= 1 or #ARGV ~= 6 then
  return redis.error_reply('ERR rate-limit batch script: expected one key and 6 arguments')
end
local key, max, window, code, n, member =
  KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5]), ARGV[6]
--@include parts/bounds.lua
if n == nil or n < 1 or n > 100000 or n % 1 ~= 0 then
  return redis.error_reply('ERR rate-limit batch script: n must be a whole number from 1 to 100000')
end
--@include parts/clock.lua
local k, remaining, retry_after, reset_after = 0, 0, 0, 0
if code == 'fw' then
  local start = now - now % window
  local field = string.format('%d', start)
  local left = window - (now - start)
  local count = (redis.call('HGET', key, field) or 0) + 0
  k = math.max(0, math.min(n, max - count))
  if k > 0 and redis.call('HINCRBY', key, field, k) == k then
    local ms, oldest = left, start
    --@include parts/new_window.lua
  end
  remaining, reset_after = math.max(0, max - count - k), left
  if k < n then
    retry_after = left
  end
elseif code == 'sw' then
  --@include parts/sliding_window_read.lua
  local weighted = prev * (window - e)
  -- Request j passes when room = max - cur - j >= 0 and weighted <= room x window.
  k = math.max(0, math.min(n, max - cur - math.ceil(weighted / window)))
  while k > 0 and weighted > (max - cur - k) * window do
    k = k - 1
  end
  while k < n and max - cur - k - 1 >= 0 and weighted <= (max - cur - k - 1) * window do
    k = k + 1
  end
  if k > 0 and redis.call('HINCRBY', key, field, k) == k then
    local ms, oldest = 2 * window - e, start - window
    --@include parts/new_window.lua
  end
  cur = cur + k
  if k > 0 then
    remaining = max - cur - math.ceil(weighted / window)
    if remaining < 0 then
      remaining = 0
    end
  end
  if k < n then
    local room = max - cur - 1
    if room >= 0 then
      retry_after = (window - e) - math.floor(room * window / prev)
    else
      retry_after = (window - e) + window - math.floor((max - 1) * window / cur)
    end
  end
  if cur > 0 then
    reset_after = 2 * window - e
  else
    reset_after = window - e
  end
elseif code == 'sl' then
  redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - window))
  local count = redis.call('ZCARD', key)
  k = math.max(0, math.min(n, max - count))
  if k > 0 then
    local score, args = string.format('%d', now), {}
    for i = 1, k do
      args[2 * i - 1] = score
      args[2 * i] = member .. ':' .. i
    end
    redis.call('ZADD', key, unpack(args))
    local ms = window
    --@include parts/extend.lua
  end
  count = count + k
  remaining, reset_after = math.max(0, max - count), window
  if k < n then
    local oldest = redis.call('ZRANGE', key, count - max, count - max, 'WITHSCORES')
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    retry_after = oldest[2] + window - now
    reset_after = newest[2] + window - now
  end
elseif code == 'gc' then
  --@include parts/gcra_tat.lua
  k = math.max(0, math.min(n, math.floor((tolerance - (tat - now_us)) / interval)))
  local new_tat = tat + k * interval
  if k > 0 then
    local ms = math.ceil((new_tat - now_us) / 1000)
    --@include parts/ttl.lua
    redis.call('SET', key, string.format('%d', new_tat), 'PX', string.format('%d', ms))
  end
  remaining = math.max(0, math.floor((tolerance - (new_tat - now_us)) / interval))
  reset_after = math.ceil((new_tat - now_us) / 1000)
  if k < n then
    retry_after = math.ceil((new_tat + interval - tolerance - now_us) / 1000)
  end
else
  return redis.error_reply('ERR rate-limit batch script: unknown algorithm code')
end
return string.format('%d %d %d %d %d', k, remaining, retry_after, reset_after, now)
