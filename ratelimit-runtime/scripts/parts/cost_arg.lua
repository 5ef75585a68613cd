-- cost_arg.lua: a limit checked alone: `cost`, the units this request counts, is the
-- argument after the others when there is one (`extra` = 1), else 1; `cost_arg`, the same
-- as the string the commands take (a number passed to `redis.call` is formatted anew on
-- every call, which costs more than the rest of a counter's commit).
local cost, cost_arg = 1, '1'
if extra == 1 then
  cost_arg = ARGV[#ARGV]
  cost = tonumber(cost_arg)
end
--@include parts/cost_bounds.lua
