-- sliding_window.lua: current and previous window counters, fields `<window start ms>` of
-- the hash at the limit's key (see fixed_window.lua for why fields, not keys).
--
-- With e = now - start of the current window, w the window, prev and cur the two counts:
--
--   estimate = prev * (w - e) / w + cur
--
-- A request is allowed when estimate + 1 <= max, checked exactly in integers as
--
--   prev * (w - e) <= (max - cur - 1) * w
--
-- (exact while max * w < 2^53, e.g. a million requests per 31 days).
-- retry_after is the first millisecond at which that holds again if nothing else arrives:
-- still in this window when the weighted previous count decays enough, else in the next
-- window, where this window's count is the weighted previous one.
-- reset_after is when the counted requests stop counting: the end of the next window for
-- this window's count, the end of this window for the previous one's.

local function sliding_window_peek(key, max, window, now)
  local start = rl_floor_div(now, window) * window
  local e = now - start
  local field = rl_format('%d', start)
  local counts = redis.call('HMGET', key, field, rl_format('%d', start - window))
  local cur = (counts[1] or 0) + 0
  local prev = (counts[2] or 0) + 0
  local room = max - cur - 1
  local ttl = 2 * window - e
  if room >= 0 and prev * (window - e) <= room * window then
    return 1, room - rl_ceil_div(prev * (window - e), window), 0, 2 * window - e, key, ttl, field
  end
  local retry_after
  if room >= 0 then
    -- prev > 0 here, or the request would have been allowed.
    retry_after = (window - e) - rl_floor_div(room * window, prev)
  else
    -- cur >= max >= 1: wait for the next window, then for this count to decay.
    retry_after = (window - e) + window - rl_floor_div((max - 1) * window, cur)
  end
  if cur > 0 then
    return 0, 0, retry_after, 2 * window - e, key, ttl, field
  end
  return 0, 0, retry_after, window - e, key, ttl, field
end

local function sliding_window_commit(key, ttl, field, window)
  if redis.call('HINCRBY', key, field, 1) == 1 then
    -- This counter is read again as the previous window: keep the key to the end of the
    -- next window.
    rl_new_window(key, field, rl_format('%d', field - window), ttl, window)
  end
end
