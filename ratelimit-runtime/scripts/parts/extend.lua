-- extend.lua: makes `key` live at least `ms` ms more (as ttl.lua makes it), and never
-- shortens its life: a count at an earlier time than the key has seen (a failover to a node
-- whose clock runs behind) must not expire what a later time counted or logged there. A key
-- without a TTL (just created) reads -1 and gets one.
--@include parts/ttl.lua
if redis.call('PTTL', key) < ms then
  redis.call('PEXPIRE', key, string.format('%d', ms))
end
