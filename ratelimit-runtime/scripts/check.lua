-- check.lua: the dispatcher of the general script, which decides any stack of limits in
-- one call. (A limit checked alone goes to its algorithm's own script, see single.lua.)
--
-- KEYS[i]  the key of limit i (`RouteKey::limit_key`); the window algorithms keep a hash
--          there, one field per window start. Every key shares one hash tag, so one
--          Cluster slot, and no other key is touched.
-- ARGV[1]  the time in ms, or '' for Redis TIME
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

local now = rl_now_ms()
local reply = {}
-- Per limit: its commit function, window, and what the commit writes.
local commits, windows, keys, ttls, values = {}, {}, {}, {}, {}
local all_allowed = true
for i = 1, #KEYS do
  local code = ARGV[3 * i]
  local peek, commit
  if code == 'sw' then
    peek, commit = sliding_window_peek, sliding_window_commit
  elseif code == 'fw' then
    peek, commit = fixed_window_peek, fixed_window_commit
  elseif code == 'gc' then
    peek, commit = gcra_peek, gcra_commit
  elseif code == 'sl' then
    peek, commit = sliding_log_peek, sliding_log_commit
  else
    return redis.error_reply('ERR rate-limit script: unknown algorithm `' .. tostring(code) .. '`')
  end
  local max, window = rl_bounds(i)
  if max == nil then
    return redis.error_reply(RL_BAD_BOUNDS)
  end
  local allowed, remaining, retry_after, reset_after, key, ttl, value =
    peek(KEYS[i], max, window, now)
  reply[i] = rl_format(RL_REPLY, allowed, remaining, retry_after, reset_after)
  commits[i], windows[i], keys[i], ttls[i], values[i] = commit, window, key, ttl, value
  if allowed == 0 then
    all_allowed = false
  end
end

if all_allowed then
  local member = ARGV[2]
  for i = 1, #KEYS do
    commits[i](keys[i], ttls[i], values[i], windows[i], now, member)
  end
end

return table.concat(reply, ' ')
