-- cost_bounds.lua: answers an error unless `cost`, the units this request counts, is a whole
-- number from 1 to `max` (what `Limit::costing` allows: a larger cost could never pass).
if cost ~= 1 and (cost == nil or cost < 1 or cost > max or cost % 1 ~= 0) then
  return redis.error_reply('ERR rate-limit script: cost must be a whole number from 1 to max')
end
