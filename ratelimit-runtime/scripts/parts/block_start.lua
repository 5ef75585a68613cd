-- block_start.lua: this limit refused, so the client is locked out for `block` ms: `bkey`
-- holds the lockout's end, and the limit's own `key` goes, so the budget is whole again
-- once the lockout ends. The refusal reports the lockout as its wait.
do
  local ms, window = block, block
  --@include parts/ttl.lua
  redis.call('SET', bkey, string.format('%d', now + block), 'PX', string.format('%d', ms))
  redis.call('DEL', key)
end
retry_after, reset_after = block, block
