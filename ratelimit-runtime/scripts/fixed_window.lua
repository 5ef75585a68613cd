-- fixed_window.lua: one counter per window, key `<stem>:<window start ms>`.
--
-- Allowed when count < max. Up to twice the limit can pass across a window boundary.
-- A limit checked alone is decided by `fixed_window_decide` in one INCR (plus PEXPIRE for a
-- new window); a stacked limit is peeked first and counted only if every limit allows.

local function fixed_window_peek(stem, max, window, now)
  local start = rl_window_start(now, window)
  local key = stem .. ':' .. rl_int(start)
  local count = tonumber(redis.call('GET', key) or '0')
  local left = window - (now - start)
  local state = { key = key, ttl = left }
  if count < max then
    state.allowed = 1
    state.remaining = max - count - 1
    state.retry_after = 0
  else
    state.allowed = 0
    state.remaining = 0
    state.retry_after = left
  end
  state.reset_after = left
  return state
end

local function fixed_window_commit(state, window)
  if redis.call('INCR', state.key) == 1 then
    redis.call('PEXPIRE', state.key, rl_ttl(state.ttl, window))
  end
end

-- Counts first and takes the count back on rejection: one command on the allowed path
-- instead of GET then INCR. Same decision and state as peek + commit.
local function fixed_window_decide(stem, max, window, now)
  local start = rl_window_start(now, window)
  local key = stem .. ':' .. rl_int(start)
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
