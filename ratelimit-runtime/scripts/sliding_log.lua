-- sliding_log.lua: one sorted-set member per allowed request, scored by its time in ms.
--
-- The window is (now - w, now]: entries scored now - w or earlier are pruned. Allowed when
-- fewer than max remain. Rejected requests are not logged, so they do not extend a lockout.
-- retry_after is when enough of the oldest entries age out: the (count - max)-th oldest
-- (0-based) leaves the window at its score + w.

local function sliding_log_peek(stem, max, window, now)
  redis.call('ZREMRANGEBYSCORE', stem, '-inf', rl_int(now - window))
  local count = redis.call('ZCARD', stem)
  local state = { key = stem }
  if count < max then
    state.allowed = 1
    state.remaining = max - count - 1
    state.retry_after = 0
    state.reset_after = window
    return state
  end
  local oldest = redis.call('ZRANGE', stem, count - max, count - max, 'WITHSCORES')
  local newest = redis.call('ZRANGE', stem, -1, -1, 'WITHSCORES')
  state.allowed = 0
  state.remaining = 0
  state.retry_after = tonumber(oldest[2]) + window - now
  state.reset_after = tonumber(newest[2]) + window - now
  return state
end

local function sliding_log_commit(state, window, now, member)
  redis.call('ZADD', state.key, rl_int(now), member)
  redis.call('PEXPIRE', state.key, rl_ttl(window, window))
end
