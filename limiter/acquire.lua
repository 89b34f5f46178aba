-- paritysync limiter: every decision and every change of limiter state runs here, so
-- that each is atomic, takes one round trip and reads time only from Redis.
--
-- ARGV[1] selects the operation; the Go side (limiter.go) builds KEYS and ARGV.
-- All keys of one call carry the same {channel} hash tag.
--
-- acquire  KEYS: pause, paused_until, daily, adaptive, bucket
--          ARGV: op, cost, daily quota, priority, rate/min, burst, reserve, share, poll ms
--          -> {allowed, retry ms, whole tokens left, daily used, daily quota, tier, reason}
-- backoff  KEYS: paused_until                         ARGV: op, wait ms
-- adapt    KEYS: adaptive, paused_until               ARGV: op, rate/min, ttl ms
-- pause    KEYS: pause                                ARGV: op, reason, ttl ms
-- resume   KEYS: pause, paused_until                  ARGV: op
-- status   KEYS: pause, paused_until, daily, adaptive, bucket x N
--          ARGV: op, daily quota, then rate/min, burst, share per bucket

-- Redis < 5 replicates scripts verbatim, which would replay TIME on replicas; effect
-- replication makes the recorded writes authoritative. 7.x always does this.
if redis.replicate_commands then
  pcall(redis.replicate_commands)
end

local t = redis.call('TIME')
-- Milliseconds with a microsecond fraction: refill at hundreds of tokens per minute
-- needs better than whole-millisecond resolution to stay exact over a day.
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local day = 86400000
-- Unix time has no leap seconds, so UTC midnight is a multiple of a day.
local midnight = (math.floor(now / day) + 1) * day

local op = ARGV[1]

local function tier(used, quota)
  if used >= quota then return 'stop' end
  if used * 100 >= quota * 95 then return 'throttle' end
  if used * 100 >= quota * 85 then return 'page' end
  if used * 100 >= quota * 70 then return 'warn' end
  return 'ok'
end

-- effective_rate is the family's refill in tokens per millisecond: the configured rate,
-- lowered to the family's share of the server-reported (adaptive) channel rate, and
-- halved in the throttle tier.
local function effective_rate(rate, share, adaptive, used, quota)
  if adaptive and adaptive * share < rate then
    rate = adaptive * share
  end
  if used * 100 >= quota * 95 then
    rate = rate / 2
  end
  return rate / 60000
end

-- tokens_now refills the stored bucket up to now; a missing bucket is full, which is
-- why a bucket's TTL is the time it takes to refill.
local function tokens_now(key, burst, per_ms)
  local b = redis.call('HMGET', key, 't', 'ts')
  if not b[1] then return burst end
  local elapsed = now - tonumber(b[2])
  -- A failover to a replica with a slower clock must not drain the bucket.
  if elapsed < 0 then elapsed = 0 end
  return math.min(burst, tonumber(b[1]) + elapsed * per_ms)
end

