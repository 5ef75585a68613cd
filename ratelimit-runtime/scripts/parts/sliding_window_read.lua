-- sliding_window_read.lua: this window's and the previous one's counts at `key`: declares
-- `start`, `e` (ms into the window), `field` (this window's), `cur` and `prev`. Refuses a
-- limit whose max x window reaches 2^53, past which the products of the estimate are not
-- exact (`Limit::new` refuses it too; this catches a hand-made call). Both operands are
-- whole and below 2^32, so the comparison itself is exact: a product at or above 2^53
-- rounds to no less than 2^53.
if max * window >= 9007199254740992 then
  return redis.error_reply(
    'ERR rate-limit script: a sliding window counts exactly only while max x window (ms) < 2^53'
  )
end
local start = now - now % window
local e = now - start
local field = string.format('%d', start)
local counts = redis.call('HMGET', key, field, string.format('%d', start - window))
local cur = (counts[1] or 0) + 0
local prev = (counts[2] or 0) + 0
