-- sliding_log_ahead.lua: a sliding log's peek at a time that may lie ahead of the store's
-- clock (reserve.lua): every entry logged after `now - window` counts, a reservation's
-- later entry too, so that the request fits at `now` and at every time after it. Nothing
-- is pruned: an entry older than `now - window` may still count at the store's time.
do
  local from = '(' .. string.format('%d', now - window)
  local count = redis.call('ZCOUNT', key, from, '+inf')
  ttl = window
  if count + cost <= max then
    allowed, remaining, retry_after, reset_after = 1, max - count - cost, 0, window
  else
    local rank = count + cost - max - 1
    local oldest = redis.call('ZRANGEBYSCORE', key, from, '+inf', 'WITHSCORES', 'LIMIT', rank, 1)
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    allowed, remaining = 0, 0
    retry_after = oldest[2] + window - now
    reset_after = newest[2] + window - now
  end
end