if op == 'acquire' then
  local cost = tonumber(ARGV[2])
  local quota = tonumber(ARGV[3])
  local priority = tonumber(ARGV[4])
  local rate = tonumber(ARGV[5])
  local burst = tonumber(ARGV[6])
  local reserve = tonumber(ARGV[7])
  local share = tonumber(ARGV[8])
  local poll = tonumber(ARGV[9])

  local reason = redis.call('GET', KEYS[1])
  local paused_until = tonumber(redis.call('GET', KEYS[2]) or '0')
  local used = tonumber(redis.call('GET', KEYS[3]) or '0')
  local adaptive = tonumber(redis.call('GET', KEYS[4]) or '')
  local per_ms = effective_rate(rate, share, adaptive, used, quota)
  local tokens = tokens_now(KEYS[5], burst, per_ms)
  local left = math.floor(tokens)
  local cur = tier(used, quota)

  if reason then
    return {0, poll, left, used, quota, cur, reason}
  end
  if paused_until > now then
    return {0, math.ceil(paused_until - now), left, used, quota, cur, ''}
  end
  -- Judged by the usage the request would leave behind, so a big request cannot
  -- overshoot the quota and bulk work never pushes the day into the throttle tier.
  -- The reply names that tier: a quota denial then always reads "stop", or
  -- "throttle" for priority >= 4, which a caller can tell from a token wait.
  local after = used + cost
  if after > quota then
    return {0, math.ceil(midnight - now), left, used, quota, 'stop', ''}
  end
  if priority >= 4 and after * 100 >= quota * 95 then
    return {0, math.ceil(midnight - now), left, used, quota, tier(after, quota), ''}
  end
  -- Non-urgent work must leave the reserve in the bucket; urgent work may drain it.
  local need = 1
  if priority > 1 then need = reserve + 1 end
  if tokens < need then
    local wait = poll
    if per_ms > 0 then wait = math.ceil((need - tokens) / per_ms) end
    return {0, wait, left, used, quota, cur, ''}
  end

  tokens = tokens - 1
  redis.call('HSET', KEYS[5], 't', string.format('%.6f', tokens), 'ts', string.format('%.3f', now))
  -- Twice the refill time covers a later halving of the rate; past it the bucket is
  -- full anyway. Capped at a day so a tiny adaptive rate cannot pin the key forever.
  local ttl = day
  if per_ms > 0 then ttl = math.min(day, math.ceil(2 * burst / per_ms) + 1000) end
  redis.call('PEXPIRE', KEYS[5], ttl)
  redis.call('INCRBY', KEYS[3], cost)
  redis.call('PEXPIREAT', KEYS[3], midnight)
  return {1, 0, math.floor(tokens), after, quota, tier(after, quota), ''}
end

if op == 'backoff' then
  local wait = tonumber(ARGV[2])
  local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
  -- A shorter Retry-After from a later response must not cut short an earlier, longer one.
  if now + wait > cur then
    redis.call('SET', KEYS[1], string.format('%.3f', now + wait), 'PX', wait)
    return wait
  end
  return math.ceil(cur - now)
end

if op == 'adapt' then
  local rate = tonumber(ARGV[2])
  local ttl = tonumber(ARGV[3])
  if rate <= 0 then
    -- Nothing left in the server's window: wait for its reset, channel-wide.
    local cur = tonumber(redis.call('GET', KEYS[2]) or '0')
    if now + ttl > cur then
      redis.call('SET', KEYS[2], string.format('%.3f', now + ttl), 'PX', ttl)
    end
    return 0
  end
  redis.call('SET', KEYS[1], string.format('%.6f', rate), 'PX', ttl)
  return 1
end

if op == 'pause' then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', tonumber(ARGV[3]))
  return 1
end

if op == 'resume' then
  return redis.call('DEL', KEYS[1], KEYS[2])
end

if op == 'status' then
  local quota = tonumber(ARGV[2])
  local reason = redis.call('GET', KEYS[1]) or ''
  local paused_for = 0
  local paused_until = tonumber(redis.call('GET', KEYS[2]) or '0')
  if paused_until > now then paused_for = math.ceil(paused_until - now) end
  local used = tonumber(redis.call('GET', KEYS[3]) or '0')
  local adaptive_raw = redis.call('GET', KEYS[4])
  local adaptive = tonumber(adaptive_raw or '')
  local adaptive_for = 0
  if adaptive then adaptive_for = redis.call('PTTL', KEYS[4]) end
  local out = {reason, paused_for, used, math.ceil(midnight - now), adaptive_raw or '', adaptive_for}
  local i = 5
  local a = 3
  while KEYS[i] do
    local rate = tonumber(ARGV[a])
    local burst = tonumber(ARGV[a + 1])
    local share = tonumber(ARGV[a + 2])
    local per_ms = effective_rate(rate, share, adaptive, used, quota)
    out[#out + 1] = string.format('%.6f', tokens_now(KEYS[i], burst, per_ms))
    out[#out + 1] = string.format('%.6f', per_ms * 60000)
    i = i + 1
    a = a + 3
  end
  return out
end

return redis.error_reply('paritysync limiter: unknown op ' .. tostring(op))
