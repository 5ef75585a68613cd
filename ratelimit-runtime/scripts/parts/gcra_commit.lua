-- gcra_commit.lua: stores the new TAT (`value`), to expire when it no longer limits.
do
  local ms = ttl
  --@include parts/ttl.lua
  redis.call('SET', key, string.format('%d', value), 'PX', string.format('%d', ms))
end
