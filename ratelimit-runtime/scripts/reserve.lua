-- reserve.lua: a request that may wait for its turn (`wait` on the route): the earliest
-- time, from now to now + wait, at which every limit of the stack lets it in, and the
-- request counted at that time, as if it arrived then. Nothing is counted when no such
-- time is found: the request is refused as a check would refuse it.
--
-- KEYS[i]  the key of limit i (`RouteKey::limit_key`), i = 1..n; no lockout keys (a route
--          that waits has no `block`). Every key shares one hash tag.
-- ARGV[1]  the time in ms, or '' for Redis TIME (parts/clock.lua)
-- ARGV[2]  a member unique to this request (sliding log), or '' when no limit is a log
-- ARGV[4i-1] .. ARGV[4i+2]
--          limit i as in check.lua: algorithm code (with `:` and its cost when not 1),
--          max, window ms, block ms (always 0 here)
-- ARGV[#ARGV]  the longest wait in ms
--
-- The search: each limit answers, at a time `at`, whether it lets the request in and, when
-- not, how long until it would (its peek at `at`, which counts what was reserved for later
-- times: a window's later counter, GCRA's arrival time, a log's later entries); `at` moves
-- to the latest such time, until every limit lets the request in, the wait is exceeded or
-- 1024 moves were made (a fixed window moves one window at a time). Each move is to a time
-- no limit could allow earlier, so the time found is the earliest.
-- Returns what check.lua returns, four integers per limit and the time of the call, then
-- the time the request was counted at (its turn; the time of the call when it need not
-- wait). Refused, each limit's figures count from the time of the call: retry_after is
-- when the request could have been counted, however long that is.

local n = (#ARGV - 3) / 4
if n < 1 or n % 1 ~= 0 or #KEYS ~= n then
  return redis.error_reply('ERR rate-limit script: expected 3 + 4 arguments per limit')
end
--@include parts/clock.lua
local member = ARGV[2]
local wait = tonumber(ARGV[#ARGV])
if wait == nil or wait < 0 or wait % 1 ~= 0 then
  return redis.error_reply('ERR rate-limit script: the wait must be a whole number of ms')
end
for i = 1, n do
  local code, max, window, cost = ARGV[4 * i - 1], tonumber(ARGV[4 * i]), tonumber(ARGV[4 * i + 1]), 1
  --@include parts/cost_code.lua
  --@include parts/bounds.lua
  --@include parts/cost_bounds.lua
  if ARGV[4 * i + 2] ~= '0' then
    return redis.error_reply('ERR rate-limit script: a request that waits has no lockout')
  end
  if code ~= 'fw' and code ~= 'sw' and code ~= 'sl' and code ~= 'gc' then
    return redis.error_reply('ERR rate-limit script: unknown algorithm `' .. tostring(code) .. '`')
  end
end
local figures, state = {}, {}
local at, tried, moves, all_allowed = now, now, 0, false
while true do
  all_allowed = true
  local later = at
  for i = 1, n do
    local key, code = KEYS[i], ARGV[4 * i - 1]
    local max, window, cost = tonumber(ARGV[4 * i]), tonumber(ARGV[4 * i + 1]), 1
    --@include parts/cost_code.lua
    local allowed, remaining, retry_after, reset_after, ttl, value
    do
      local now = at
      if code == 'fw' then
        --@include parts/fixed_window_peek.lua
      elseif code == 'sw' then
        --@include parts/sliding_window_peek.lua
      elseif code == 'sl' then
        --@include parts/sliding_log_ahead.lua
      else
        --@include parts/gcra_peek.lua
      end
    end
    figures[4 * i - 3], figures[4 * i - 2], figures[4 * i - 1], figures[4 * i] =
      allowed, remaining, retry_after, reset_after
    state[2 * i - 1], state[2 * i] = ttl, value
    if allowed == 0 then
      all_allowed = false
      if at + retry_after > later then
        later = at + retry_after
      end
    end
  end
  tried = at
  moves = moves + 1
  if all_allowed or later - now > wait or moves >= 1024 then
    break
  end
  at = later
end

if all_allowed then
  -- Counted at `at`: each key lives as long as a count at that time needs, from now; the
  -- counters and log entries that still count now stay.
  local delay = at - now
  for i = 1, n do
    local key, code = KEYS[i], ARGV[4 * i - 1]
    local window, cost, cost_arg = tonumber(ARGV[4 * i + 1]), 1, '1'
    if #code > 2 then
      cost_arg = string.sub(code, 4)
      cost, code = tonumber(cost_arg), string.sub(code, 1, 2)
    end
    local ttl, value = state[2 * i - 1] + delay, state[2 * i]
    if code == 'fw' or code == 'sw' then
      if redis.call('HINCRBY', key, value, cost_arg) == cost then
        local ms, oldest = ttl, now - now % window
        if code == 'sw' then
          oldest = oldest - window
        end
        --@include parts/new_window.lua
      end
    elseif code == 'sl' then
      redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - window))
      do
        local now = at
        --@include parts/sliding_log_commit.lua
      end
    else
      --@include parts/gcra_commit.lua
    end
  end
else
  -- Figures from the time of the call.
  local shift = tried - now
  for i = 1, n do
    if figures[4 * i - 3] == 0 then
      figures[4 * i - 1] = figures[4 * i - 1] + shift
    end
    figures[4 * i] = figures[4 * i] + shift
  end
  at = now
end
figures[4 * n + 1], figures[4 * n + 2] = now, at
return string.format(string.rep('%d ', 4 * n + 1) .. '%d', unpack(figures, 1, 4 * n + 2))
