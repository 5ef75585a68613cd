-- bounds.lua: answers an error unless `max` is a whole number from 1 to 2^32 - 1 and
-- `window` one from 1 to 31 days in ms (what `Limit::new` allows; the arithmetic of the
-- scripts is exact within these bounds, see README.md).
if max == nil or max < 1 or max > 4294967295 or max % 1 ~= 0
    or window == nil or window < 1 or window > 2678400000 or window % 1 ~= 0 then
  return redis.error_reply(
    'ERR rate-limit script: max must be a whole number from 1 to 4294967295 and window one from 1 to 2678400000 (ms)'
  )
end
