-- identities.lua: every request from a different client, cycling through `count` identities
-- (default 10,000) as a trusted proxy would report them: `X-Forwarded-For: 198.18.x.y`
-- (the RFC 2544 benchmarking range). The requests are formatted once, in init.

local prepared = {}
local next_index = 0

function init(args)
  local count = tonumber(args[1] or "10000")
  for i = 0, count - 1 do
    local address = string.format("198.18.%d.%d", math.floor(i / 256), i % 256)
    prepared[i + 1] = wrk.format(nil, nil, { ["X-Forwarded-For"] = address })
  end
end

function request()
  next_index = next_index % #prepared + 1
  return prepared[next_index]
end
