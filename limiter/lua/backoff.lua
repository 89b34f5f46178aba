-- backoff: hold the channel, one scope or one family's quota after a 429.
-- KEYS: paused_until (channel or scope), or quota_stop of a family; for a scope
--       also the channel's back-off index
-- ARGV: wait ms, window + margin ms, the scope (with the index)  -> the wait in force

local wait = tonumber(ARGV[1])
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
-- A shorter Retry-After from a later response must not cut short an earlier, longer one.
if now + wait > cur then
  -- The end is kept a window longer: reserve restarts the pace from it without a
  -- burst, so whoever waited leaves one interval apart, not together.
  redis.call('SET', KEYS[1], string.format('%.3f', now + wait), 'PX', wait + tonumber(ARGV[2]))
  if KEYS[2] then
    -- A scope's back-off is also listed in the channel's index of them (scope by
    -- end), for Status and backoffs_of; ended ones leave it here, each once.
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('%.3f', now))
    redis.call('ZADD', KEYS[2], string.format('%.3f', now + wait), ARGV[3])
    if redis.call('PTTL', KEYS[2]) < wait + tonumber(ARGV[2]) then
      redis.call('PEXPIRE', KEYS[2], wait + tonumber(ARGV[2]))
    end
  end
  return wait
end
return math.ceil(cur - now)
