-- check.lua: the general script, which decides any stack of limits in one call. (A limit
-- checked alone goes to its algorithm's own script, e.g. fixed_window.lua.)
--
-- KEYS[i]  the key of limit i (`RouteKey::limit_key`); the window algorithms keep a hash
--          there, one field per window start. Every key shares one hash tag, so one
--          Cluster slot, and no other key is touched.
-- ARGV[1]  the time in ms, or '' for Redis TIME (parts/clock.lua)
-- ARGV[2]  a member unique to this request (sliding log), or '' when no limit is a log
-- ARGV[3i], ARGV[3i+1], ARGV[3i+2]
--          limit i: algorithm code (fw, sw, sl, gc), max, window ms
--
-- Phase 1 peeks every limit; phase 2 commits every limit only when all allowed, so a
-- request rejected by one limit consumes none of the others.
-- Returns one string of integers separated by spaces, four per limit in order: `allowed (0/1)
-- remaining retry_after_ms reset_after_ms`. A string, not an array of integers: Redis
-- builds either at the same cost, and the client reads one string for far less than an
-- array (its RESP parser handles every element on its own; BENCHMARKS.md, section 6).

if #KEYS == 0 or #ARGV ~= 2 + 3 * #KEYS then
  return redis.error_reply('ERR rate-limit script: expected 2 + 3 arguments per key')
end
--@include parts/clock.lua
local member = ARGV[2]
local reply = {}
-- Per limit: its window and what its commit writes.
local windows, ttls, values = {}, {}, {}
local all_allowed = true
for i = 1, #KEYS do
  local key, code, max, window = KEYS[i], ARGV[3 * i], tonumber(ARGV[3 * i + 1]), tonumber(ARGV[3 * i + 2])
  --@include parts/bounds.lua
  local allowed, remaining, retry_after, reset_after, ttl, value
  if code == 'fw' then
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
  windows[i], ttls[i], values[i] = window, ttl, value
  if allowed == 0 then
    all_allowed = false
  end
end

if all_allowed then
  for i = 1, #KEYS do
    local key, code, window, ttl, value = KEYS[i], ARGV[3 * i], windows[i], ttls[i], values[i]
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
end

return table.concat(reply, ' ')
