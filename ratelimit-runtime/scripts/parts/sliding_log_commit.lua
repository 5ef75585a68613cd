-- sliding_log_commit.lua: logs the request (`member`, scored `now`).
redis.call('ZADD', key, string.format('%d', now), member)
do
  local ms = ttl
  --@include parts/extend.lua
end
