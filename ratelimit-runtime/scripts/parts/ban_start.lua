-- ban_start.lua: the ban at `bkey` starts: it holds `block` ms from `now` (the key holds its
-- end, as a lockout's does), and the count toward it (`key`) starts again from nothing.
do
  local ms, window = block, block
  --@include parts/ttl.lua
  redis.call('SET', bkey, string.format('%d', now + block), 'PX', string.format('%d', ms))
  redis.call('DEL', key)
end
