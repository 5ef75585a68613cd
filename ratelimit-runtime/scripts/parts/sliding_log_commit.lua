-- sliding_log_commit.lua: logs the request (`member`, scored `now`), and for a cost above 1
-- `member:2` to `member:<cost>` beside it.
if cost == 1 then
  redis.call('ZADD', key, string.format('%d', now), member)
else
  local score, args = string.format('%d', now), {}
  args[1], args[2] = score, member
  for j = 2, cost do
    args[2 * j - 1], args[2 * j] = score, member .. ':' .. j
  end
  redis.call('ZADD', key, unpack(args))
end
do
  local ms = ttl
  --@include parts/extend.lua
end
