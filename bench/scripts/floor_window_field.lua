-- floor_window_field.lua: floor_clock.lua counting in this project's key scheme: the
-- window's count is a field (the window's start in ms on the server's clock) of the
-- limit's hash, so every key a script touches is one it declares (Redis Cluster). The most
-- a fixed window in this key scheme can decide per Redis core, with no figures answered.
--
-- KEYS[1]  the limit's hash of (route, client)
-- ARGV[1]  the window in milliseconds
-- Returns the count including this request.

local t = redis.call('TIME')
local window = tonumber(ARGV[1])
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local count = redis.call('HINCRBY', KEYS[1], string.format('%d', now - now % window), 1)
if count == 1 then
  redis.call('PEXPIRE', KEYS[1], window)
end
return count
