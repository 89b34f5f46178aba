-- budget: the channel's budget identity.
-- KEYS: budget  ARGV: identity  -> the identity in force

-- The channel's budget identity: the first worker to check writes its own; every
-- later one gets the identity in force back, to compare with its own.
local cur = redis.call('GET', KEYS[1])
if not cur then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', BUDGET_TTL)
  return ARGV[1]
end
if cur == ARGV[1] then redis.call('PEXPIRE', KEYS[1], BUDGET_TTL) end
return cur
