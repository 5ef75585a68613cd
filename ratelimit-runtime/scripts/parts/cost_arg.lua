-- cost_arg.lua: a limit checked alone: `cost`, the units this request counts, is the
-- argument after the others when there is one (`extra` = 1), else 1.
local cost = 1
if extra == 1 then
  cost = tonumber(ARGV[#ARGV])
end
--@include parts/cost_bounds.lua
