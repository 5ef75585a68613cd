-- reply.lua: a limit checked alone answers `allowed (0/1) remaining retry_after_ms
-- reset_after_ms now_ms` (see check.lua). An allowed request has nothing to wait for and a
-- rejected one nothing remaining, so each answer formats only its other figures.
if allowed == 1 then
  return string.format('1 %d 0 %d %d', remaining, reset_after, now)
end
return string.format('0 0 %d %d %d', retry_after, reset_after, now)
