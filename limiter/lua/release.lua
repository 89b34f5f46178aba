-- release: give a sent request's nights back.
-- KEYS: lease  ARGV: id

-- An earlier attempt of the request that went unanswered keeps the nights until
-- its own lease ends (u, see the lease above); otherwise they are free now.
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if raw then
  local lv = cjson.decode(raw)
  if lv.u and lv.u > now then
    lv.e, lv.u = lv.u, nil
    redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(lv))
    return 0
  end
end
return redis.call('HDEL', KEYS[1], ARGV[1])
