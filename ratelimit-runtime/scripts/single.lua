-- single.lua: the dispatcher of a one-limit script, which is prelude.lua, one algorithm's
-- file and this file, ended by `return rl_single('<code>', <decide>)` (added in
-- `store/script.rs`). Redis runs the whole chunk on every call, so only that algorithm's
-- functions are defined per call, not all four.
--
-- <decide> is `fixed_window_decide` (count first, take back on rejection) or
-- `rl_decider(<algorithm>_peek, <algorithm>_commit)`.
--
-- KEYS[1] and ARGV as in check.lua, with one limit; ARGV[3] must be this script's
-- algorithm code. Returns {allowed 0/1, remaining, retry_after ms, reset_after ms}.

-- The decide function of a limit checked alone, from its peek and commit: peek, then count
-- the request when it is allowed. Returns allowed (0/1), remaining, retry_after ms,
-- reset_after ms.
local function rl_decider(peek, commit)
  return function(stem, max, window, now, member)
    local state = peek(stem, max, window, now)
    if state.allowed == 1 then
      commit(state, window, now, member)
    end
    return state.allowed, state.remaining, state.retry_after, state.reset_after
  end
end

local function rl_single(code, decide)
  if #KEYS ~= 1 or #ARGV ~= 5 then
    return redis.error_reply('ERR rate-limit script: expected one key and 5 arguments')
  end
  if ARGV[3] ~= code then
    return redis.error_reply(
      'ERR rate-limit script: this script checks `' .. code .. '`, not `' .. tostring(ARGV[3]) .. '`'
    )
  end
  local max, window = rl_bounds(1)
  if max == nil then
    return redis.error_reply(RL_BAD_BOUNDS)
  end
  return { decide(KEYS[1], max, window, rl_now_ms(), ARGV[2]) }
end
