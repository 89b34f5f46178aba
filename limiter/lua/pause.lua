-- pause: stop the channel until resume or the TTL.
-- KEYS: pause  ARGV: reason, ttl ms

redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
return 1
