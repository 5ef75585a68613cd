-- clock.lua: `now`, the time of this check in milliseconds, and `rl_injected`.
--
-- ARGV[1] is the injected time in milliseconds (tests), or the empty string: then the time
-- is Redis's own clock (TIME), so every app instance shares one clock.
local rl_injected = ARGV[1] ~= ''
local now
if rl_injected then
  now = tonumber(ARGV[1])
  if now == nil or now < 0 or now % 1 ~= 0 then
    return redis.error_reply(
      'ERR rate-limit script: ARGV[1] must be empty or a whole number of milliseconds'
    )
  end
else
  local t = redis.call('TIME')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
end
