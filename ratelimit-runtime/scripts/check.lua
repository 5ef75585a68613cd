-- check.lua: the general script, which decides any stack of limits in one call. (A limit
-- checked alone goes to its algorithm's own script, e.g. fixed_window.lua.)
--
-- KEYS[i]  the key of limit i (`RouteKey::limit_key`), i = 1..n; the window algorithms keep
--          a hash there, one field per window start. Then the lockout key of each limit
--          with a block, in the limits' order. Every key shares one hash tag, so one
--          Cluster slot, and no other key is touched.
-- ARGV[1]  the time in ms, or '' for Redis TIME (parts/clock.lua)
-- ARGV[2]  a member unique to this request (sliding log), or '' when no limit is a log
-- ARGV[4i-1] .. ARGV[4i+2]
--          limit i: algorithm code (fw, sw, sl, gc; a ban: bn, br), with `:` and the units this request
--          counts in it when they are not 1 (its cost: `fw:10`), max, window ms, block ms
--          (0: none). A cost rides on the code so that a stack without one sends nothing
--          more: each argument is a string Redis and Lua make per call.
--
-- Phase 1 peeks every limit (a limit whose lockout holds refuses without a peek); phase 2
-- commits every limit only when all allowed, so a request rejected by one limit consumes
-- none of the others. When one refused, each limit with a block that refused by its own
-- count locks the client out (parts/block_start.lua).
--
-- A ban (code `bn`) comes first in the stack: max refusals in a fixed window, its lockout
-- key the ban. A ban that holds refuses the whole stack at once, no limit read
-- (parts/ban_reply.lua); else, when a limit refused, each ban counts the refusal and starts
-- at its max, and the refusal's figures report the ban as their wait (a ban that started
-- with this request reports remaining 1). A `br` is a ban counting one refusal another call
-- decided (the route's limits in another Cluster slot, a failure once its handler ran).
-- Returns one string of integers separated by spaces, four per limit in order: `allowed (0/1)
-- remaining retry_after_ms reset_after_ms`, then the time of the check in ms. A string, not
-- an array of integers: Redis builds either at the same cost, and the client reads one
-- string for far less than an array (its RESP parser handles every element on its own;
-- BENCHMARKS.md, section 6).

local n = (#ARGV - 2) / 4
if n < 1 or n % 1 ~= 0 or #KEYS < n then
  return redis.error_reply('ERR rate-limit script: expected 2 + 4 arguments per limit')
end
--@include parts/clock.lua
local member = ARGV[2]
-- The figures of the reply, four per limit, then the time; and per limit what its commit
-- or lockout needs: window, TTL, value written, lockout key (false: none), block, whether it
-- refused by its own count. Flat tables built at the size of a stack of two: each table and
-- each growth of one is an allocation, and allocations (with the collection they bring)
-- are much of what a call costs.
local figures = {0, 0, 0, 0, 0, 0, 0, 0, 0}
local state = {false, false, false, false, false, false, false, false, false, false, false, false}
local next_bkey = n + 1
local all_allowed = true
-- The first limit after the bans (which come first): the commit starts there.
local first, refused_elsewhere = 1, false
for i = 1, n do
  local key, code = KEYS[i], ARGV[4 * i - 1]
  local max, window, cost = tonumber(ARGV[4 * i]), tonumber(ARGV[4 * i + 1]), 1
  --@include parts/cost_code.lua
  -- No lockout is sent as '0', read without converting it.
  local block, bkey = ARGV[4 * i + 2], nil
  if block ~= '0' then
    block = tonumber(block)
    if block ~= 0 then
      bkey = KEYS[next_bkey]
      next_bkey = next_bkey + 1
    end
  end
  --@include parts/bounds.lua
  --@include parts/cost_bounds.lua
  --@include parts/block_bounds.lua
  --@include parts/block_peek.lua
  local allowed, remaining, retry_after, reset_after, ttl, value
  if blocked_for > 0 then
    if code == 'bn' or code == 'br' then
      -- A ban holds: the whole stack is refused, no limit read.
      local banned_for, held, started = blocked_for, i, 0
      --@include parts/ban_reply.lua
    end
    allowed, remaining, retry_after, reset_after = 0, 0, blocked_for, blocked_for
  elseif code == 'fw' then
    --@include parts/fixed_window_peek.lua
  elseif code == 'sw' then
    --@include parts/sliding_window_peek.lua
  elseif code == 'sl' then
    --@include parts/sliding_log_peek.lua
  elseif code == 'gc' then
    --@include parts/gcra_peek.lua
  elseif (code == 'bn' or code == 'br') and first == i and bkey then
    allowed, remaining, retry_after, reset_after = 1, max, 0, 0
    -- `br`: a refusal another call decided.
    refused_elsewhere = refused_elsewhere or code == 'br'
    first = i + 1
  else
    return redis.error_reply('ERR rate-limit script: unknown algorithm `' .. tostring(code) .. '`')
  end
  local f, k = 4 * i, 6 * i
  figures[f - 3], figures[f - 2], figures[f - 1], figures[f] =
    allowed, remaining, retry_after, reset_after
  state[k - 5], state[k - 4], state[k - 3] = window, ttl, value
  state[k - 2], state[k - 1], state[k] = bkey or false, block, allowed == 0 and blocked_for == 0
  if allowed == 0 then
    all_allowed = false
  end
end
if refused_elsewhere then
  all_allowed = false
end
if next_bkey ~= #KEYS + 1 then
  return redis.error_reply('ERR rate-limit script: expected one lockout key per limit with a block')
end

if all_allowed then
  for i = first, n do
    local k = 6 * i
    local key, code, window, ttl, value = KEYS[i], ARGV[4 * i - 1], state[k - 5], state[k - 4], state[k - 3]
    local cost, cost_arg = 1, '1'
    if #code > 2 then
      cost_arg = string.sub(code, 4)
      cost, code = tonumber(cost_arg), string.sub(code, 1, 2)
    end
    if code == 'fw' then
      --@include parts/fixed_window_commit.lua
    elseif code == 'sw' then
      --@include parts/sliding_window_commit.lua
    elseif code == 'sl' then
      --@include parts/sliding_log_commit.lua
    else
      --@include parts/gcra_commit.lua
    end
  end
  -- Allowed, each limit waits for nothing: the hot path formats only the other figures.
  if n == 2 then
    return string.format('1 %d 0 %d 1 %d 0 %d %d', figures[2], figures[4], figures[6], figures[8], now)
  end
else
  for i = 1, n do
    local k = 6 * i
    if state[k] and state[k - 2] then
      local key, bkey, block = KEYS[i], state[k - 2], state[k - 1]
      local f = 4 * i
      local retry_after, reset_after = nil, figures[f]
      --@include parts/block_start.lua
      figures[f - 3], figures[f - 2], figures[f - 1], figures[f] = 0, 0, retry_after, reset_after
    end
  end
  -- Each ban counting refusals counts this one; at its max the ban starts, and every limit
  -- that refused reports it as its wait.
  for i = 1, first - 1 do
    local code = ARGV[4 * i - 1]
    if code == 'bn' or code == 'br' then
      local k, f = 6 * i, 4 * i
      local key, bkey, block = KEYS[i], state[k - 2], state[k - 1]
      local max, window, cost, cost_arg = tonumber(ARGV[4 * i]), state[k - 5], 1, '1'
      local allowed, remaining, retry_after, reset_after
      --@include parts/fixed_window_decide.lua
      figures[f - 2] = remaining
      if remaining == 0 then
        --@include parts/ban_start.lua
        figures[f - 3], figures[f - 2], figures[f - 1], figures[f] = 0, 1, block, block
        for j = first, n do
          local g = 4 * j
          if figures[g - 3] == 0 and figures[g - 1] < block then
            figures[g - 1], figures[g] = block, block
          end
        end
      end
    end
  end
end

figures[4 * n + 1] = now
return string.format(string.rep('%d ', 4 * n) .. '%d', unpack(figures, 1, 4 * n + 1))
