-- paritysync limiter v2: every decision and every change of limiter state runs here,
-- so that each is atomic, takes one round trip and reads time only from Redis.
--
-- ARGV[1] selects the operation; the Go side (limiter.go) builds KEYS and ARGV.
-- All keys of one call carry the same {channel} hash tag.
--
-- reserve  KEYS: pause, paused_until, daily, adaptive, sched, tat, res, gate, lease, breaker,
--                held, movable, movable_group, first_ask, pending, turn, paused_until of scope,
--                budget, quota_stop of the request's family
--          ARGV: op, id, priority, cost, daily quota, rate/min, burst, margin ms, poll ms,
--                lease ms, max age ms, group, weight, gate ttl ms, line count, hold,
--                window ms, cutoff day, then per line: room|plan, first day, last day,
--                version
--          -> {state, wait ms, slots left in window, daily used, daily quota, tier,
--              reason, dropped (line, first day, last day) triples...}
-- release  KEYS: lease                                ARGV: op, id
-- outcome  KEYS: breaker                              ARGV: op, ok (1|0), failures, cooldown ms
--          -> {state, changed (1|0)}
-- backoff  KEYS: paused_until (channel or scope), or quota_stop of a family; for a scope
--                also the channel's back-off index  ARGV: op, wait ms, window + margin ms,
--                                                           the scope (with the index)
-- adapt    KEYS: adaptive, paused_until, sched        ARGV: op, rate/min, limit, remaining, reset ms,
--                                                           window ms
-- pause    KEYS: pause                                ARGV: op, reason, ttl ms
-- resume   KEYS: pause, paused_until                  ARGV: op
-- status   KEYS: pause, paused_until, daily, adaptive, sched, tat, breaker, back-off index,
--                then quota_stop of each family
--          ARGV: op, daily quota, rate/min, margin ms, window ms, scopes to list
--          -> {..., scopes backed off, then per family the ms its quota stop has left,
--              then (scope, ms left) of the scopes' back-offs that end last}
-- backoffs_of KEYS: paused_until, back-off index     ARGV: op, then scopes
--          -> per scope the ms left of the back-off that holds it
-- gate_load   KEYS: gate                             ARGV: op, gate ttl ms, cutoff day, then per range:
--                                                       room|plan, first day, last day, version
--             -> the nights raised
-- gate_mark   KEYS: gate_epoch, tat...               ARGV: op, epoch, epoch ttl ms, rate/min, burst, margin ms,
--                                                       window ms
--             -> the epoch in force
-- budget      KEYS: budget                         ARGV: op, identity -> the identity in force
-- gate_epoch  KEYS: gate_epoch                       ARGV: op -> the epoch, '' when none
--
-- The schedule (sched) is a sorted set of send slots, scored by Unix ms: the slots of
-- the last window (sent, or held and passed) and every reserved future slot. A slot is
-- granted only where the window (slot - window - margin, slot] holds fewer than the
-- channel's limit, and no earlier than a GCRA at one slot per (window + margin) / limit
-- with a tolerance of burst - 1 slots allows. The window is the channel's (60 s on
-- every real channel; ARGV carries it). The margin absorbs the lateness of a timer
-- and of the network, so the channel's own window never sees more.
--
-- The held index answers "the earliest future slot held by lower-priority work, or by
-- the equal-priority group furthest over its turn" without reading the schedule: it
-- holds only future held slots, and each of its steps is O(log n) in them.
--   held           zset id by slot: every future held slot (swept once it is due)
--   movable        lex set 'p|slot|id': held slots that may still be moved (younger
--                  than max age), by priority then time
--   movable_group  lex set 'p|group|slot|id': the same, by priority, group, time
--   first_ask      zset id by first ask: the movable slots, to age them out
--   pending        hash group -> its future held slots (the turn's numerator), and
--                  'p|group' -> its movable slots at priority p
--   turn           zset 'p|group' by p * TURN + pending / weight, for every group
--                  with movable work at priority p: the one furthest over its turn
--                  at p is the highest score below (p + 1) * TURN
-- A slot given back, sent, come due or moved leaves the index (and re-enters it at
-- its new place when moved); entries a reservation writes are its res record's
-- fields (k is the slot as written in the lex sets).

if redis.replicate_commands then
  pcall(redis.replicate_commands)
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local day = 86400000
local midnight = (math.floor(now / day) + 1) * day

local op = ARGV[1]

local function tier(used, quota)
  if used >= quota then return 'stop' end
  if used * 100 >= quota * 95 then return 'throttle' end
  if used * 100 >= quota * 85 then return 'page' end
  if used * 100 >= quota * 70 then return 'warn' end
  return 'ok'
end

-- limit is the window's capacity now: the declared limit less what others use of the
-- channel's budget (adaptive), halved in the throttle tier; at least one.
local function limit_now(rate, adaptive_key, used, quota)
  local foreign = tonumber(redis.call('GET', adaptive_key) or '0') or 0
  local r = rate - foreign
  if used * 100 >= quota * 95 then r = r / 2 end
  return math.max(1, math.floor(r))
end

-- window_slot moves t, which is at or after every slot in the schedule, to where
-- the window (t - w, t] holds fewer than r slots.
-- Since t is at or after every slot, the r-th newest slot overall is the one that
-- decides: a rank lookup, O(log n), where an offset into a score range would walk r.
local function window_slot(sched, t, r, w)
  local rth = redis.call('ZREVRANGE', sched, r - 1, r - 1, 'WITHSCORES')
  if rth[2] and tonumber(rth[2]) > t - w then
    t = math.max(t, tonumber(rth[2]) + w)
  end
  return t
end

-- The held index's members sort as strings: a slot is written with a fixed width so
-- that string order is time order, and fields are joined by a byte no id contains.
local SEP = '\1'
local HI = '\255'
local function pad(ms) return string.format('%017.3f', ms) end
-- score17 writes a score exactly: Lua's own number formatting keeps 14 digits.
local function score17(x) return string.format('%.17g', x) end
-- BUDGET_TTL is how long a channel's budget identity outlives its last decision or
-- check, after which a worker with another configuration may claim the channel.
local BUDGET_TTL = 600000
-- TURN separates the priorities in the turn score: priority * TURN + held / weight.
local TURN = 1e9

-- The ordering gate: one hash per (channel, property, family), a field per room|plan
-- holding the nights sent there as ranges, one version each: records of GREC bytes,
-- sorted and disjoint, each the range's first and last night (days since 1970, six
-- digits) and its version (19 digits, zero-padded, so that versions above 2^53 — a
-- nanosecond clock — compare exactly, as strings). Neighbouring ranges of one
-- version are merged on write, so a year sent at one version a week is 52 records.
-- Nights before the cutoff (the property's today, from Go) leave the gate: a field
-- loses them whenever it is written, and every field of the hash once a day (the
-- field 'cutoff' holds the day that was last done). A request's lines of one
-- room|plan cost a binary search each and one pass over the records they skip
-- (copied a run at a time), whatever their nights.
local GREC = 31
-- EPOCH_TAG starts the gate's epoch since the gate holds ranges: an epoch without it
-- was marked over a gate of one field per night, which this script does not read,
-- so it counts as none and the gate is rebuilt from the system of record (the
-- sweep below then drops the old fields).
local EPOCH_TAG = 'ranges:'
local function vpad(v) return string.rep('0', 19 - #v) .. v end
local function rec(a, z, v) return string.format('%06d%06d', a, z) .. v end
local function rec_a(s, i) return tonumber(string.sub(s, (i - 1) * GREC + 1, (i - 1) * GREC + 6)) end
local function rec_z(s, i) return tonumber(string.sub(s, (i - 1) * GREC + 7, (i - 1) * GREC + 12)) end
local function rec_v(s, i) return string.sub(s, (i - 1) * GREC + 13, i * GREC) end

-- first_ending is the first record of s from record lo on whose last night is d or
-- later (one past the last record when none is): a binary search.
local function first_ending(s, d, lo)
  local hi = #s / GREC + 1
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if rec_z(s, mid) < d then lo = mid + 1 else hi = mid end
  end
  return lo
end

-- gate_prune is s without its nights before cutoff.
local function gate_prune(s, cutoff)
  if s == '' or rec_a(s, 1) >= cutoff then return s end
  local i = first_ending(s, cutoff, 1)
  if i > #s / GREC then return '' end
  local rest = string.sub(s, (i - 1) * GREC + 1)
  if rec_a(rest, 1) < cutoff then
    rest = rec(cutoff, rec_z(rest, 1), rec_v(rest, 1)) .. string.sub(rest, GREC + 1)
  end
  return rest
end

-- gate_merge writes lines ls — each {a, z, v}, v padded, sorted by first night and
-- disjoint — over the records of s in one pass: a night takes its line's version
-- unless s holds a newer one there. It returns the new records and sets on each
-- line drop (the ranges a newer version holds, as a flat list of first, last
-- nights), kept (the nights written) and raised (of those, the nights that were not
-- at v already). Records no line touches are copied as they are, a run at a time,
-- and neighbours of one version merge: the result is sorted, disjoint and merged
-- as s is.
local function gate_merge(s, ls)
  local n = #s / GREC
  local pieces, last = {}, nil
  local function seal()
    if last then
      pieces[#pieces + 1] = rec(last[1], last[2], last[3])
      last = nil
    end
  end
  local function emit(a, z, v)
    if last and last[3] == v and last[2] + 1 == a then
      last[2] = z
    else
      seal()
      last = {a, z, v}
    end
  end
  -- copy emits records i..j of s; those between the first and the last cannot merge
  -- with anything (s is merged) and go as one piece.
  local function copy(i, j)
    if i > j then return end
    emit(rec_a(s, i), rec_z(s, i), rec_v(s, i))
    if j > i then
      seal()
      if j > i + 1 then pieces[#pieces + 1] = string.sub(s, i * GREC + 1, (j - 1) * GREC) end
      last = {rec_a(s, j), rec_z(s, j), rec_v(s, j)}
    end
  end
  -- i is the next record of s not yet consumed; part what is left of a consumed
  -- record past the last line.
  local i, part = 1, nil
  for _, l in ipairs(ls) do
    local a, z, v = l.a, l.z, l.v
    l.drop, l.kept = {}, 0
    if part and part[2] < a then
      emit(part[1], part[2], part[3])
      part = nil
    end
    if not part then
      local j = first_ending(s, a, i)
      copy(i, j - 1)
      i = j
    end
    local cursor, same = a, 0
    while true do
      local ra, rz, rv
      if part then
        ra, rz, rv = part[1], part[2], part[3]
      elseif i <= n then
        ra, rz, rv = rec_a(s, i), rec_z(s, i), rec_v(s, i)
      else
        break
      end
      if ra > z then break end
      if part then part = nil else i = i + 1 end
      if ra < a then
        emit(ra, a - 1, rv)
        ra = a
      end
      if ra > cursor then
        emit(cursor, ra - 1, v)
        l.kept = l.kept + ra - cursor
      end
      local e = math.min(rz, z)
      if rv > v then
        emit(ra, e, rv)
        l.drop[#l.drop + 1] = ra
        l.drop[#l.drop + 1] = e
      else
        emit(ra, e, v)
        l.kept = l.kept + e - ra + 1
        if rv == v then same = same + e - ra + 1 end
      end
      cursor = e + 1
      if rz > z then
        part = {z + 1, rz, rv}
        break
      end
    end
    if cursor <= z then
      emit(cursor, z, v)
      l.kept = l.kept + z - cursor + 1
    end
    l.raised = l.kept - same
  end
  if part then emit(part[1], part[2], part[3]) end
  copy(i, n)
  seal()
  return table.concat(pieces)
end

-- gate_fields reads and writes the room|plan fields of one gate hash, each read once
-- and pruned to the cutoff, each written once at the end (flush).
local function gate_fields(key, cutoff)
  local cur, orig = {}, {}
  local g = {}
  function g.get(f)
    if cur[f] == nil then
      orig[f] = redis.call('HGET', key, f) or ''
      if #orig[f] % GREC ~= 0 then
        cur[f] = ''
      else
        cur[f] = gate_prune(orig[f], cutoff)
      end
    end
    return cur[f]
  end
  -- write writes lines ls (each {k = room|plan, a, z, v}, v padded, a at or after
  -- the cutoff), in their order, and sets drop, kept and raised on each (gate_merge).
  -- The lines of one room|plan are merged in one pass when they are disjoint, as a
  -- request's lines are; lines that overlap go one pass each, in order, so that a
  -- later line never lowers what an earlier one wrote.
  function g.write(ls)
    local by, order = {}, {}
    for _, l in ipairs(ls) do
      if not by[l.k] then
        by[l.k] = {}
        order[#order + 1] = l.k
      end
      table.insert(by[l.k], l)
    end
    for _, f in ipairs(order) do
      local group = by[f]
      local sorted = {}
      for k, l in ipairs(group) do sorted[k] = l end
      table.sort(sorted, function(x, y) return x.a < y.a end)
      local disjoint = true
      for k = 2, #sorted do
        if sorted[k].a <= sorted[k - 1].z then disjoint = false end
      end
      if disjoint then
        cur[f] = gate_merge(g.get(f), sorted)
      else
        for _, l in ipairs(group) do cur[f] = gate_merge(g.get(f), {l}) end
      end
    end
  end
  -- sweep prunes every other field of the hash once a day.
  function g.sweep()
    local m = redis.call('HGET', key, 'cutoff')
    if m and tonumber(m) >= cutoff then return end
    local all = redis.call('HGETALL', key)
    if #all == 0 then return end
    for i = 1, #all, 2 do
      local f = all[i]
      if f ~= 'cutoff' and cur[f] == nil then
        orig[f] = all[i + 1]
        if #orig[f] % GREC ~= 0 then
          -- A night's field of the gate before it held ranges: its versions were
          -- loaded again by the rebuild the epoch's tag asked for (gate_epoch).
          cur[f] = ''
        else
          cur[f] = gate_prune(orig[f], cutoff)
        end
      end
    end
    cur['cutoff'], orig['cutoff'] = tostring(cutoff), m or ''
  end
  -- flush writes what changed and reports whether it wrote any range.
  function g.flush(ttl)
    local sets, dels = {}, {}
    for f, s in pairs(cur) do
      if s ~= orig[f] then
        if s == '' then
          dels[#dels + 1] = f
        else
          sets[#sets + 1] = f
          sets[#sets + 1] = s
        end
      end
    end
    -- In parts, as unpack bounds how many values one call can take.
    for i = 1, #dels, 1000 do redis.call('HDEL', key, unpack(dels, i, math.min(#dels, i + 999))) end
    for i = 1, #sets, 2000 do redis.call('HSET', key, unpack(sets, i, math.min(#sets, i + 1999))) end
    if #sets > 0 then redis.call('PEXPIRE', key, ttl) end
    return #sets > 0
  end
  return g
end

if op == 'reserve' then
  local id = ARGV[2]
  local prio = tonumber(ARGV[3])
  local cost = tonumber(ARGV[4])
  local quota = tonumber(ARGV[5])
  local rate = tonumber(ARGV[6])
  local burst = tonumber(ARGV[7])
  local margin = tonumber(ARGV[8])
  local poll = tonumber(ARGV[9])
  local lease_ms = tonumber(ARGV[10])
  local max_age = tonumber(ARGV[11])
  local group = ARGV[12]
  local weight = tonumber(ARGV[13])
  local gate_ttl = tonumber(ARGV[14])
  local nlines = tonumber(ARGV[15])
  -- hold reserves without sending: a due slot is answered as a wait of 0 and kept.
  local hold = ARGV[16] == '1'
  local window = tonumber(ARGV[17])
  -- cutoff is the property's today (days since 1970): earlier nights leave the gate.
  local cutoff = tonumber(ARGV[18])
  local sched, res = KEYS[5], KEYS[7]
  -- The held index (see "The held index" above): future held slots by time, the
  -- movable ones by priority and by priority and group, their first asks, each
  -- group's count of future held slots, and each group's turn score per priority.
  local hq, mv, mg, age, pend, turn = KEYS[11], KEYS[12], KEYS[13], KEYS[14], KEYS[15], KEYS[16]
  local w = window + margin
  -- Decisions keep the channel's budget identity (CheckConfig) alive, renewing it
  -- once its TTL fell half a minute short.
  if redis.call('PTTL', KEYS[18]) < BUDGET_TTL - 30000 then redis.call('PEXPIRE', KEYS[18], BUDGET_TTL) end

  -- pending holds, per group g, its future held slots (field g) and, per priority p,
  -- its movable ones (field p|g): what the turn scores are made of.
  -- turn_update re-scores group g (weight gw) at every priority where it has movable
  -- work: one HMGET and a ZADD per such priority.
  local function turn_update(g, gw)
    local f = {g}
    for p = 1, 5 do f[#f + 1] = p .. SEP .. g end
    local v = redis.call('HMGET', pend, unpack(f))
    local n = tonumber(v[1] or '0')
    for p = 1, 5 do
      if tonumber(v[p + 1] or '0') > 0 then
        redis.call('ZADD', turn, score17(p * TURN + n / gw), p .. SEP .. g)
      end
    end
  end
  local function movable_add(hid, h)
    redis.call('ZADD', mv, 0, h.p .. SEP .. h.k .. SEP .. hid)
    redis.call('ZADD', mg, 0, h.p .. SEP .. h.g .. SEP .. h.k .. SEP .. hid)
    redis.call('ZADD', age, score17(h.f), hid)
    redis.call('HINCRBY', pend, h.p .. SEP .. h.g, 1)
  end
  local function movable_rem(hid, h)
    if redis.call('ZREM', mv, h.p .. SEP .. h.k .. SEP .. hid) == 0 then return end
    redis.call('ZREM', mg, h.p .. SEP .. h.g .. SEP .. h.k .. SEP .. hid)
    redis.call('ZREM', age, hid)
    if redis.call('HINCRBY', pend, h.p .. SEP .. h.g, -1) <= 0 then
      redis.call('HDEL', pend, h.p .. SEP .. h.g)
      redis.call('ZREM', turn, h.p .. SEP .. h.g)
    end
  end
  -- index_add enters a future held slot; index_rem takes one out (sent, given back,
  -- due, or re-reserved), at most once whatever calls it. Both O(log n).
  local function index_add(hid, h)
    redis.call('ZADD', hq, score17(h.s), hid)
    redis.call('HINCRBY', pend, h.g, 1)
    if now - h.f < max_age then movable_add(hid, h) end
    turn_update(h.g, h.w)
  end
  local function index_rem(hid, h)
    if redis.call('ZREM', hq, hid) == 0 then return end
    if redis.call('HINCRBY', pend, h.g, -1) <= 0 then redis.call('HDEL', pend, h.g) end
    movable_rem(hid, h)
    turn_update(h.g, h.w)
  end
  -- index_move moves a movable held slot to slot t: its group's counts stay.
  local function index_move(hid, h, t)
    local k = pad(t)
    redis.call('ZADD', hq, score17(t), hid)
    redis.call('ZREM', mv, h.p .. SEP .. h.k .. SEP .. hid)
    redis.call('ZADD', mv, 0, h.p .. SEP .. k .. SEP .. hid)
    redis.call('ZREM', mg, h.p .. SEP .. h.g .. SEP .. h.k .. SEP .. hid)
    redis.call('ZADD', mg, 0, h.p .. SEP .. h.g .. SEP .. k .. SEP .. hid)
    h.s, h.k = t, k
  end
  -- keep_alive renews the schedule's keys, and with held the index's, so that they
  -- outlive slot upto by a window and a second: after that the script forgets every
  -- slot and reservation they hold, so an idle channel's schedule leaves Redis soon
  -- after its last slot. A TTL is only ever lengthened (other slots of the scope,
  -- and for res of the whole channel, may need it longer), and then by a window
  -- more, so that most calls only read it. Every key is renewed by the call that
  -- writes it: a key emptied and written again must not live on without a TTL.
  local function keep_alive(upto, held)
    local ttl = math.ceil(upto - now + w) + 1000
    local function renew(k)
      if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl + math.ceil(w)) end
    end
    renew(sched)
    renew(res)
    if held then
      for i = 11, 16 do renew(KEYS[i]) end
    end
  end
  local function entry(hid)
    local raw = redis.call('HGET', res, hid)
    if raw then return cjson.decode(raw) end
    return nil
  end

  -- Held slots that came due leave the index (their holders may still send within
  -- the margin), and work that has waited max_age is never moved again: each slot
  -- passes each step once, so both cost O(log n) amortized per slot.
  for _, hid in ipairs(redis.call('ZRANGEBYSCORE', hq, '-inf', string.format('%.3f', now))) do
    local h = entry(hid)
    if h then index_rem(hid, h) else redis.call('ZREM', hq, hid) end
  end
  for _, hid in ipairs(redis.call('ZRANGEBYSCORE', age, '-inf', string.format('%.3f', now - max_age))) do
    local h = entry(hid)
    redis.call('ZREM', age, hid)
    if h then movable_rem(hid, h) end
  end

  local used = tonumber(redis.call('GET', KEYS[3]) or '0')
  local r = limit_now(rate, KEYS[4], used, quota)
  local cur = tier(used, quota)

  -- Slots that left the window are forgotten, and with them the reservations they
  -- belonged to (a holder that comes back later asks afresh). Each slot leaves once.
  local old = redis.call('ZRANGEBYSCORE', sched, '-inf', '(' .. string.format('%.3f', now - w))
  if #old > 0 then
    for _, m in ipairs(old) do
      if not string.find(m, '@', 1, true) then redis.call('HDEL', res, m) end
    end
    redis.call('ZREMRANGEBYSCORE', sched, '-inf', '(' .. string.format('%.3f', now - w))
  end
  local left = math.max(0, r - redis.call('ZCOUNT', sched, '(' .. string.format('%.3f', now - w), string.format('%.3f', now)))

  local reason = redis.call('GET', KEYS[1])
  if reason then
    return {'paused', poll, left, used, quota, cur, reason}
  end
  -- A back-off holds the channel, or only this scope (a 429 on a per-property channel).
  local paused_until = math.max(tonumber(redis.call('GET', KEYS[2]) or '0'),
    tonumber(redis.call('GET', KEYS[17]) or '0'))
  if paused_until > now then
    return {'backoff', math.ceil(paused_until - now), left, used, quota, cur, ''}
  end
  -- A quota_exhausted answer stops only the family it came from, until the reset.
  local stop_until = tonumber(redis.call('GET', KEYS[19]) or '0')
  if stop_until > now then
    return {'quota', math.ceil(stop_until - now), left, used, quota, 'stop', 'family'}
  end
  -- The circuit breaker: open, nothing goes until the cool-down ends; then one probe
  -- request (leased like a send) tests the channel while every other waits for it.
  local brk = redis.call('HMGET', KEYS[10], 'st', 'until', 'probe', 'probe_until')
  local probe = false
  if brk[1] == 'open' then
    local untl = tonumber(brk[2])
    if now < untl then
      return {'breaker', math.ceil(untl - now), left, used, quota, cur, ''}
    end
    probe = true
  elseif brk[1] == 'half' then
    if brk[3] ~= id and tonumber(brk[4] or '0') > now then
      return {'breaker', math.ceil(math.min(tonumber(brk[4]) - now, 2000)), left, used, quota, cur, ''}
    end
    probe = true
  end
  local after = used + cost
  if after > quota then
    return {'quota', math.ceil(midnight - now), left, used, quota, 'stop', ''}
  end
  if prio >= 4 and after * 100 >= quota * 95 then
    return {'quota', math.ceil(midnight - now), left, used, quota, tier(after, quota), ''}
  end

  -- The reservation this id holds, if any.
  local e = entry(id)
  local first = now
  if e then
    first = e.f
    if e.st == 'held' and (e.s > now or hold) then
      return {'wait', math.max(0, math.ceil(e.s - now)), left, used, quota, cur, ''}
    end
    if e.st == 'sent' or now - e.s > margin then
      -- A re-send (Temporal retried the request) or a holder too late for its
      -- slot: the old slot stays in the window as sent, and a new one is needed.
      index_rem(id, e)
      redis.call('ZREM', sched, id)
      redis.call('ZADD', sched, e.s, id .. '@' .. e.s)
      e = nil
    elseif e.s <= paused_until then
      -- A slot that came due during a back-off was never used: it is given back,
      -- and its holder queues behind the back-off's end with every other waiter,
      -- at the restarted pace, rather than leave with them within the margin.
      index_rem(id, e)
      redis.call('ZREM', sched, id)
      e = nil
    end
  end

  -- pace is the pacing timestamp this request moves to if it goes: written at once
  -- for a slot it holds, but for a slot due now only once the gate lets it send, so
  -- that an answer which sends nothing leaves the pace where it was.
  local pace = nil
  local slot
  if e then
    slot = e.s
  else
    local interval = w / r
    -- Bulk work (priority 4 and 5) never uses the burst: it leaves the burst to more
    -- urgent work and keeps a saturated window evenly paced, so an urgent request
    -- finds a slot to take within one interval instead of a gap a burst left.
    local tau = 0
    if prio <= 3 then tau = (burst - 1) * interval end
    local tat_raw = redis.call('GET', KEYS[6])
    local tat = tonumber(tat_raw or '0')
    -- A back-off that ended within the window restarts the pace from its end with
    -- no burst: the requests that waited for it leave one interval apart.
    if paused_until > 0 then tat = math.max(tat, paused_until + tau) end
    local tail = math.max(now, tat - tau)
    -- The pace is kept to a microsecond in Redis; less than a millisecond is now.
    if tail - now < 1 then tail = now end
    local last = redis.call('ZREVRANGE', sched, 0, 0, 'WITHSCORES')
    if last[2] then tail = math.max(tail, tonumber(last[2])) end
    tail = window_slot(sched, tail, r, w)
    slot = tail
    -- Strict priority and turns: a request may take the earliest future slot held by
    -- lower-priority work, or the earliest held by equal-priority work of the group
    -- (property and family) furthest over its weighted turn, if that group holds more
    -- than this request's turn; the holder moves to the tail. Work that has waited
    -- max_age left the movable index above, which bounds how long bulk waits.
    -- Each candidate is one range lookup: O(log n) whatever the schedule holds.
    local victim = nil
    if tail > now then
      local lo, hi = pad(now) .. HI, pad(tail) .. SEP
      for p = prio + 1, 5 do
        local x = redis.call('ZRANGEBYLEX', mv, '(' .. p .. SEP .. lo, '(' .. p .. SEP .. hi, 'LIMIT', 0, 1)
        if x[1] then
          local k, hid = string.match(x[1], '^%d' .. SEP .. '([^' .. SEP .. ']+)' .. SEP .. '(.*)$')
          if not victim or k < victim.k then victim = {k = k, id = hid} end
        end
      end
      local mine = (tonumber(redis.call('HGET', pend, group) or '0') + 1) / weight
      local over = redis.call('ZREVRANGEBYSCORE', turn, '(' .. score17((prio + 1) * TURN),
        '(' .. score17(prio * TURN + mine), 'LIMIT', 0, 1)
      if over[1] then
        local x = redis.call('ZRANGEBYLEX', mg, '(' .. over[1] .. SEP .. lo, '(' .. over[1] .. SEP .. hi, 'LIMIT', 0, 1)
        if x[1] then
          local rest = string.sub(x[1], #over[1] + 2)
          local k, hid = string.match(rest, '^([^' .. SEP .. ']+)' .. SEP .. '(.*)$')
          if not victim or k < victim.k then victim = {k = k, id = hid} end
        end
      end
    end
    if victim then
      local h = entry(victim.id)
      slot = tonumber(victim.k)
      index_move(victim.id, h, tail)
      h.t0, h.t1 = nil, nil
      redis.call('ZADD', sched, score17(tail), victim.id)
      redis.call('HSET', res, victim.id, cjson.encode(h))
    end
    local next_tat = string.format('%.3f', math.max(tat, tail) + interval)
    pace = {v = next_tat, ttl = math.ceil(math.max(tat, tail) + interval - now + w)}
    e = {st = 'held', s = slot, k = pad(slot), p = prio, g = group, w = weight, f = first}
    if not victim then
      -- Only a request that took the tail may give its pace back: after a move the
      -- pace also covers the holder that went to the tail.
      e.t0, e.t1 = tat_raw or '', next_tat
    end
    redis.call('ZADD', sched, score17(slot), id)
    if slot > now or hold then
      redis.call('SET', KEYS[6], pace.v, 'PX', pace.ttl)
      pace = nil
      if slot > now then index_add(id, e) end
      redis.call('HSET', res, id, cjson.encode(e))
      keep_alive(tail, true)
      return {'wait', math.max(0, math.ceil(slot - now)), left, used, quota, cur, ''}
    end
  end

  -- The slot is due. The ordering gate decides what of the request may go.
  local lines = {}
  local bykey = {}
  for i = 0, nlines - 1 do
    local b = 19 + i * 4
    local l = {k = ARGV[b], a = tonumber(ARGV[b + 1]), z = tonumber(ARGV[b + 2]), v = ARGV[b + 3]}
    lines[#lines + 1] = l
    bykey[l.k] = bykey[l.k] or {}
    table.insert(bykey[l.k], l)
  end
  -- release_slot gives the slot back, and the pace with it if nothing was reserved
  -- after it: the schedule is left as if the call had not been made.
  local function release_slot()
    index_rem(id, e)
    redis.call('ZREM', sched, id)
    redis.call('HDEL', res, id)
    if e.t1 and redis.call('GET', KEYS[6]) == e.t1 then
      local before = tonumber(e.t0)
      if before and before - now + w > 0 then
        redis.call('SET', KEYS[6], e.t0, 'PX', math.ceil(before - now + w))
      else
        redis.call('DEL', KEYS[6])
      end
    end
  end

  -- Two requests touching the same nights are never in flight together.
  local leases = redis.call('HGETALL', KEYS[9])
  local busy = 0
  for i = 1, #leases, 2 do
    local holder = leases[i]
    if holder ~= id then
      local lv = cjson.decode(leases[i + 1])
      if lv.e <= now then
        redis.call('HDEL', KEYS[9], holder)
      else
        for _, hl in ipairs(lv.l) do
          for _, l in ipairs(bykey[hl[1]] or {}) do
            if hl[2] <= l.z and hl[3] >= l.a then busy = math.max(busy, lv.e) end
          end
        end
      end
    end
  end
  if busy > 0 then
    release_slot()
    return {'blocked', math.ceil(math.min(busy - now, 2000)), left, used, quota, cur, ''}
  end

  -- Nights already sent with a newer version are dropped; the rest are recorded.
  -- A line with no nights (malformed) is left for the channel to refuse; nights
  -- before the cutoff are no longer in the gate, so they go unchecked (and leased).
  local gate = gate_fields(KEYS[8], cutoff)
  local dropped, kept, live, writes = {}, {}, 0, {}
  for _, l in ipairs(lines) do
    l.c = math.max(l.a, cutoff)
    if l.z >= l.c then
      writes[#writes + 1] = {k = l.k, a = l.c, z = l.z, v = vpad(l.v)}
      l.w = writes[#writes]
    end
  end
  gate.write(writes)
  for li, l in ipairs(lines) do
    if l.z < l.a then
      live = live + 1
    elseif not l.w then
      kept[#kept + 1] = {l.k, l.a, l.z}
      live = live + 1
    else
      local drop = l.w.drop
      for d = 1, #drop, 2 do
        dropped[#dropped + 1] = li - 1
        dropped[#dropped + 1] = drop[d]
        dropped[#dropped + 1] = drop[d + 1]
      end
      if l.w.kept > 0 then
        kept[#kept + 1] = {l.k, l.a, l.z}
        live = live + 1
      end
    end
  end
  if nlines > 0 and live == 0 then
    release_slot()
    local out = {'superseded', 0, left, used, quota, cur, ''}
    for _, x in ipairs(dropped) do out[#out + 1] = x end
    return out
  end
  if #kept > 0 then
    gate.sweep()
    gate.flush(gate_ttl)
    local lease = {e = now + lease_ms, l = kept}
    -- A re-send while this id's earlier attempt is still leased (its answer never
    -- came: the channel may still apply it) keeps that attempt's nights and end
    -- (u), so settling the re-send does not free them early (release).
    local prev = redis.call('HGET', KEYS[9], id)
    if prev then prev = cjson.decode(prev) end
    if prev and prev.e > now then
      lease.u = math.max(prev.e, prev.u or 0)
      local seen = {}
      for _, x in ipairs(kept) do seen[x[1] .. '|' .. x[2] .. '|' .. x[3]] = true end
      for _, x in ipairs(prev.l) do
        if not seen[x[1] .. '|' .. x[2] .. '|' .. x[3]] then kept[#kept + 1] = x end
      end
    end
    redis.call('HSET', KEYS[9], id, cjson.encode(lease))
    redis.call('PEXPIRE', KEYS[9], lease_ms + w)
  end

  if probe then
    redis.call('HSET', KEYS[10], 'st', 'half', 'probe', id, 'probe_until', string.format('%.3f', now + lease_ms))
    redis.call('PEXPIRE', KEYS[10], day)
  end
  if pace then redis.call('SET', KEYS[6], pace.v, 'PX', pace.ttl) end
  index_rem(id, e)
  e.st, e.t0, e.t1 = 'sent', nil, nil
  redis.call('HSET', res, id, cjson.encode(e))
  keep_alive(slot, false)
  redis.call('INCRBY', KEYS[3], cost)
  redis.call('PEXPIREAT', KEYS[3], midnight)
  local out = {'send', 0, math.max(0, left - 1), after, quota, tier(after, quota), ''}
  for _, x in ipairs(dropped) do out[#out + 1] = x end
  return out
end

if op == 'release' then
  -- An earlier attempt of the request that went unanswered keeps the nights until
  -- its own lease ends (u, see the lease above); otherwise they are free now.
  local raw = redis.call('HGET', KEYS[1], ARGV[2])
  if raw then
    local lv = cjson.decode(raw)
    if lv.u and lv.u > now then
      lv.e, lv.u = lv.u, nil
      redis.call('HSET', KEYS[1], ARGV[2], cjson.encode(lv))
      return 0
    end
  end
  return redis.call('HDEL', KEYS[1], ARGV[2])
end

if op == 'outcome' then
  -- A 5xx or timeout counts toward the streak that opens the breaker; any answer
  -- that shows the channel up closes it. A failed probe opens it again.
  local ok = ARGV[2] == '1'
  local failures = tonumber(ARGV[3])
  local cooldown = tonumber(ARGV[4])
  local st = redis.call('HGET', KEYS[1], 'st') or 'closed'
  if ok then
    if st == 'closed' then
      redis.call('HDEL', KEYS[1], 'n')
      return {'closed', 0}
    end
    redis.call('DEL', KEYS[1])
    return {'closed', 1}
  end
  local n = redis.call('HINCRBY', KEYS[1], 'n', 1)
  redis.call('PEXPIRE', KEYS[1], day)
  if st == 'half' or (st == 'closed' and n >= failures) then
    redis.call('HSET', KEYS[1], 'st', 'open', 'until', string.format('%.3f', now + cooldown), 'probe', '', 'probe_until', '0')
    return {'open', 1}
  end
  return {st, 0}
end

if op == 'backoff' then
  local wait = tonumber(ARGV[2])
  local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
  -- A shorter Retry-After from a later response must not cut short an earlier, longer one.
  if now + wait > cur then
    -- The end is kept a window longer: reserve restarts the pace from it without a
    -- burst, so whoever waited leaves one interval apart, not together.
    redis.call('SET', KEYS[1], string.format('%.3f', now + wait), 'PX', wait + tonumber(ARGV[3]))
    if KEYS[2] then
      -- A scope's back-off is also listed in the channel's index of them (scope by
      -- end), for Status and backoffs_of; ended ones leave it here, each once.
      redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('%.3f', now))
      redis.call('ZADD', KEYS[2], string.format('%.3f', now + wait), ARGV[4])
      if redis.call('PTTL', KEYS[2]) < wait + tonumber(ARGV[3]) then
        redis.call('PEXPIRE', KEYS[2], wait + tonumber(ARGV[3]))
      end
    end
    return wait
  end
  return math.ceil(cur - now)
end

if op == 'adapt' then
  -- The server's headers lower the limit only when they report less room than our
  -- own schedule leaves: our traffic is already counted, so it never feeds back.
  local rate = tonumber(ARGV[2])
  local limit = tonumber(ARGV[3])
  local remaining = tonumber(ARGV[4])
  local reset = tonumber(ARGV[5])
  local window = tonumber(ARGV[6])
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
  local rate = tonumber(ARGV[3])
  local margin = tonumber(ARGV[4])
  local w = tonumber(ARGV[5]) + margin
  local reason = redis.call('GET', KEYS[1]) or ''
  local paused_for = 0
  local paused_until = tonumber(redis.call('GET', KEYS[2]) or '0')
  if paused_until > now then paused_for = math.ceil(paused_until - now) end
  local used = tonumber(redis.call('GET', KEYS[3]) or '0')
  local foreign = tonumber(redis.call('GET', KEYS[4]) or '0') or 0
  local foreign_for = 0
  if foreign > 0 then foreign_for = redis.call('PTTL', KEYS[4]) end
  local r = limit_now(rate, KEYS[4], used, quota)
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
  -- The scopes' back-offs that end last, at most ARGV[6] of them: O(log n + listed).
  local listed = redis.call('ZREVRANGEBYSCORE', KEYS[8], '+inf', live, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[6]))
  for i = 1, #listed, 2 do
    out[#out + 1] = listed[i]
    out[#out + 1] = math.ceil(tonumber(listed[i + 1]) - now)
  end
  return out
end

-- What is left of the back-off holding each of the given scopes: the channel's or
-- the scope's own, whichever ends later. One ZMSCORE: O(k log n) for k scopes.
if op == 'backoffs_of' then
  local channel_until = tonumber(redis.call('GET', KEYS[1]) or '0')
  local out = {}
  -- In steps of 1000 scopes: unpack is bounded by Lua's stack.
  for i = 2, #ARGV, 1000 do
    local ends = redis.call('ZMSCORE', KEYS[2], unpack(ARGV, i, math.min(#ARGV, i + 999)))
    for j = 1, #ends do
      local e = math.max(channel_until, tonumber(ends[j] or '0') or 0)
      out[#out + 1] = math.max(0, math.ceil(e - now))
    end
  end
  return out
end

-- The gate rebuild after a Redis loss (rebuild.go). Loading only raises versions, so
-- a send admitted meanwhile is never lowered; marking starts the channel's buckets
-- empty (the window before the loss is unknown) and says the gate is whole again.
if op == 'gate_load' then
  local ttl = tonumber(ARGV[2])
  local cutoff = tonumber(ARGV[3])
  local gate = gate_fields(KEYS[1], cutoff)
  local writes = {}
  for i = 4, #ARGV, 4 do
    local a, z = math.max(tonumber(ARGV[i + 1]), cutoff), tonumber(ARGV[i + 2])
    if a <= z then writes[#writes + 1] = {k = ARGV[i], a = a, z = z, v = vpad(ARGV[i + 3])} end
  end
  gate.write(writes)
  local raised = 0
  for _, w in ipairs(writes) do raised = raised + w.raised end
  gate.flush(ttl)
  if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
  return raised
end

if op == 'gate_mark' then
  local cur = redis.call('GET', KEYS[1])
  if cur and string.sub(cur, 1, #EPOCH_TAG) == EPOCH_TAG then return string.sub(cur, #EPOCH_TAG + 1) end
  local ttl = tonumber(ARGV[3])
  local rate = tonumber(ARGV[4])
  local burst = tonumber(ARGV[5])
  local w = tonumber(ARGV[7]) + tonumber(ARGV[6])
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
  redis.call('SET', KEYS[1], EPOCH_TAG .. ARGV[2], 'PX', ttl)
  return ARGV[2]
end

-- The channel's budget identity: the first worker to check writes its own; every
-- later one gets the identity in force back, to compare with its own.
if op == 'budget' then
  local cur = redis.call('GET', KEYS[1])
  if not cur then
    redis.call('SET', KEYS[1], ARGV[2], 'PX', BUDGET_TTL)
    return ARGV[2]
  end
  if cur == ARGV[2] then redis.call('PEXPIRE', KEYS[1], BUDGET_TTL) end
  return cur
end

if op == 'gate_epoch' then
  local cur = redis.call('GET', KEYS[1]) or ''
  if string.sub(cur, 1, #EPOCH_TAG) ~= EPOCH_TAG then return '' end
  return string.sub(cur, #EPOCH_TAG + 1)
end

return redis.error_reply('paritysync limiter: unknown op ' .. tostring(op))
