-- check.lua: the general script, which decides any stack of limits in one call. (A limit
-- checked alone goes to its algorithm's own script, e.g. fixed_window.lua.)
--
-- KEYS[i]  the key of limit i (`RouteKey::limit_key`), i = 1..n; the window algorithms keep
--          a hash there, one field per window start. Then the lockout key of each limit
--          with a block, in the limits' order. Every key shares one hash tag, so one
--          Cluster slot, and no other key is touched.
-- ARGV[1]  the time in ms, or '' for Redis TIME (parts/clock.lua)
-- ARGV[2]  a member unique to this request (sliding log), or '' when no limit is a log
-- ARGV[4i-1], ARGV[4i], ARGV[4i+1], ARGV[4i+2]
--          limit i: algorithm code (fw, sw, sl, gc), max, window ms, block ms (0: none)
--
-- Phase 1 peeks every limit (a limit whose lockout holds refuses without a peek); phase 2
-- commits every limit only when all allowed, so a request rejected by one limit consumes
-- none of the others. When one refused, each limit with a block that refused by its own
-- count locks the client out (parts/block_start.lua).
-- Returns one string of integers separated by spaces, four per limit in order: `allowed (0/1)
-- remaining retry_after_ms reset_after_ms`, then the time of the check in ms. A string, not
-- an array of integers: Redis builds either at the same cost, and the client reads one
-- string for far less than an array (its RESP parser handles every element on its own;
-- BENCHMARKS.md, section 6).

local n = (#ARGV - 2) / 4
if n < 1 or n % 1 ~= 0 or #KEYS < n then
  return redis.error_reply('ERR rate-limit script: expected 2 + 4 arguments per limit')
end
--@include parts/clock.lua
local member = ARGV[2]
local reply = {}
-- Per limit: its window, what its commit writes, its lockout key and block, and whether
-- it refused by its own count.
local windows, ttls, values, bkeys, blocks, refused, resets = {}, {}, {}, {}, {}, {}, {}
local next_bkey = n + 1
local all_allowed = true
for i = 1, n do
  local key, code = KEYS[i], ARGV[4 * i - 1]
  local max, window, block = tonumber(ARGV[4 * i]), tonumber(ARGV[4 * i + 1]), tonumber(ARGV[4 * i + 2])
  local bkey = nil
  if block ~= 0 then
    bkey = KEYS[next_bkey]
    next_bkey = next_bkey + 1
  end
  --@include parts/bounds.lua
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
  windows[i], ttls[i], values[i], bkeys[i], blocks[i] = window, ttl, value, bkey, block
  resets[i] = reset_after
  refused[i] = allowed == 0 and blocked_for == 0
  if allowed == 0 then
    all_allowed = false
  end
end
if next_bkey ~= #KEYS + 1 then
  return redis.error_reply('ERR rate-limit script: expected one lockout key per limit with a block')
end

if all_allowed then
  for i = 1, n do
    local key, code, window, ttl, value = KEYS[i], ARGV[4 * i - 1], windows[i], ttls[i], values[i]
    if code == 'fw' then
      --@include parts/fixed_window_commit.lua
    elseif code == 'sw' then
      --@include parts/sliding_window_commit.lua
    elseif code == 'sl' then
      --@include parts/sliding_log_commit.lua
    else
      --@include parts/gcra_commit.lua
    end
  end
else
  for i = 1, n do
    if refused[i] and bkeys[i] then
      local key, bkey, block = KEYS[i], bkeys[i], blocks[i]
      local retry_after, reset_after = nil, resets[i]
      --@include parts/block_start.lua
      reply[i] = string.format('0 0 %d %d', retry_after, reset_after)
    end
  end
end

reply[n + 1] = string.format('%d', now)
return table.concat(reply, ' ')
