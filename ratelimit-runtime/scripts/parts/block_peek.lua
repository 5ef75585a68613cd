-- block_peek.lua: `blocked_for`, how many ms the lockout at `bkey` still holds (0 when there
-- is none, or no `bkey`). The key holds the lockout's end in ms on the check's clock, so an
-- injected clock ends it too.
local blocked_for = 0
if bkey then
  local ends = redis.call('GET', bkey)
  if ends and ends + 0 > now then
    blocked_for = ends - now
  end
end
