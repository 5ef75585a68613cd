-- fixed_window_commit.lua: counts the request in its window (`value`, the field).
if redis.call('HINCRBY', key, value, '1') == 1 then
  local ms, oldest = ttl, value + 0
  --@include parts/new_window.lua
end
