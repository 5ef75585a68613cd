-- floor.lua: the least a Redis rate limiter can do per request, one fixed-window counter.
--
-- KEYS[1]  the counter of (route, client)
-- ARGV[1]  the window in milliseconds
-- Returns the count including this request; the caller compares it with the limit.

local count = redis.call('INCR', KEYS[1])
if count == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return count
