-- gcra.lua: generic cell rate algorithm, one key holding the theoretical arrival time (TAT)
-- as an integer number of microseconds; and the script of a GCRA limit checked alone.
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
-- KEYS[1] the limit's key; ARGV: the time (see parts/clock.lua), max, window in ms.
-- Returns `allowed (0/1) remaining retry_after_ms reset_after_ms` (parts/reply.lua).

if #KEYS ~= 1 or #ARGV ~= 3 then
  return redis.error_reply('ERR rate-limit script: expected one key and 3 arguments')
end
local key, max, window = KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3])
--@include parts/bounds.lua
--@include parts/clock.lua
local allowed, remaining, retry_after, reset_after, ttl, value
--@include parts/gcra_peek.lua
if allowed == 1 then
  --@include parts/gcra_commit.lua
end
--@include parts/reply.lua
