-- backoffs_of: the back-off left per scope.
-- KEYS: paused_until, back-off index  ARGV: scopes  -> per scope the ms left

-- What is left of the back-off holding each of the given scopes: the channel's or
-- the scope's own, whichever ends later. One ZMSCORE: O(k log n) for k scopes.
local channel_until = tonumber(redis.call('GET', KEYS[1]) or '0')
local out = {}
-- In steps of 1000 scopes: unpack is bounded by Lua's stack.
for i = 1, #ARGV, 1000 do
  local ends = redis.call('ZMSCORE', KEYS[2], unpack(ARGV, i, math.min(#ARGV, i + 999)))
  for j = 1, #ends do
    local e = math.max(channel_until, tonumber(ends[j] or '0') or 0)
    out[#out + 1] = math.max(0, math.ceil(e - now))
  end
end
return out
