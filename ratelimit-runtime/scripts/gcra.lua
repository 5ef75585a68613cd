-- gcra.lua: generic cell rate algorithm, one key holding the theoretical arrival time (TAT)
-- as an integer number of microseconds.
--
-- Emission interval T = floor(w * 1000 / max) microseconds (at least 1), burst tolerance
-- tau = T * max, so a burst from idle allows exactly max requests; the window is thus
-- rounded down to a whole multiple of max microseconds (off by less than one microsecond
-- per request; a limit that this would change by more than 1 % is refused before it gets
-- here, see `Limit::new`).
--
--   tat      = max(stored TAT, now)
--   new_tat  = tat + T
--   allowed  when new_tat - now <= tau
--   remaining    = floor((tau - (new_tat - now)) / T)
--   retry_after  = new_tat - tau - now (rejected), rounded up to ms
--   reset_after  = TAT after the decision - now, rounded up to ms
--
-- The TAT is written with string.format('%d'): tostring would keep only 14 digits.

local function gcra_peek(stem, max, window, now)
  local interval = rl_floor_div(window * 1000, max)
  if interval < 1 then
    interval = 1
  end
  local tolerance = interval * max
  local now_us = now * 1000
  local tat = (redis.call('GET', stem) or 0) + 0
  if tat < now_us then
    tat = now_us
  end
  local new_tat = tat + interval
  local ttl = rl_ceil_div(new_tat - now_us, 1000)
  if new_tat - now_us <= tolerance then
    local remaining = rl_floor_div(tolerance - (new_tat - now_us), interval)
    return 1, remaining, 0, ttl, stem, ttl, new_tat
  end
  local retry_after = rl_ceil_div(new_tat - tolerance - now_us, 1000)
  return 0, 0, retry_after, rl_ceil_div(tat - now_us, 1000), stem, ttl, new_tat
end

local function gcra_commit(key, ttl, new_tat, window)
  redis.call('SET', key, rl_format('%d', new_tat), 'PX', rl_format('%d', rl_ttl_ms(ttl, window)))
end
