-- sliding_window_peek.lua: the estimate over this window and the previous one (formulas in
-- sliding_window.lua), read, not written.
do
  --@include parts/sliding_window_read.lua
  local room = max - cur - cost
  ttl, value = 2 * window - e, field
  if room >= 0 and prev * (window - e) <= room * window then
    allowed, retry_after, reset_after = 1, 0, 2 * window - e
    remaining = room - math.ceil(prev * (window - e) / window)
  else
    allowed, remaining = 0, 0
    if room >= 0 then
      -- prev > 0 here, or the request would have been allowed.
      retry_after = (window - e) - math.floor(room * window / prev)
    else
      -- cur > max - cost >= 0: wait for the next window, then for this count to decay.
      retry_after = (window - e) + window - math.floor((max - cost) * window / cur)
    end
    if cur > 0 then
      reset_after = 2 * window - e
    else
      reset_after = window - e
    end
  end
end
