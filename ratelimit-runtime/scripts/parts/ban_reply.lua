-- ban_reply.lua: answers a request the ban at `held` refuses, every limit unread: each
-- limit refused for `banned_for` ms, the other bans letting it through (a request a ban
-- refuses counts toward no other), the ban that `started` now (its index; 0: none did)
-- with remaining 1.
do
  local b = string.format('%d', banned_for)
  local refused, parts = '0 0 ' .. b .. ' ' .. b, {}
  for j = 1, n do
    if j ~= held and string.byte(ARGV[4 * j - 1]) == 98 then
      parts[j] = '1 0 0 0'
    else
      parts[j] = refused
    end
  end
  if started > 0 then
    parts[started] = '0 1 ' .. b .. ' ' .. b
  end
  parts[n + 1] = string.format('%d', now)
  return table.concat(parts, ' ')
end
