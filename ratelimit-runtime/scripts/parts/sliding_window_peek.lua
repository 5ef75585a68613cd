-- sliding_window_peek.lua: the estimate over this window and the previous one (formulas in
-- sliding_window.lua), read, not written. Refuses a limit whose max x window reaches 2^53,
-- past which the products below are not exact (`Limit::new` refuses it too; this catches a
-- hand-made call). Both operands are whole and below 2^32, so the comparison itself is
-- exact: a product at or above 2^53 rounds to no less than 2^53.
if max * window >= 9007199254740992 then
  return redis.error_reply(
    'ERR rate-limit script: a sliding window counts exactly only while max x window (ms) < 2^53'
  )
end
do
  local start = now - now % window
  local e = now - start
  local field = string.format('%d', start)
  local counts = redis.call('HMGET', key, field, string.format('%d', start - window))
  local cur = (counts[1] or 0) + 0
  local prev = (counts[2] or 0) + 0
  local room = max - cur - 1
  ttl, value = 2 * window - e, field
  if room >= 0 and prev * (window - e) <= room * window then
    allowed, retry_after, reset_after = 1, 0, 2 * window - e
    remaining = room - math.ceil(prev * (window - e) / window)
  else
    allowed, remaining = 0, 0
    if room >= 0 then
      -- prev > 0 here, or the request would have been allowed.
      retry_after = (window - e) - math.floor(room * window / prev)
    else
      -- cur >= max >= 1: wait for the next window, then for this count to decay.
      retry_after = (window - e) + window - math.floor((max - 1) * window / cur)
    end
    if cur > 0 then
      reset_after = 2 * window - e
    else
      reset_after = window - e
    end
  end
end
