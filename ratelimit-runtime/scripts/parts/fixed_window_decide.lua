-- fixed_window_decide.lua: counts first and takes the count back on rejection: one command
-- on the allowed path instead of HGET then HINCRBY. Same decision and state as
-- fixed_window_peek.lua then fixed_window_commit.lua.
do
  local start = now - now % window
  local field = string.format('%d', start)
  local left = window - (now - start)
  local count = redis.call('HINCRBY', key, field, cost_arg)
  if count == cost then
    local ms, oldest = left, start
    --@include parts/new_window.lua
  end
  if count <= max then
    allowed, remaining, retry_after, reset_after = 1, max - count, 0, left
  else
    -- count > max >= cost, so the field existed before and the key keeps its TTL.
    redis.call('HINCRBY', key, field, -cost)
    allowed, remaining, retry_after, reset_after = 0, 0, left, left
  end
end
