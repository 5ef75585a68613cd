-- sliding_window_commit.lua: counts the request's `cost` in its window (`value`). This
-- counter is read again as the previous window: the key is kept to the end of the next
-- window (`ttl`), and the field before it stays.
if redis.call('HINCRBY', key, value, cost_arg) == cost then
  local ms, oldest = ttl, value - window
  --@include parts/new_window.lua
end
