-- floor_headers.lua: floor.lua answering what a limiter's five rate-limit headers need: the
-- count including this request, and the milliseconds until the window ends (the counter's
-- TTL), as one string of two integers (as this project's scripts answer).
--
-- KEYS[1]  the counter of (route, client)
-- ARGV[1]  the window in milliseconds
-- Returns `count ttl_ms`.

local count = redis.call('INCR', KEYS[1])
if count == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return count .. ' ' .. ARGV[1]
end
return count .. ' ' .. redis.call('PTTL', KEYS[1])
