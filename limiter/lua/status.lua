-- status: the channel's state, read only.
-- KEYS: pause, paused_until, daily, adaptive, sched, tat, breaker, back-off index,
--       then quota_stop of each family
-- ARGV: daily quota, rate/min, margin ms, window ms, scopes to list
-- -> {..., scopes backed off, then per family the ms its quota stop has left,
--     then (scope, ms left) of the scopes' back-offs that end last}

local quota = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local margin = tonumber(ARGV[3])
local w = tonumber(ARGV[4]) + margin
local reason = redis.call('GET', KEYS[1]) or ''
local paused_for = 0
local paused_until = tonumber(redis.call('GET', KEYS[2]) or '0')
if paused_until > now then paused_for = math.ceil(paused_until - now) end
local used = tonumber(redis.call('GET', KEYS[3]) or '0')
local foreign = tonumber(redis.call('GET', KEYS[4]) or '0') or 0
local foreign_for = 0
if foreign > 0 then foreign_for = redis.call('PTTL', KEYS[4]) end
local r = limit_now(rate, foreign, used, quota)
local in_window = redis.call('ZCOUNT', KEYS[5], '(' .. (now - w), now)
local ahead = redis.call('ZCOUNT', KEYS[5], '(' .. now, '+inf')
local tat = tonumber(redis.call('GET', KEYS[6]) or '0')
local next_in = math.max(0, math.ceil(tat - now))
local brk = redis.call('HMGET', KEYS[7], 'st', 'until', 'n')
local bst = brk[1] or 'closed'
local open_for = 0
if bst == 'open' then
  open_for = math.max(0, math.ceil(tonumber(brk[2]) - now))
  if open_for == 0 then bst = 'half' end
end
local live = '(' .. string.format('%.3f', now)
local out = {reason, paused_for, used, math.ceil(midnight - now), foreign, foreign_for, r, in_window, ahead, next_in,
  bst, open_for, tonumber(brk[3] or '0'), redis.call('ZCOUNT', KEYS[8], live, '+inf')}
for i = 9, #KEYS do
  out[#out + 1] = math.max(0, math.ceil(tonumber(redis.call('GET', KEYS[i]) or '0') - now))
end
-- The scopes' back-offs that end last, at most ARGV[5] of them: O(log n + listed).
local listed = redis.call('ZREVRANGEBYSCORE', KEYS[8], '+inf', live, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[5]))
for i = 1, #listed, 2 do
  out[#out + 1] = listed[i]
  out[#out + 1] = math.ceil(tonumber(listed[i + 1]) - now)
end
return out
