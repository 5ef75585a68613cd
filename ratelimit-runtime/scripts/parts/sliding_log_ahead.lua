-- sliding_log_ahead.lua: a sliding log's peek at a time that may lie ahead of the store's
-- clock (reserve.lua): an entry logged at `now` counts in every window that ends from `now`
-- to `now + window`, so the entries in `(now - window, now + window)` count, a later
-- reservation's too: the request fits then at `now` and at every time after it. Nothing is
-- pruned: an entry older than `now - window` may still count at the store's time.
do
  local from = '(' .. string.format('%d', now - window)
  local to = '(' .. string.format('%d', now + window)
  local count = redis.call('ZCOUNT', key, from, to)
  ttl = window
  if count + cost <= max then
    allowed, remaining, retry_after, reset_after = 1, max - count - cost, 0, window
  else
    local rank = count + cost - max - 1
    local oldest = redis.call('ZRANGEBYSCORE', key, from, to, 'WITHSCORES', 'LIMIT', rank, 1)
    local newest = redis.call('ZREVRANGEBYSCORE', key, to, from, 'WITHSCORES', 'LIMIT', 0, 1)
    allowed, remaining = 0, 0
    retry_after = oldest[2] + window - now
    reset_after = newest[2] + window - now
  end
end
