-- check.lua: the dispatcher. One call decides every stacked limit of one request.
--
-- KEYS[i]  the key stem of limit i (`RouteKey::limit_key`); the window algorithms append
--          `:<window start ms>`. Every key shares one hash tag, so one Cluster slot.
-- ARGV[1]  the time in ms, or '' for Redis TIME
-- ARGV[2]  a member unique to this request (sliding log)
-- ARGV[3i], ARGV[3i+1], ARGV[3i+2]
--          limit i: algorithm code (fw, sw, sl, gc), max, window ms
--
-- Phase 1 peeks every limit; phase 2 commits every limit only when all allowed, so a
-- request rejected by one limit consumes none of the others.
-- Returns a flat array: per limit {allowed 0/1, remaining, retry_after ms, reset_after ms}.

local peeks = {
  fw = fixed_window_peek,
  sw = sliding_window_peek,
  sl = sliding_log_peek,
  gc = gcra_peek,
}
local commits = {
  fw = fixed_window_commit,
  sw = sliding_window_commit,
  sl = sliding_log_commit,
  gc = gcra_commit,
}

if #KEYS == 0 or #ARGV ~= 2 + 3 * #KEYS then
  return redis.error_reply('ERR rate-limit script: expected 2 + 3 arguments per key')
end

local now = rl_now_ms()
local member = ARGV[2]
local limits = {}
local all_allowed = true
for i = 1, #KEYS do
  local code = ARGV[3 * i]
  local max = tonumber(ARGV[3 * i + 1])
  local window = tonumber(ARGV[3 * i + 2])
  local peek = peeks[code]
  if peek == nil then
    return redis.error_reply('ERR rate-limit script: unknown algorithm `' .. tostring(code) .. '`')
  end
  if max == nil or max < 1 or window == nil or window < 1 then
    return redis.error_reply('ERR rate-limit script: max and window must be positive integers')
  end
  local state = peek(KEYS[i], max, window, now)
  limits[i] = { code = code, window = window, state = state }
  if state.allowed == 0 then
    all_allowed = false
  end
end

if all_allowed then
  for i = 1, #limits do
    local limit = limits[i]
    commits[limit.code](limit.state, limit.window, now, member)
  end
end

local reply = {}
for i = 1, #limits do
  local state = limits[i].state
  reply[#reply + 1] = state.allowed
  reply[#reply + 1] = state.remaining
  reply[#reply + 1] = state.retry_after
  reply[#reply + 1] = state.reset_after
end
return reply
