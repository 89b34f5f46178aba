-- outcome: the channel's answer, for the circuit breaker.
-- KEYS: breaker  ARGV: ok (1|0), failures, cooldown ms  -> {state, changed (1|0)}

-- A 5xx or timeout counts toward the streak that opens the breaker; any answer
-- that shows the channel up closes it. A failed probe opens it again.
local ok = ARGV[1] == '1'
local failures = tonumber(ARGV[2])
local cooldown = tonumber(ARGV[3])
local st = redis.call('HGET', KEYS[1], 'st') or 'closed'
if ok then
  if st == 'closed' then
    redis.call('HDEL', KEYS[1], 'n')
    return {'closed', 0}
  end
  redis.call('DEL', KEYS[1])
  return {'closed', 1}
end
local n = redis.call('HINCRBY', KEYS[1], 'n', 1)
redis.call('PEXPIRE', KEYS[1], day)
if st == 'half' or (st == 'closed' and n >= failures) then
  redis.call('HSET', KEYS[1], 'st', 'open', 'until', string.format('%.3f', now + cooldown), 'probe', '', 'probe_until', '0')
  return {'open', 1}
end
return {st, 0}
