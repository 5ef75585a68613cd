-- cost_code.lua: a limit of a stack: `code` carries its cost after a `:` when it is not 1
-- (`fw:10`); `cost` becomes that, `code` the algorithm's two letters. A code of any other
-- shape is refused (an unknown algorithm, or a cost that is no whole number).
if #code > 2 then
  if string.sub(code, 3, 3) ~= ':' then
    return redis.error_reply('ERR rate-limit script: unknown algorithm `' .. code .. '`')
  end
  cost, code = tonumber(string.sub(code, 4)), string.sub(code, 1, 2)
end
