-- single.lua: the dispatcher of a one-limit script, which is prelude.lua, one algorithm's
-- file, a line naming that algorithm (added in `store/script.rs`) and this file:
--
--   local RL_CODE, rl_peek, rl_commit, rl_decide = '<code>', <peek>, <commit>, <decide>
--
-- where <decide> is `fixed_window_decide` (count first, take back on rejection) or nil
-- (peek, then commit when allowed). Straight-line code: no closure is made per call here.
--
-- KEYS[1] and ARGV as in check.lua, with one limit; ARGV[3] must be this script's
-- algorithm code. Returns one string of four integers, `allowed (0/1) remaining retry_after_ms
-- reset_after_ms` (see check.lua for why a string).

if #KEYS ~= 1 or #ARGV ~= 5 then
  return redis.error_reply('ERR rate-limit script: expected one key and 5 arguments')
end
if ARGV[3] ~= RL_CODE then
  return redis.error_reply(
    'ERR rate-limit script: this script checks `' .. RL_CODE .. '`, not `' .. tostring(ARGV[3]) .. '`'
  )
end
local max, window = rl_bounds(1)
if max == nil then
  return redis.error_reply(RL_BAD_BOUNDS)
end
local now = rl_now_ms()
if rl_decide ~= nil then
  return rl_format(RL_REPLY, rl_decide(KEYS[1], max, window, now))
end
local allowed, remaining, retry_after, reset_after, key, ttl, value =
  rl_peek(KEYS[1], max, window, now)
if allowed == 1 then
  rl_commit(key, ttl, value, window, now, ARGV[2])
end
return rl_format(RL_REPLY, allowed, remaining, retry_after, reset_after)
