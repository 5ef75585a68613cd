-- fixed_window_peek.lua: this window's count, read, not written.
do
  local start = now - now % window
  local field = string.format('%d', start)
  local count = (redis.call('HGET', key, field) or 0) + 0
  local left = window - (now - start)
  if count + cost <= max then
    allowed, remaining, retry_after, reset_after = 1, max - count - cost, 0, left
  else
    allowed, remaining, retry_after, reset_after = 0, 0, left, left
  end
  ttl, value = left, field
end
