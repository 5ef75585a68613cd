-- fixed_window.lua: one counter per window, a field `<window start ms>` of the hash at the
-- limit's key; and the script of a fixed-window limit checked alone.
--
-- Allowed when count < max. Up to twice the limit can pass across a window boundary.
-- Alone, a limit is decided by parts/fixed_window_decide.lua in one HINCRBY (plus PEXPIRE
-- for a new window); in a stack it is peeked first and counted only if every limit allows.
--
-- The window start comes from the server clock, so it cannot be part of a key the caller
-- names: Redis Cluster routes a script by the keys it is given (during a slot migration a
-- key built inside the script would be looked for on the wrong node), so every key a
-- script touches is one of its KEYS and the window is a field.
--
-- KEYS[1] the limit's key; ARGV: the time (see parts/clock.lua), max, window in ms.
-- Returns `allowed (0/1) remaining retry_after_ms reset_after_ms` (parts/reply.lua).

if #KEYS ~= 1 or #ARGV ~= 3 then
  return redis.error_reply('ERR rate-limit script: expected one key and 3 arguments')
end
local key, max, window = KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3])
--@include parts/bounds.lua
--@include parts/clock.lua
local allowed, remaining, retry_after, reset_after
--@include parts/fixed_window_decide.lua
--@include parts/reply.lua
