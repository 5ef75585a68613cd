-- gcra_peek.lua: the decision on the stored TAT (formulas in gcra.lua), read, not written.
do
  --@include parts/gcra_tat.lua
  local new_tat = tat + cost * interval
  ttl, value = math.ceil((new_tat - now_us) / 1000), new_tat
  if new_tat - now_us <= tolerance then
    allowed, retry_after, reset_after = 1, 0, ttl
    remaining = math.floor((tolerance - (new_tat - now_us)) / interval)
  else
    allowed, remaining = 0, 0
    retry_after = math.ceil((new_tat - tolerance - now_us) / 1000)
    reset_after = math.ceil((tat - now_us) / 1000)
  end
end
