-- reply.lua: a limit checked alone answers `allowed (0/1) remaining retry_after_ms
-- reset_after_ms` (see check.lua). An allowed request has nothing to wait for and a rejected
-- one nothing remaining, so each answer formats only its two other figures.
if allowed == 1 then
  return string.format('1 %d 0 %d', remaining, reset_after)
end
return string.format('0 0 %d %d', retry_after, reset_after)
