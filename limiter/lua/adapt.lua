-- adapt: lower the limit to what the channel's rate headers report.
-- KEYS: adaptive, paused_until, sched  ARGV: rate/min, limit, remaining, reset ms, window ms

-- The server's headers lower the limit only when they report less room than our
-- own schedule leaves: our traffic is already counted, so it never feeds back.
local rate = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local remaining = tonumber(ARGV[3])
local reset = tonumber(ARGV[4])
local window = tonumber(ARGV[5])
local ours = redis.call('ZCOUNT', KEYS[3], '(' .. (now - window), now)
local expected = rate - ours
local foreign = 0
if limit > 0 and limit < rate then foreign = rate - limit end
if remaining >= 0 then
  if remaining == 0 and expected > 1 then
    -- Nothing left that we did not use ourselves: wait for the reset, channel-wide.
    local cur = tonumber(redis.call('GET', KEYS[2]) or '0')
    if now + reset > cur then
      -- Kept a window longer, as a back-off's end: the waiters leave at the pace.
      redis.call('SET', KEYS[2], string.format('%.3f', now + reset), 'PX', reset + window)
    end
  elseif remaining < expected - 1 then
    foreign = math.max(foreign, expected - remaining)
  end
end
if foreign > 0 then
  local ttl = math.max(reset, 2000)
  local prev = tonumber(redis.call('GET', KEYS[1]) or '0')
  if foreign > prev or redis.call('PTTL', KEYS[1]) < ttl then
    redis.call('SET', KEYS[1], math.max(foreign, prev), 'PX', ttl)
  end
end
return foreign
