-- check.lua: the dispatcher of the general script, which decides any stack of limits in
-- one call. (A limit checked alone goes to its algorithm's own script, see single.lua.)
--
-- KEYS[i]  the key stem of limit i (`RouteKey::limit_key`); the window algorithms append
--          `:<window start ms>`. Every key shares one hash tag, so one Cluster slot.
-- ARGV[1]  the time in ms, or '' for Redis TIME
-- ARGV[2]  a member unique to this request (sliding log), or '' when no limit is a log
-- ARGV[3i], ARGV[3i+1], ARGV[3i+2]
--          limit i: algorithm code (fw, sw, sl, gc), max, window ms
--
-- Phase 1 peeks every limit; phase 2 commits every limit only when all allowed, so a
-- request rejected by one limit consumes none of the others.
-- Returns a flat array: per limit {allowed 0/1, remaining, retry_after ms, reset_after ms}.
--
-- Redis runs this whole chunk on every call, defining every function anew: no dispatch
-- tables on top.

if #KEYS == 0 or #ARGV ~= 2 + 3 * #KEYS then
  return redis.error_reply('ERR rate-limit script: expected 2 + 3 arguments per key')
end

-- The peek and commit functions of an algorithm code, or nil for an unknown code.
local function algorithm(code)
  if code == 'sw' then
    return sliding_window_peek, sliding_window_commit
  elseif code == 'fw' then
    return fixed_window_peek, fixed_window_commit
  elseif code == 'gc' then
    return gcra_peek, gcra_commit
  elseif code == 'sl' then
    return sliding_log_peek, sliding_log_commit
  end
  return nil
end

-- Limit i's peek, commit, max and window, or an error reply.
local function limit_args(i)
  local code = ARGV[3 * i]
  local peek, commit = algorithm(code)
  if peek == nil then
    return redis.error_reply('ERR rate-limit script: unknown algorithm `' .. tostring(code) .. '`')
  end
  local max, window = rl_bounds(i)
  if max == nil then
    return redis.error_reply(RL_BAD_BOUNDS)
  end
  return nil, peek, commit, max, window
end

local now = rl_now_ms()
local member = ARGV[2]
local limits = {}
local all_allowed = true
for i = 1, #KEYS do
  local err, peek, commit, max, window = limit_args(i)
  if err then
    return err
  end
  local state = peek(KEYS[i], max, window, now)
  limits[i] = { commit = commit, window = window, state = state }
  if state.allowed == 0 then
    all_allowed = false
  end
end

if all_allowed then
  for i = 1, #limits do
    local limit = limits[i]
    limit.commit(limit.state, limit.window, now, member)
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
