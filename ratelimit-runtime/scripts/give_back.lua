-- give_back.lua: gives units of budget back to one client on one route, in one call: a
-- request that counted its failures only and succeeded (`count = "failures"`), or an app's
-- `give_back(n)`; or resets the budget (ARGV[2] = 'reset': every key given is deleted, the
-- limits' keys and their lockout keys; returns how many existed); or charges units after
-- the fact (ARGV[2] = 'charge', an app's `charge(n)`; returns the units counted).
--
-- KEYS[i]  the key of limit i (`RouteKey::limit_key`); every key shares one hash tag.
-- ARGV[1]  the time in ms, or '' for Redis TIME (parts/clock.lua)
-- ARGV[2]  the time of the check that counted the units (its reply's last figure), or ''
--          for units counted at any time
-- ARGV[5i-2] .. ARGV[5i+2]
--          limit i: algorithm code (fw, sw, sl, gc), max, window ms, the units, and for a
--          sliding log with a counted time the member the check logged (else '')
--
-- With a counted time a unit goes back where that check put it: the window counter of its
-- window (none once that window counts no more), the log's member (none once it left the
-- window; a check of cost c logged `member` and `member:2` to `member:c`, so units u give
-- back the first u of them, each missing one replaced by one logged at the same time, as
-- when a give-back without a receipt took it), or one emission interval per unit off GCRA's
-- arrival time. Without, from what counts now:
-- this window's counter, then the previous one's (sliding window); the newest members of
-- the log; the arrival time. Never below nothing: a budget already whole stays whole, and
-- a key is never created. Returns the units given back over all limits.

if ARGV[2] == 'reset' then
  if #ARGV ~= 2 or #KEYS < 1 then
    return redis.error_reply('ERR rate-limit script: a reset takes its keys and 2 arguments')
  end
  return redis.call('DEL', unpack(KEYS))
end
local n = (#ARGV - 2) / 5
if n < 1 or n % 1 ~= 0 or #KEYS ~= n then
  return redis.error_reply('ERR rate-limit script: expected one key and 5 arguments per limit')
end
--@include parts/clock.lua
-- ARGV[2] = 'release' or 'renew': the place a concurrency limit's check took (code `cc`, the
-- member the check logged) given back, its request ended; or held for another lease from
-- now, its request still runs. Other limits are left alone. A release returns the places
-- given back; a renewal, when the lease now ends (ms; the earliest of the limits'), or 0
-- when a place had gone (expired, or reset), which is then not taken again.
local lease_op = ARGV[2]
if lease_op == 'release' or lease_op == 'renew' then
  local released, ends = 0, nil
  for i = 1, n do
    if ARGV[5 * i - 2] == 'cc' then
      local key, window, member = KEYS[i], tonumber(ARGV[5 * i]), ARGV[5 * i + 2]
      if window == nil or window < 1 or window % 1 ~= 0 or member == '' then
        return redis.error_reply('ERR rate-limit script: a lease takes its length in ms and its member')
      end
      redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - window))
      if lease_op == 'release' then
        released = released + redis.call('ZREM', key, member)
      elseif redis.call('ZSCORE', key, member) then
        redis.call('ZADD', key, string.format('%d', now), member)
        local ms = window
        --@include parts/extend.lua
        ends = math.min(ends or (now + window), now + window)
      else
        ends = 0
      end
    end
  end
  if lease_op == 'release' then
    return released
  end
  return ends or 0
end
-- ARGV[2] = 'charge': units counted after the fact (`Budget::charge`), never refused.
local charging = ARGV[2] == 'charge'
local counted_at = nil
if ARGV[2] ~= '' and not charging then
  counted_at = tonumber(ARGV[2])
  if counted_at == nil or counted_at < 0 or counted_at % 1 ~= 0 then
    return redis.error_reply('ERR rate-limit script: ARGV[2] must be empty or a time in ms')
  end
end
-- Every limit's arguments are checked before anything is written.
for i = 1, n do
  local code, max, window = ARGV[5 * i - 2], tonumber(ARGV[5 * i - 1]), tonumber(ARGV[5 * i])
  --@include parts/bounds.lua
  if code ~= 'fw' and code ~= 'sw' and code ~= 'sl' and code ~= 'gc' then
    return redis.error_reply('ERR rate-limit script: unknown algorithm `' .. tostring(code) .. '`')
  end
  local units = tonumber(ARGV[5 * i + 1])
  if units == nil or units < 1 or units > 4294967295 or units % 1 ~= 0 then
    return redis.error_reply('ERR rate-limit script: units must be a whole number from 1 to 4294967295')
  end
end
if charging then
  -- Each limit counts the units now, as a check that passed would, except that none is
  -- refused: a budget may go below nothing, at most one whole budget below (counts up to
  -- 2 x max; GCRA's arrival time up to two windows ahead), and the next requests wait until
  -- it is back. The member (a sliding log's) is unique to this charge.
  local charged = 0
  for i = 1, n do
    local key, code = KEYS[i], ARGV[5 * i - 2]
    local max, window = tonumber(ARGV[5 * i - 1]), tonumber(ARGV[5 * i])
    local units, member = tonumber(ARGV[5 * i + 1]), ARGV[5 * i + 2]
    local take = 0
    if code == 'fw' or code == 'sw' then
      local start = now - now % window
      local field = string.format('%d', start)
      local count = (redis.call('HGET', key, field) or 0) + 0
      take = math.max(0, math.min(units, 2 * max - count))
      if take > 0 and redis.call('HINCRBY', key, field, take) == take then
        local ms, oldest = window - (now - start), start
        if code == 'sw' then
          ms, oldest = 2 * window - (now - start), start - window
        end
        --@include parts/new_window.lua
      end
    elseif code == 'sl' then
      redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - window))
      take = math.max(0, math.min(units, 2 * max - redis.call('ZCARD', key)))
      if take > 0 then
        local score, args = string.format('%d', now), {}
        for j = 1, take do
          args[2 * j - 1], args[2 * j] = score, member .. ':' .. j
        end
        redis.call('ZADD', key, unpack(args))
        local ms = window
        --@include parts/extend.lua
      end
    else
      --@include parts/gcra_tat.lua
      local room = math.floor((now_us + 2 * tolerance - tat) / interval)
      take = math.max(0, math.min(units, room))
      if take > 0 then
        local new_tat = tat + take * interval
        local ms = math.ceil((new_tat - now_us) / 1000)
        --@include parts/ttl.lua
        redis.call('SET', key, string.format('%d', new_tat), 'PX', string.format('%d', ms))
      end
    end
    charged = charged + take
  end
  return charged
end
local given = 0
for i = 1, n do
  local key, code = KEYS[i], ARGV[5 * i - 2]
  local max, window = tonumber(ARGV[5 * i - 1]), tonumber(ARGV[5 * i])
  local units = tonumber(ARGV[5 * i + 1])
  if code == 'fw' or code == 'sw' then
    local at = counted_at or now
    local start = at - at % window
    local fields = {string.format('%d', start)}
    if code == 'sw' and not counted_at then
      fields[2] = string.format('%d', start - window)
    end
    -- A window that counts no more (before this one; for a sliding window, before the
    -- previous one) takes nothing back, though its field may linger until the key expires.
    local oldest = now - now % window
    if code == 'sw' then
      oldest = oldest - window
    end
    if start < oldest then
      fields = {}
    end
    for _, field in ipairs(fields) do
      local count = (redis.call('HGET', key, field) or 0) + 0
      local take = math.min(count, units)
      if take > 0 then
        redis.call('HINCRBY', key, field, string.format('%d', -take))
        units, given = units - take, given + take
      end
    end
  elseif code == 'sl' then
    -- What left the window counts no more and goes back as nothing.
    redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - window))
    if counted_at then
      local member, at = ARGV[5 * i + 2], string.format('%d', counted_at)
      for j = 1, math.min(units, max) do
        local took = redis.call('ZREM', key, j == 1 and member or member .. ':' .. j)
        if took == 0 then
          -- A give-back without a receipt took this member (the newest of its time): one
          -- logged at the same time stands in, as a unit of a window's counter would.
          local same = redis.call('ZRANGEBYSCORE', key, at, at, 'LIMIT', 0, 1)
          if same[1] then
            took = redis.call('ZREM', key, same[1])
          end
        end
        given = given + took
      end
    else
      local count = redis.call('ZCARD', key)
      local take = math.min(count, units)
      if take > 0 then
        redis.call('ZREMRANGEBYRANK', key, -take, -1)
        given = given + take
      end
    end
  elseif code == 'gc' then
    local stored = redis.call('GET', key)
    if stored then
      local interval = math.floor(window * 1000 / max)
      if interval < 1 then
        interval = 1
      end
      local now_us = now * 1000
      local tat = stored + 0
      local spent = math.ceil((tat - now_us) / interval)
      local take = math.min(spent, units)
      if take > 0 then
        tat = tat - take * interval
        given = given + take
        if tat <= now_us then
          redis.call('DEL', key)
        else
          -- The key keeps its TTL (a PTTL and PX, not KEEPTTL, which Redis 5 lacks).
          local ms = redis.call('PTTL', key)
          if ms > 0 then
            redis.call('SET', key, string.format('%d', tat), 'PX', string.format('%d', ms))
          else
            redis.call('SET', key, string.format('%d', tat))
          end
        end
      end
    end
  end
end
return given
