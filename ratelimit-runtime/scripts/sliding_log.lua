-- sliding_log.lua: one sorted-set member per allowed request, scored by its time in ms.
--
-- The window is (now - w, now]: entries scored now - w or earlier are pruned. Allowed when
-- fewer than max remain. Rejected requests are not logged, so they do not extend a lockout.
-- retry_after is when enough of the oldest entries age out: the (count - max)-th oldest
-- (0-based) leaves the window at its score + w.

local function sliding_log_peek(stem, max, window, now)
  redis.call('ZREMRANGEBYSCORE', stem, '-inf', rl_format('%d', now - window))
  local count = redis.call('ZCARD', stem)
  if count < max then
    return 1, max - count - 1, 0, window, stem, window
  end
  local oldest = redis.call('ZRANGE', stem, count - max, count - max, 'WITHSCORES')
  local newest = redis.call('ZRANGE', stem, -1, -1, 'WITHSCORES')
  local retry_after = oldest[2] + window - now
  return 0, 0, retry_after, newest[2] + window - now, stem, window
end

local function sliding_log_commit(key, ttl, _, window, now, member)
  redis.call('ZADD', key, rl_format('%d', now), member)
  rl_extend(key, ttl, window)
end
