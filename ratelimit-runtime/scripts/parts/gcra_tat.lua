-- gcra_tat.lua: the GCRA's rate (formulas in gcra.lua) and the stored TAT: declares
-- `interval` (T, us), `tolerance` (tau, us), `now_us` and `tat` (at least now).
local interval = math.floor(window * 1000 / max)
if interval < 1 then
  interval = 1
end
local tolerance = interval * max
local now_us = now * 1000
local tat = (redis.call('GET', key) or 0) + 0
if tat < now_us then
  tat = now_us
end
