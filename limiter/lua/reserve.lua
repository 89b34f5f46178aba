-- reserve: one decision for one request.
-- KEYS: pause, paused_until, daily, adaptive, sched, tat, res, gate, lease, breaker,
--       index, turn, paused_until of scope, budget, quota_stop of the request's
--       family, budget_renewed, alive (the scope's keys' mark)
-- ARGV: id, priority, cost, daily quota, rate/min, burst, margin ms, poll ms,
--       lease ms, max age ms, group, weight, gate ttl ms, line count, hold,
--       window ms, cutoff day, channel-wide scope (1|0), then per line:
--       room|plan, first day, last day, version
-- -> {state, wait ms, slots left in window, daily used, daily quota, tier,
--     reason, dropped (line, first day, last day) triples...}

-- reserve is a function of the limiter's library (FUNCTION LOAD, then FCALL): the
-- library is loaded once per server, so its helpers and constants below are made
-- once, not on every decision as a script's top level is. What they share of one
-- call is the call's state, below, set at the call's start (reserve): Redis runs
-- one call at a time, and each call sets all of it before anything reads it.
local KEYS, ARGV
-- sched and res: the scope's schedule and the reservations. The held index (see "The
-- held index" in the prelude): the movable held slots by priority and by priority
-- and group, in one lex set (idx); and in one scored set (turn) each group's counts
-- and turn score per priority, with the held slots' times (when each comes due, and
-- when each movable one ages out).
local sched, res, idx, turn
-- w is the window with its margin; max_age how long a held slot may be moved.
local w, max_age
-- res_in_scope: the channel is limited as a whole, so the reservations (res) are
-- its one scope's, and the scope's mark (keep_alive) speaks for them too.
local res_in_scope
-- alive is the scope's mark (keep_alive).
local alive

local PRIO = {'1', '2', '3', '4', '5'}
-- The index's lower bounds of priority p's slots (by_prio), and the turn scores'
-- upper bound at p: (p + 1) * TURN, excluded.
-- Written as literals ('\1' is SEP): a constant costs nothing per call, where a
-- concatenation makes a new string each time.
local BY_PRIO = {'(m1\1', '(m2\1', '(m3\1', '(m4\1', '(m5\1'}
local TURN_BELOW = {'(2e15', '(3e15', '(4e15', '(5e15', '(6e15'}
-- num0 reads a value MGET or HMGET gave: 0 when the key or field is missing.
local function num0(v)
  if v then return v + 0 end
  return 0
end
-- ms_up writes a time in turn in whole ms, rounded up: a sorted set of up to 128
-- members keeps its scores as text, and one with a fraction is parsed again
-- (strtod) on every look at it; a held slot leaves the index at most a ms later.
local function ms_up(x) return int(math.ceil(x)) end

