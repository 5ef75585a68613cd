-- fixed_window.lua: one counter per window, a field `<window start ms>` of the hash at the
-- limit's key; and the script of a fixed-window limit checked alone.
--
-- Allowed when count + cost <= max (a request counts `cost` units, 1 unless given). Up to twice the limit can pass across a window boundary.
-- Alone, a limit is decided by parts/fixed_window_decide.lua in one HINCRBY (plus PEXPIRE
-- for a new window); in a stack it is peeked first and counted only if every limit allows.
--
-- The window start comes from the server clock, so it cannot be part of a key the caller
-- names: Redis Cluster routes a script by the keys it is given (during a slot migration a
-- key built inside the script would be looked for on the wrong node), so every key a
-- script touches is one of its KEYS and the window is a field.
--
-- KEYS[1] the limit's key; ARGV: the time (see parts/clock.lua), max, window in ms.
-- KEYS[2], with the block in ms as the next argument: the limit's lockout key (`block`).
-- Then the request's cost in units (`Limit::costing`), when it is not 1.
-- Returns `allowed (0/1) remaining retry_after_ms reset_after_ms now_ms` (parts/reply.lua).

local extra = #ARGV - #KEYS - 2
if #KEYS < 1 or #KEYS > 2 or (extra ~= 0 and extra ~= 1) then
  return redis.error_reply('ERR rate-limit script: expected one key and 3 arguments, or two and 4, then the cost or nothing')
end
local key, max, window = KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local bkey = KEYS[2]
local block = bkey and tonumber(ARGV[4])
--@include parts/bounds.lua
--@include parts/cost_arg.lua
--@include parts/block_bounds.lua
--@include parts/clock.lua
--@include parts/block_peek.lua
local allowed, remaining, retry_after, reset_after
if blocked_for > 0 then
  allowed, remaining, retry_after, reset_after = 0, 0, blocked_for, blocked_for
else
  --@include parts/fixed_window_decide.lua
  if allowed == 0 and bkey then
    --@include parts/block_start.lua
  end
end
--@include parts/reply.lua
