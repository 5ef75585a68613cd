-- fixed_window.lua: one counter per window, a field `<window start ms>` of the hash at the
-- limit's key.
--
-- Allowed when count < max. Up to twice the limit can pass across a window boundary.
-- A limit checked alone is decided by `fixed_window_decide` in one HINCRBY (plus PEXPIRE
-- for a new window); a stacked limit is peeked first and counted only if every limit
-- allows.
--
-- The window start comes from the server clock, so it cannot be part of a key the caller
-- names: Redis Cluster routes a script by the keys it is given (during a slot migration a
-- key built inside the script would be looked for on the wrong node), so every key a
-- script touches is one of its KEYS and the window is a field.
--
-- Every algorithm file has the same two functions (see check.lua):
--   <algorithm>_peek(key, max, window, now)
--     -> allowed (0/1), remaining, retry_after ms, reset_after ms, key, ttl ms, value
--   <algorithm>_commit(key, ttl, value, window, now, member)
-- where key, ttl and value are what the commit writes (value: the window algorithms' field,
-- GCRA's new TAT, nil for the sliding log).

local function fixed_window_peek(key, max, window, now)
  local start = rl_floor_div(now, window) * window
  local field = rl_format('%d', start)
  local count = (redis.call('HGET', key, field) or 0) + 0
  local left = window - (now - start)
  if count < max then
    return 1, max - count - 1, 0, left, key, left, field
  end
  return 0, 0, left, left, key, left, field
end

local function fixed_window_commit(key, ttl, field, window)
  if redis.call('HINCRBY', key, field, 1) == 1 then
    rl_new_window(key, field, nil, ttl, window)
  end
end

-- Counts first and takes the count back on rejection: one command on the allowed path
-- instead of HGET then HINCRBY. Same decision and state as peek + commit.
local function fixed_window_decide(key, max, window, now)
  local start = rl_floor_div(now, window) * window
  local field = rl_format('%d', start)
  local left = window - (now - start)
  local count = redis.call('HINCRBY', key, field, 1)
  if count == 1 then
    rl_new_window(key, field, nil, left, window)
  end
  if count <= max then
    return 1, max - count, 0, left
  end
  -- count > max >= 1, so the field existed before and the key keeps its TTL.
  redis.call('HINCRBY', key, field, -1)
  return 0, 0, left, left
end