-- turn also holds what the turn scores are made of, each group's counts, scored
-- below every turn score (below TURN): 'n'..SEP..g is MASK times the group's future
-- held slots (the turn's numerator) plus the priorities where it has movable work,
-- a bit each (BIT[p]), so that one ZINCRBY answers both; 'c'..p..SEP..g counts its
-- movable slots at p (the bit is set while it is above zero, and exactly then turn
-- holds the group's turn score p|g). incr adds d to member m of turn and returns
-- the new score, O(log n).
local MASK = 32
local BIT = {1, 2, 4, 8, 16}
local function incr(m, d) return redis.call('ZINCRBY', turn, d, m) + 0 end
local function held_of(g) return 'n' .. SEP .. g end
-- The increment of a group's count, as a string: a slot more.
local ONE_HELD = '32'
-- turn_scores writes group g's turn score (n held slots over its weight gw) at every
-- priority of mask into tz, score and member pairs for turn that the caller writes.
local function turn_scores(g, gw, n, mask, tz)
  for p = 1, 5 do
    if mask % (2 * BIT[p]) >= BIT[p] then
      tz[#tz + 1] = turn_score(p, n, gw)
      tz[#tz + 1] = PRIO[p] .. SEP .. g
    end
  end
end
-- A held slot's members of the index, by priority (m) and by priority and group (g),
-- and of turn, its due time (h, scored by the slot) and, while movable, its age
-- limit (a, scored by the first ask and max age).
local function by_prio(hid, h) return 'm' .. h.p .. SEP .. h.k .. SEP .. hid end
local function by_group(hid, h) return 'g' .. h.p .. SEP .. h.g .. SEP .. h.k .. SEP .. hid end
-- movable_left counts one movable slot fewer for h's group at h's priority; when it
-- was the last, the group leaves turn at that priority. It returns the change to
-- the group's 'n' score that this makes: 0, or minus the priority's bit.
local function movable_left(h)
  local pg = h.p .. SEP .. h.g
  if incr('c' .. pg, '-1') > 0 then return 0 end
  redis.call('ZREM', turn, 'c' .. pg, pg)
  return -BIT[h.p + 0]
end
-- movable_rem takes a held slot out of the movable index (aged out); it reports
-- whether the slot was movable.
local function movable_rem(hid, h)
  if redis.call('ZREM', turn, 'a' .. SEP .. hid) == 0 then return false end
  redis.call('ZREM', idx, by_prio(hid, h), by_group(hid, h))
  local d = movable_left(h)
  if d ~= 0 then incr(held_of(h.g), int(d)) end
  return true
end
-- index_add enters a future held slot, its group's 'n' score already raised to s
-- (one slot more) and, where the slot is movable, its count at its priority (with
-- the priority's bit in s when it is the first); its members go into ix (the index) and tz (turn), score and
-- member pairs the caller writes with the decision's other writes of those keys,
-- one ZADD each. index_rem takes one out (sent, given back, due, or re-reserved),
-- at most once whatever calls it. Both O(log n), with no read of the group's
-- other priorities: its mask says where it has movable work.
local function index_add(hid, h, s, ix, tz)
  tz[#tz + 1] = ms_up(h.s)
  tz[#tz + 1] = 'h' .. SEP .. hid
  if now - h.f < max_age then
    ix[#ix + 1] = '0'
    ix[#ix + 1] = by_prio(hid, h)
    ix[#ix + 1] = '0'
    ix[#ix + 1] = by_group(hid, h)
    tz[#tz + 1] = int(math.floor(h.f + max_age))
    tz[#tz + 1] = 'a' .. SEP .. hid
  end
  local mask = s % MASK
  turn_scores(h.g, h.w, (s - mask) / MASK, mask, tz)
end
local function index_rem(hid, h)
  -- A held slot has its due time in turn, and a movable one its age limit too.
  local n = redis.call('ZREM', turn, 'h' .. SEP .. hid, 'a' .. SEP .. hid)
  if n == 0 then return end
  local d = -MASK
  if n > 1 then
    redis.call('ZREM', idx, by_prio(hid, h), by_group(hid, h))
    d = d + movable_left(h)
  end
  local s = incr(held_of(h.g), int(d))
  if s <= 0 then
    redis.call('ZREM', turn, held_of(h.g))
    return
  end
  local tz = {}
  local mask = s % MASK
  turn_scores(h.g, h.w, (s - mask) / MASK, mask, tz)
  if #tz > 0 then redis.call('ZADD', turn, unpack(tz)) end
end
-- index_move moves a movable held slot to slot t, written as tk: its group's counts
-- stay. Its new members go into ix and tz, as index_add's; its old members of the
-- index go into rm, which the caller takes out after it wrote ix, so that the index
-- is never emptied (and so never made again without a TTL) within the decision.
local function index_move(hid, h, t, tk, ix, tz, rm)
  rm[#rm + 1] = by_prio(hid, h)
  rm[#rm + 1] = by_group(hid, h)
  h.s, h.ss, h.k = t, tk, tk
  ix[#ix + 1] = '0'
  ix[#ix + 1] = by_prio(hid, h)
  ix[#ix + 1] = '0'
  ix[#ix + 1] = by_group(hid, h)
  tz[#tz + 1] = ms_up(t)
  tz[#tz + 1] = 'h' .. SEP .. hid
end
-- keep_alive renews the schedule's keys and the index's, so that they outlive slot
-- upto by a window and a second: after that the script forgets every
-- slot and reservation they hold, so an idle channel's schedule leaves Redis soon
-- after its last slot. A TTL is only ever lengthened (other slots of the scope,
-- and for res of the whole channel, may need it longer), and then by a window
-- more, so that most calls only read it. Every key is renewed by the call that
-- writes it: a key emptied and written again must not live on without a TTL.
--
-- Reading four TTLs was four calls a decision, so the scope's keys have a mark,
-- alive (KEYS[17], read with the channel's plain values): a time (Unix ms) that
-- the schedule, the index and turn of the scope, and on a channel-wide scope the
-- reservations too, each outlive if they exist. It is written from their TTLs as
-- read, and expires at that time itself. It stays true as TTLs are only lengthened,
-- and a key that leaves Redis (emptied) makes it no less true; what would make it
-- untrue is a key made anew, without a TTL, which a call that finds the mark in
-- time does not renew. So a call renews whenever it may have made a key anew
-- (fresh): it knows the keys it writes existed before it wrote them (the
-- schedule's newest slot it read, an EXISTS of the others), and it writes a key it
-- also takes members out of before it takes them out, so that no key is emptied
-- and made again within one call. The reservations are shared by the scopes of a
-- per-property channel, one of which could make them anew with a shorter TTL than
-- another's mark says: there they are renewed as before, by their TTL.
local function renew(k, ttl)
  local p = redis.call('PTTL', k)
  if p == -2 then return nil end
  if p < ttl then
    p = ttl + math.ceil(w)
    redis.call('PEXPIRE', k, int(p))
  end
  return now + p
end
local function keep_alive(upto, fresh)
  local ttl = math.ceil(upto - now + w) + 1000
  if not res_in_scope then renew(res, ttl) end
  if not fresh and alive >= now + ttl then return end
  local keys = {sched, idx, turn, res_in_scope and res or nil}
  local x = math.huge
  for _, k in ipairs(keys) do
    local e = renew(k, ttl)
    if e and e < x then x = e end
  end
  if x < math.huge and x - now >= 1 then
    x = math.floor(x)
    redis.call('SET', KEYS[17], int(x), 'PX', int(x - now))
  end
end
-- A reservation's record (res) is its fields joined by SEP, the group last: a
-- string.format and a string.match, where JSON cost several microseconds a record
-- each way. st is 'held' or 'sent'; s the slot, k the slot as written in the lex
-- sets, p the priority, w the group's weight, f the first ask; t0 and t1 the pace
-- before and after the slot was taken ('' and nil when it may not give the pace
-- back); g the turn group. The priority and the weight stay strings, and so do the
-- slot (ss, exact) and the first ask (fk, padded) as read, unless they change:
-- every number written costs a conversion. One concatenation builds the record (a
-- string.format formats each field apart).
local function encode(h)
  return h.st .. SEP .. (h.ss or score17(h.s)) .. SEP .. (h.k or '') .. SEP .. h.p .. SEP .. h.w .. SEP ..
    (h.fk or pad(h.f)) .. SEP .. (h.t0 or '') .. SEP .. (h.t1 or '') .. SEP .. h.g
end
local function decode(raw)
  if string.byte(raw) == 123 then return cjson.decode(raw) end -- '{': written as JSON before
  local st, s, k, p, gw, f, t0, t1, g = string.match(raw,
    '^([^\1]*)\1([^\1]*)\1([^\1]*)\1([^\1]*)\1([^\1]*)\1([^\1]*)\1([^\1]*)\1([^\1]*)\1(.*)$')
  if t1 == '' then t1 = nil end
  -- A first ask written exactly (%.17g, before) is padded again where needed.
  local fk = nil
  if #f == 17 and string.byte(f, 14) == 46 then fk = f end -- '.'
  return {st = st, s = s + 0, ss = s, k = k, p = p, w = gw, f = f + 0, fk = fk, t0 = t0, t1 = t1, g = g}
end
local function entry(hid)
  local raw = redis.call('HGET', res, hid)
  if raw then return decode(raw) end
  return nil
end

local function reserve(keys, args)
  KEYS, ARGV = keys, args
  clock()
  local id = ARGV[1]
  -- The priority and the weight stay strings where they are written as such. The
  -- numbers only a paused answer or a send reads (poll, lease, gate TTL, line count,
  -- cutoff) are read there.
  local prio_s, weight_s = ARGV[2], ARGV[12]
  local prio = prio_s + 0
  local cost = ARGV[3] + 0
  local quota = ARGV[4] + 0
  local rate = ARGV[5] + 0
  local burst = ARGV[6] + 0
  local margin = ARGV[7] + 0
  max_age = ARGV[10] + 0
  local group = ARGV[11]
  local weight = weight_s + 0
  -- hold reserves without sending: a due slot is answered as a wait of 0 and kept.
  local hold = ARGV[15] == '1'
  local window = ARGV[16] + 0
  sched, res, idx, turn = KEYS[5], KEYS[7], KEYS[11], KEYS[12]
  w = window + margin
  local now_k = pad(now)
  res_in_scope = ARGV[18] == '1'
  alive = 0
  -- fresh is set once this call may have made one of the keys the mark speaks of anew.
  local fresh = false

  -- Held slots that came due leave the index (their holders may still send within
  -- the margin), and work that has waited max_age is never moved again: each slot
  -- passes each step once, so both cost O(log n) amortized per slot. Both times are
  -- in turn, scored in Unix ms, between the counts and the turn scores: one range
  -- finds both.
  -- A member's id follows its kind and a SEP.
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', turn, TIMES, now_k)) do
    local hid = string.sub(m, 3)
    local h = entry(hid)
    if not h then
      redis.call('ZREM', turn, m)
    elseif string.sub(m, 1, 1) == 'h' then
      index_rem(hid, h)
    else
      movable_rem(hid, h)
    end
  end

  -- The channel's plain values, in one read: none is written before it is used.
  local vals = redis.call('MGET', KEYS[1], KEYS[2], KEYS[13], KEYS[15], KEYS[3], KEYS[4], KEYS[6], KEYS[16], KEYS[17])
  alive = num0(vals[9])
  -- Decisions keep the channel's budget identity (CheckConfig) alive: renewed to its
  -- full TTL whenever the mark of its last renewal (half a minute) is gone, so that a
  -- decision reads one more value where it asked the budget's TTL.
  if not vals[8] and redis.call('PEXPIRE', KEYS[14], int(BUDGET_TTL)) == 1 then
    redis.call('SET', KEYS[16], '1', 'PX', int(BUDGET_RENEW))
  end
  local used = num0(vals[5])
  local r = limit_now(rate, num0(vals[6]), used, quota)
  local cur = tier(used, quota)

  -- Slots that left the window (now - w, now] are forgotten, and with them the
  -- reservations they belonged to (a holder that comes back later asks afresh). Each
  -- slot leaves once. What is left up to now is the window's: a count from the start,
  -- which Redis finds without a search.
  local since = pad(now - w)
  local old = redis.call('ZRANGEBYSCORE', sched, '-inf', since)
  if #old > 0 then
    for _, m in ipairs(old) do
      if not string.find(m, '@', 1, true) then redis.call('HDEL', res, m) end
    end
    redis.call('ZREMRANGEBYSCORE', sched, '-inf', since)
  end
  local left = math.max(0, r - redis.call('ZCOUNT', sched, '-inf', now_k))

  local reason = vals[1]
  if reason then
    return {'paused', ARGV[8] + 0, left, used, quota, cur, reason}
  end
  -- A back-off holds the channel, or only this scope (a 429 on a per-property channel).
  local paused_until = math.max(num0(vals[2]), num0(vals[3]))
  if paused_until > now then
    return {'backoff', math.ceil(paused_until - now), left, used, quota, cur, ''}
  end
  -- A quota_exhausted answer stops only the family it came from, until the reset.
  local stop_until = num0(vals[4])
  if stop_until > now then
    return {'quota', math.ceil(stop_until - now), left, used, quota, 'stop', 'family'}
  end
  -- The circuit breaker: open, nothing goes until the cool-down ends; then one probe
  -- request (leased like a send) tests the channel while every other waits for it.
  local brk = redis.call('HMGET', KEYS[10], 'st', 'until', 'probe', 'probe_until')
  local probe = false
  if brk[1] == 'open' then
    local untl = brk[2] + 0
    if now < untl then
      return {'breaker', math.ceil(untl - now), left, used, quota, cur, ''}
    end
    probe = true
  elseif brk[1] == 'half' then
    if brk[3] ~= id and num0(brk[4]) > now then
      return {'breaker', math.ceil(math.min(brk[4] - now, 2000)), left, used, quota, cur, ''}
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
  local first, first_k = now, now_k
  if e then
    first, first_k = e.f, e.fk or pad(e.f)
    if e.st == 'held' and (e.s > now or hold) then
      return {'wait', math.max(0, math.ceil(e.s - now)), left, used, quota, cur, ''}
    end
    if e.st == 'sent' or now - e.s > margin then
      -- A re-send (Temporal retried the request) or a holder too late for its
      -- slot: the old slot stays in the window as sent, and a new one is needed.
      index_rem(id, e)
      redis.call('ZADD', sched, e.s, id .. '@' .. e.s)
      redis.call('ZREM', sched, id)
      fresh = true
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

  -- pace is the pacing timestamp this request moves to if it goes (and its TTL):
  -- written at once for a slot it holds, but for a slot due now only once the gate
  -- lets it send, so that an answer which sends nothing leaves the pace where it was.
  local pace, pace_ttl = nil, nil
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
    local tat_raw = vals[7]
    local tat = num0(tat_raw)
    -- A back-off that ended within the window restarts the pace from its end with
    -- no burst: the requests that waited for it leave one interval apart.
    if paused_until > 0 then tat = math.max(tat, paused_until + tau) end
    local tail = math.max(now, tat - tau)
    -- The pace is kept to a microsecond in Redis; less than a millisecond is now.
    if tail - now < 1 then tail = now end
    local last = redis.call('ZREVRANGE', sched, '0', '0', 'WITHSCORES')
    if last[2] then tail = math.max(tail, last[2] + 0) end
    tail = window_slot(sched, tail, r, w)
    -- What this call writes it may make anew (keep_alive): the schedule unless it
    -- has a slot, the index and turn where the slot is held, and the reservations
    -- where the mark speaks for them.
    if not last[2] then fresh = true end
    if tail > now or hold then
      local n
      if res_in_scope then n = redis.call('EXISTS', idx, turn, res) - 1 else n = redis.call('EXISTS', idx, turn) end
      if n < 2 then fresh = true end
    elseif res_in_scope and redis.call('EXISTS', res) == 0 then
      fresh = true
    end
    -- A slot is written in whole ms: a whole score is kept as an integer in a small
    -- sorted set (up to 128 members: a window's slots on most channels), where a
    -- fraction is parsed again on every look at it, by every count and insert that
    -- walks the set. A future slot is taken at the next whole ms: written padded
    -- (pad), it reads back as the same number, so the one string is its score in
    -- the schedule, its key in the index and its slot in the record. Later is never
    -- more in any window: the tail is at or after every slot. A slot taken now is
    -- written at the ms it is in: at most a ms before the call goes, which the
    -- lateness a Send is told of (Dispatch) includes, so no call goes more than the
    -- margin after its slot.
    local tail_k
    if tail > now then
      tail = math.ceil(tail)
      tail_k = pad(tail)
    else
      tail_k = int(math.floor(now))
    end
    slot = tail
    -- Strict priority and turns: a request may take the earliest future slot held by
    -- lower-priority work, or the earliest held by equal-priority work of the group
    -- (property and family) furthest over its weighted turn, if that group holds more
    -- than this request's turn; the holder moves to the tail. Work that has waited
    -- max_age left the movable index above, which bounds how long bulk waits.
    -- Each candidate is one range lookup: O(log n) whatever the schedule holds.
    -- held is the group's 'n' score in turn once this request's slot counts.
    local victim_k, victim_id, held = nil, nil, nil
    if tail > now then
      -- A member is its kind (and priority, and group), SEP, the 17 bytes of its
      -- slot, SEP and the id: the slot and the id are read at fixed offsets, the id
      -- only of the candidate that wins. Each bound is one concatenation: every
      -- string a decision makes costs an allocation and its collection.
      local victim_x, victim_at = nil, nil
      for p = prio + 1, 5 do
        local x = redis.call('ZRANGEBYLEX', idx, BY_PRIO[p] .. now_k .. HI, BY_PRIO[p] .. tail_k .. SEP,
          'LIMIT', '0', '1')[1]
        if x then
          local k = string.sub(x, 4, 20)
          if not victim_k or k < victim_k then victim_k, victim_x, victim_at = k, x, 22 end
        end
      end
      -- The slot this request takes is in the future whichever it takes: its group's
      -- count goes up now (index_add takes its score), and this request's turn is that
      -- count over the group's weight.
      -- Where the slot is movable its count at this priority goes up first, so that
      -- the priority's bit (for the first) goes in with the slot: one ZINCRBY less.
      local d = ONE_HELD
      if now - first < max_age and incr('c' .. prio_s .. SEP .. group, '1') == 1 then d = int(MASK + BIT[prio]) end
      held = incr(held_of(group), d)
      local over = redis.call('ZREVRANGEBYSCORE', turn, TURN_BELOW[prio],
        turn_score(prio, math.floor(held / MASK), weight, '(%d'), 'LIMIT', '0', '1')[1]
      if over then
        local x = redis.call('ZRANGEBYLEX', idx, '(g' .. over .. SEP .. now_k .. HI, '(g' .. over .. SEP .. tail_k .. SEP,
          'LIMIT', '0', '1')[1]
        if x then
          local at = #over + 3
          local k = string.sub(x, at, at + 16)
          if not victim_k or k < victim_k then victim_k, victim_x, victim_at = k, x, at + 18 end
        end
      end
      if victim_x then victim_id = string.sub(victim_x, victim_at) end
    end
    e = {st = 'held', s = tail, ss = tail_k, k = tail_k, p = prio_s, g = group, w = weight_s, f = first, fk = first_k}
    local next_tat = pad(math.max(tat, tail) + interval)
    local ttl = int(math.ceil(math.max(tat, tail) + interval - now + w))
    if slot <= now and not hold then
      -- Due now: the slot is written, the pace only once the gate lets it go. Only a
      -- request that took the tail may give its pace back.
      e.t0, e.t1 = tat_raw or '', next_tat
      redis.call('ZADD', sched, e.ss, id)
      pace, pace_ttl = next_tat, ttl
    else
      -- The slot is held: what this decision writes to the schedule, the reservations,
      -- the index and turn (the holder moved, if any, and this request) goes in one
      -- call per key.
      local zs, hs, ix, tz, rm = {}, {}, {}, {}, {}
      if victim_id then
        local h = entry(victim_id)
        slot = victim_k + 0
        e.s, e.ss, e.k = slot, victim_k, victim_k
        index_move(victim_id, h, tail, tail_k, ix, tz, rm)
        h.t0, h.t1 = nil, nil
        zs[1], zs[2] = tail_k, victim_id
        hs[1], hs[2] = victim_id, encode(h)
      else
        -- Only a request that took the tail may give its pace back: after a move the
        -- pace also covers the holder that went to the tail.
        e.t0, e.t1 = tat_raw or '', next_tat
      end
      zs[#zs + 1] = e.ss
      zs[#zs + 1] = id
      redis.call('SET', KEYS[6], next_tat, 'PX', ttl)
      if slot > now then index_add(id, e, held, ix, tz) end
      redis.call('ZADD', sched, unpack(zs))
      if #ix > 0 then redis.call('ZADD', idx, unpack(ix)) end
      if #rm > 0 then redis.call('ZREM', idx, unpack(rm)) end
      if #tz > 0 then redis.call('ZADD', turn, unpack(tz)) end
      hs[#hs + 1] = id
      hs[#hs + 1] = encode(e)
      redis.call('HSET', res, unpack(hs))
      keep_alive(tail, fresh)
      return {'wait', math.max(0, math.ceil(slot - now)), left, used, quota, cur, ''}
    end
  end

  -- The slot is due. The ordering gate decides what of the request may go.
  local lease_ms = ARGV[9] + 0
  local gate_ttl = ARGV[13] + 0
  local nlines = ARGV[14] + 0
  -- cutoff is the property's today (days since 1970): earlier nights leave the gate.
  local cutoff = ARGV[17] + 0
  local lines = {}
  local bykey = {}
  for i = 0, nlines - 1 do
    local b = 19 + i * 4
    local l = {k = ARGV[b], a = ARGV[b + 1] + 0, z = ARGV[b + 2] + 0, v = ARGV[b + 3]}
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
      writes[#writes + 1] = {k = l.k, a = l.c, z = l.z, v = gate.vpad(l.v)}
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
  if pace then redis.call('SET', KEYS[6], pace, 'PX', pace_ttl) end
  index_rem(id, e)
  e.st, e.t0, e.t1 = 'sent', nil, nil
  redis.call('HSET', res, id, encode(e))
  keep_alive(slot, fresh)
  redis.call('INCRBY', KEYS[3], cost)
  redis.call('PEXPIREAT', KEYS[3], midnight)
  local out = {'send', 0, math.max(0, left - 1), after, quota, tier(after, quota), ''}
  for _, x in ipairs(dropped) do out[#out + 1] = x end
  return out
end
