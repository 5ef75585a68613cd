-- sliding_log_peek.lua: prunes the entries that left the window and counts the rest
-- (formulas in sliding_log.lua). Pruning writes, but only what no later check reads.
do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - window))
  local count = redis.call('ZCARD', key)
  ttl = window
  if count + cost <= max then
    allowed, remaining, retry_after, reset_after = 1, max - count - cost, 0, window
  else
    local rank = count + cost - max - 1
    local oldest = redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    allowed, remaining = 0, 0
    retry_after = oldest[2] + window - now
    reset_after = newest[2] + window - now
  end
end
