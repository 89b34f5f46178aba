-- gate_mark: say the gate is whole again, restarting the pace.
-- KEYS: gate_epoch, tat...  ARGV: epoch, epoch ttl ms, rate/min, burst, margin ms,
--       window ms  -> the epoch in force

local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, #EPOCH_TAG) == EPOCH_TAG then return string.sub(cur, #EPOCH_TAG + 1) end
local ttl = tonumber(ARGV[2])
local rate = tonumber(ARGV[3])
local burst = tonumber(ARGV[4])
local w = tonumber(ARGV[6]) + tonumber(ARGV[5])
-- tat = now + burst intervals: the next slot is one interval away and the burst
-- refills at the declared pace, as if the channel's window were full.
local interval = w / math.max(1, rate)
local tat = now + burst * interval
for i = 2, #KEYS do
  local old = tonumber(redis.call('GET', KEYS[i]) or '0')
  if tat > old then
    redis.call('SET', KEYS[i], string.format('%.3f', tat), 'PX', math.ceil(tat - now + w))
  end
end
redis.call('SET', KEYS[1], EPOCH_TAG .. ARGV[1], 'PX', ttl)
return ARGV[1]
