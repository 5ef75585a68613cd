-- new_window.lua: a window algorithm's first count in a new window: the hash at `key` lives
-- `ms` ms more (at least, see extend.lua), and every field (window start) older than
-- `oldest` goes. With the store's clock an older field has expired with its key already;
-- with an injected clock keys are kept longer and would gather stale windows. A newer field
-- stays: a clock that stepped back (a failover to a node running behind) must not reset a
-- budget.
--@include parts/extend.lua
local fields = redis.call('HKEYS', key)
if #fields > 1 then
  for _, other in ipairs(fields) do
    if other + 0 < oldest then
      redis.call('HDEL', key, other)
    end
  end
end
