-- sliding_log_peek.lua: prunes the entries that left the window and counts the rest
-- (formulas in sliding_log.lua). Pruning writes, but only what no later check reads.
do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - window))
  local count = redis.call('ZCARD', key)
  ttl = window
  if count < max then
    allowed, remaining, retry_after, reset_after = 1, max - count - 1, 0, window
  else
    local oldest = redis.call('ZRANGE', key, count - max, count - max, 'WITHSCORES')
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    allowed, remaining = 0, 0
    retry_after = oldest[2] + window - now
    reset_after = newest[2] + window - now
  end
end
