-- block_start.lua: this limit refused, so the client is locked out: `bkey` holds the
-- lockout's end, and the limit's own `key` goes, so the budget is whole again once the
-- lockout ends. The lockout lasts `block` ms, or until the budget would have been whole
-- anyway (`reset_after`, the refusal's own figure) when that is later: a block shorter than
-- the window must not hand out a whole budget per block. The refusal reports the lockout
-- as its wait.
do
  local lockout = block
  if reset_after and reset_after > lockout then
    lockout = reset_after
  end
  local ms, window = lockout, lockout
  --@include parts/ttl.lua
  redis.call('SET', bkey, string.format('%d', now + lockout), 'PX', string.format('%d', ms))
  redis.call('DEL', key)
  retry_after, reset_after = lockout, lockout
end
