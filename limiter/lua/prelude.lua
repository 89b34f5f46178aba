-- paritysync limiter v2: every decision and every change of limiter state runs in
-- one of the files beside this one, one per operation, so that each is atomic, takes
-- one round trip and reads time only from Redis. limiter.go makes each as this
-- prelude, then gate.lua where the operation reads the ordering gate, then the
-- operation's own file: a script whole for EVALSHA, or, for reserve, a library for
-- FUNCTION LOAD. The Go side builds KEYS and ARGV; all keys of one call carry the
-- same {channel} hash tag.

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
--   index4         lex set of the held slots that may still be moved (younger than
--                  max age), two members each: 'mP|slot|id' by priority P then time,
--                  and 'gP|group|slot|id' by priority, group and time; a slot is
--                  written in 17 bytes (pad), fields are joined by SEP
--   turn4          zset of three bands, every score a whole number (a small sorted
--                  set keeps those as integers, and parses a fraction again on every
--                  look). Below 1e9, each group's counts: 'n|group' at 32 times its
--                  future held slots (the turn's numerator) plus a bit per priority
--                  where it has movable work, and 'cp|group' at its movable slots at
--                  priority p. Above TIMES, scored in Unix ms (whole, rounded up),
--                  'h|id' at every future held slot (swept once it is due) and 'a|id'
--                  at a movable slot's first ask plus max age (swept when it ages
--                  out). From TURN, above every time, 'p|group' at p * TURN + held /
--                  weight in millionths, for every group with movable work at
--                  priority p: the one furthest over its turn at p is the highest
--                  score below (p + 1) * TURN
-- A slot given back, sent, come due or moved leaves the index (and re-enters it at
-- its new place when moved); entries a reservation writes are its res record's
-- fields (k is the slot as written in the index). The keys' names are the layout's:
-- earlier layouts kept their slots under index2, pending2 and turn2 (the counts in
-- a set of their own, a group's priorities read from turn on every change, the turn
-- scores with a fraction), and before that index, pending and turn; these scripts read none of them, so those
-- slots are not moved while they drain and the keys expire with them.

-- now is Unix ms to the microsecond: the nearest double to TIME's microseconds over a
-- thousand, so that now written with pad (below) reads back as the same number; and
-- midnight the end of the day (UTC) it is in. clock reads them, first thing in every
-- call: a script's top level, or a library function (which is loaded once, so its
-- helpers cannot read the time when they are made).
local day = 86400000
local now, midnight
local function clock()
  if redis.replicate_commands then
    pcall(redis.replicate_commands)
  end
  local t = redis.call('TIME')
  now = (t[1] * 1000000 + t[2]) / 1000
  midnight = (math.floor(now / day) + 1) * day
end


local function tier(used, quota)
  if used >= quota then return 'stop' end
  if used * 100 >= quota * 95 then return 'throttle' end
  if used * 100 >= quota * 85 then return 'page' end
  if used * 100 >= quota * 70 then return 'warn' end
  return 'ok'
end

-- limit is the window's capacity now: the declared limit less what others use of the
-- channel's budget (adaptive), halved in the throttle tier; at least one.
local function limit_now(rate, foreign, used, quota)
  local r = rate - foreign
  if used * 100 >= quota * 95 then r = r / 2 end
  return math.max(1, math.floor(r))
end

-- pad writes ms to the microsecond in a fixed width, so that string order is time
-- order in the held index (below), as '%017.3f' would but in integer formatting:
-- C's float formatting and parsing (string.format, Lua's number-to-string, and
-- Redis' own for a number passed to redis.call) were a quarter of a decision's
-- instructions. Hot paths pass redis.call strings.
local function pad(ms)
  local us = math.floor(ms * 1000 + 0.5)
  local frac = us % 1000
  return string.format('%013d.%03d', (us - frac) / 1000, frac)
end
-- A number Redis or ARGV gives as a string is read with + 0: one conversion, where
-- tonumber makes two (it checks, then converts), each a C strtod.
-- score17 writes a score exactly: Lua's own number formatting keeps 14 digits.
local function score17(x) return string.format('%.17g', x) end
-- int writes an integral number (a TTL, a count) for redis.call.
local function int(x) return string.format('%d', x) end
-- window_slot moves t, which is at or after every slot in the schedule, to where
-- the window (t - w, t] holds fewer than r slots.
-- Since t is at or after every slot, the r-th newest slot overall is the one that
-- decides: a rank lookup, O(log n), where an offset into a score range would walk r.
local function window_slot(sched, t, r, w)
  local rank = int(r - 1)
  local rth = redis.call('ZREVRANGE', sched, rank, rank, 'WITHSCORES')
  local s = rth[2] and rth[2] + 0
  if s and s > t - w then t = math.max(t, s + w) end
  return t
end

-- The held index's members sort as strings: a slot is written with a fixed width
-- (pad), and fields are joined by a byte no id contains.
local SEP = '\1'
local HI = '\255'
-- BUDGET_TTL is how long a channel's budget identity outlives its last decision or
-- check, after which a worker with another configuration may claim the channel.
local BUDGET_TTL = 600000
-- BUDGET_RENEW is how often decisions renew it (the TTL of its mark, budget_renewed).
local BUDGET_RENEW = 30000
-- TURN separates the priorities in the turn score: priority * TURN + held / weight
-- in millionths, a whole number below 2^53 for a turn (held / weight) below 1e9.
local TURN = 1e15
-- turn_score writes priority p's turn score for n held slots over weight gw: two
-- groups' turns that differ at all differ by at least one over the product of their
-- weights (shares, at most 100), a hundred millionths or more, so the rounding keeps
-- their order.
-- fmt, '%d' unless given, may write it as an exclusive bound ('(%d').
local function turn_score(p, n, gw, fmt)
  return string.format(fmt or '%d', p * TURN + math.floor(n * 1e6 / gw + 0.5))
end
-- TIMES bounds the times in turn (Unix ms) from below; TURN bounds them from above.
local TIMES = '(1e10'

-- EPOCH_TAG starts the gate's epoch since the gate holds packed ranges (lua/gate.lua):
-- an epoch without it was marked over a gate of an earlier layout (a field per night,
-- or ranges as text), which these scripts do not read, so it counts as none and the
-- gate is rebuilt from the system of record (the gate's sweep then drops the old
-- fields).
local EPOCH_TAG = 'ranges2:'
