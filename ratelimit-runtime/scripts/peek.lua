-- peek.lua: what a check would answer now, without counting: the check's first phase
-- (parts/*_peek.lua and the lockout peek) for any stack of limits, and no commit. For the
-- admin command's view of one client's budget; never on the request path.
--
-- KEYS and ARGV as check.lua's: the limit keys, then the lockout key of each limit with a
-- block; ARGV[1] the time in ms or '', ARGV[2] '' (no member: nothing is logged), then four
-- per limit: algorithm code (with `:` and the cost when it is not 1), max, window ms, block
-- ms.
-- Returns what check.lua returns: four integers per limit, `allowed remaining retry_after_ms
-- reset_after_ms` (remaining once one more request counted), then the time in ms. Peeking
-- prunes what left a window, which no later check reads; it counts nothing.

local n = (#ARGV - 2) / 4
if n < 1 or n % 1 ~= 0 or #KEYS < n then
  return redis.error_reply('ERR rate-limit script: expected 2 + 4 arguments per limit')
end
--@include parts/clock.lua
local reply = {}
local next_bkey = n + 1
for i = 1, n do
  local key, code = KEYS[i], ARGV[4 * i - 1]
  local max, window, block = tonumber(ARGV[4 * i]), tonumber(ARGV[4 * i + 1]), tonumber(ARGV[4 * i + 2])
  local cost = 1
  --@include parts/cost_code.lua
  local bkey = nil
  if block ~= 0 then
    bkey = KEYS[next_bkey]
    next_bkey = next_bkey + 1
  end
  --@include parts/bounds.lua
  --@include parts/cost_bounds.lua
  --@include parts/block_bounds.lua
  --@include parts/block_peek.lua
  local allowed, remaining, retry_after, reset_after, ttl, value
  if blocked_for > 0 then
    allowed, remaining, retry_after, reset_after = 0, 0, blocked_for, blocked_for
  elseif code == 'fw' then
    --@include parts/fixed_window_peek.lua
  elseif code == 'sw' then
    --@include parts/sliding_window_peek.lua
  elseif code == 'sl' then
    --@include parts/sliding_log_peek.lua
  elseif code == 'gc' then
    --@include parts/gcra_peek.lua
  else
    return redis.error_reply('ERR rate-limit script: unknown algorithm `' .. tostring(code) .. '`')
  end
  reply[i] = string.format('%d %d %d %d', allowed, remaining, retry_after, reset_after)
end
reply[n + 1] = string.format('%d', now)
return table.concat(reply, ' ')
