-- fixed_window_commit.lua: counts the request's `cost` in its window (`value`, the field).
if redis.call('HINCRBY', key, value, cost_arg) == cost then
  local ms, oldest = ttl, value + 0
  --@include parts/new_window.lua
end
