-- gate_epoch: the gate's epoch.
-- KEYS: gate_epoch  -> the epoch, '' when none

local cur = redis.call('GET', KEYS[1]) or ''
if string.sub(cur, 1, #EPOCH_TAG) ~= EPOCH_TAG then return '' end
return string.sub(cur, #EPOCH_TAG + 1)
