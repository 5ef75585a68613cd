-- fixed_window.lua: one counter per window, key `<stem>:<window start ms>`.
--
-- Allowed when count < max. Up to twice the limit can pass across a window boundary.
-- A limit checked alone is decided by `fixed_window_decide` in one INCR (plus PEXPIRE for a
-- new window); a stacked limit is peeked first and counted only if every limit allows.
--
-- Every algorithm file has the same two functions (see check.lua):
--   <algorithm>_peek(stem, max, window, now)
--     -> allowed (0/1), remaining, retry_after ms, reset_after ms, key, ttl ms, value
--   <algorithm>_commit(key, ttl, value, window, now, member)
-- where key, ttl and value are what the commit writes (value: nil when it needs none).

local function fixed_window_peek(stem, max, window, now)
  local start = rl_floor_div(now, window) * window
  local key = stem .. ':' .. rl_format('%d', start)
  local count = (redis.call('GET', key) or 0) + 0
  local left = window - (now - start)
  if count < max then
    return 1, max - count - 1, 0, left, key, left
  end
  return 0, 0, left, left, key, left
end

local function fixed_window_commit(key, ttl, _, window)
  if redis.call('INCR', key) == 1 then
    redis.call('PEXPIRE', key, rl_ttl(ttl, window))
  end
end

-- Counts first and takes the count back on rejection: one command on the allowed path
-- instead of GET then INCR. Same decision and state as peek + commit.
local function fixed_window_decide(stem, max, window, now)
  local start = rl_floor_div(now, window) * window
  local key = stem .. ':' .. rl_format('%d', start)
  local left = window - (now - start)
  local count = redis.call('INCR', key)
  if count == 1 then
    redis.call('PEXPIRE', key, rl_ttl(left, window))
  end
  if count <= max then
    return 1, max - count, 0, left
  end
  -- count > max >= 1, so the key existed before and keeps its TTL.
  redis.call('DECR', key)
  return 0, 0, left, left
end
