-- gate_load: raise the gate to versions of the system of record.
-- KEYS: gate  ARGV: gate ttl ms, cutoff day, then per range: room|plan, first day,
--       last day, version  -> the nights raised

-- The gate rebuild after a Redis loss (rebuild.go). Loading only raises versions, so
-- a send admitted meanwhile is never lowered; marking starts the channel's buckets
-- empty (the window before the loss is unknown) and says the gate is whole again.
local ttl = tonumber(ARGV[1])
local cutoff = tonumber(ARGV[2])
local gate = gate_fields(KEYS[1], cutoff)
local writes = {}
for i = 3, #ARGV, 4 do
  local a, z = math.max(tonumber(ARGV[i + 1]), cutoff), tonumber(ARGV[i + 2])
  if a <= z then writes[#writes + 1] = {k = ARGV[i], a = a, z = z, v = gate.vpad(ARGV[i + 3])} end
end
gate.write(writes)
local raised = 0
for _, w in ipairs(writes) do raised = raised + w.raised end
gate.flush(ttl)
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return raised
