-- ttl.lua: `ms`, a key's wanted TTL in milliseconds, made the TTL to write: at least 1.
-- With the store's clock the exact value is used. With an injected clock Redis still
-- expires keys on its own clock, which the caller's clock need not follow (a test may stand
-- still for a while between two checks), so a key is then kept at least ten minutes and at
-- least one whole window: a key must not vanish while the caller's clock still reads it.
if rl_injected then
  if ms < window then
    ms = window
  end
  if ms < 600000 then
    ms = 600000
  end
end
if ms < 1 then
  ms = 1
end
