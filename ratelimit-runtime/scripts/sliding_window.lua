-- sliding_window.lua: current and previous window counters, keys `<stem>:<window start ms>`.
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

local function sliding_window_peek(stem, max, window, now)
  local start = rl_window_start(now, window)
  local e = now - start
  local key = stem .. ':' .. rl_int(start)
  local counts = redis.call('MGET', key, stem .. ':' .. rl_int(start - window))
  local cur = tonumber(counts[1] or '0')
  local prev = tonumber(counts[2] or '0')
  local room = max - cur - 1
  local state = { key = key, ttl = 2 * window - e }
  if room >= 0 and prev * (window - e) <= room * window then
    state.allowed = 1
    state.remaining = room - rl_ceil_div(prev * (window - e), window)
    state.retry_after = 0
    state.reset_after = 2 * window - e
    return state
  end
  state.allowed = 0
  state.remaining = 0
  if room >= 0 then
    -- prev > 0 here, or the request would have been allowed.
    state.retry_after = (window - e) - rl_floor_div(room * window, prev)
  else
    -- cur >= max >= 1: wait for the next window, then for this count to decay.
    state.retry_after = (window - e) + window - rl_floor_div((max - 1) * window, cur)
  end
  if cur > 0 then
    state.reset_after = 2 * window - e
  else
    state.reset_after = window - e
  end
  return state
end

local function sliding_window_commit(state, window)
  if redis.call('INCR', state.key) == 1 then
    -- This counter is read again as the previous window: keep it to the end of the next.
    redis.call('PEXPIRE', state.key, rl_ttl(state.ttl, window))
  end
end
