-- resume: end a pause and a channel back-off.
-- KEYS: pause, paused_until

return redis.call('DEL', KEYS[1], KEYS[2])
