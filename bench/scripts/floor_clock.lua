-- floor_clock.lua: the floor (floor.lua) reading the Redis server's clock first, as the
-- specification has every check do ("read time with TIME inside the script"): the most a
-- limiter on the shared clock can decide per Redis core. The time is read and not used.
--
-- KEYS[1]  the counter of (route, client)
-- ARGV[1]  the window in milliseconds
-- Returns the count including this request.

redis.call('TIME')
local count = redis.call('INCR', KEYS[1])
if count == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return count
