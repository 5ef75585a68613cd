-- block_bounds.lua: answers an error unless `block`, when there is a lockout key `bkey`, is a
-- whole number of ms from 1 to 31 days (what `Limit::blocking` allows).
if bkey and (block == nil or block < 1 or block > 2678400000 or block % 1 ~= 0) then
  return redis.error_reply(
    'ERR rate-limit script: block must be a whole number from 1 to 2678400000 (ms)'
  )
end
