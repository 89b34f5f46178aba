-- The ordering gate: one hash per (channel, property, family), a field per room|plan
-- holding the nights sent there as ranges, one version each: GMARK, then records of
-- GREC bytes, sorted and disjoint, each the range's first and last night (days since
-- 1970, three bytes big-endian) and its version (20 decimal digits packed two to a
-- byte, so that versions above 2^53 — a nanosecond clock — compare exactly, as
-- strings). Neighbouring ranges of one version are merged on write, so a year sent at
-- one version a week is 52 records. A field without GMARK was written before this
-- layout: it is dropped, and the rebuild the epoch's tag asks for loads its nights
-- again (EPOCH_TAG). Nights before the cutoff (the property's today, from Go) leave
-- the gate: a field loses them whenever it is written, and every field of the hash
-- once a day (the field 'cutoff' holds the day that was last done). A request's lines
-- of one room|plan cost a binary search each and one pass over the records they skip
-- (copied a run at a time), whatever their nights.
local GREC = 16
local GMARK = '#'
-- The helpers below read and write records; gate_fields makes what reads one hash's
-- state. A library (reserve) makes the helpers once, when it is loaded; a script
-- that reads the gate (gate_load) makes them on each call.
local function vpad(v)
  local p = string.rep('0', 20 - #v) .. v
  local out = {}
  for i = 1, 20, 2 do out[#out + 1] = string.char(tonumber(string.sub(p, i, i + 1), 16)) end
  return table.concat(out)
end
local function day3(d) return string.char(math.floor(d / 65536) % 256, math.floor(d / 256) % 256, d % 256) end
local function rec(a, z, v) return day3(a) .. day3(z) .. v end
local function rec_day(s, o)
  local b1, b2, b3 = string.byte(s, o + 1, o + 3)
  return b1 * 65536 + b2 * 256 + b3
end
local function rec_a(s, i) return rec_day(s, (i - 1) * GREC) end
local function rec_z(s, i) return rec_day(s, (i - 1) * GREC + 3) end
local function rec_v(s, i) return string.sub(s, (i - 1) * GREC + 7, i * GREC) end

-- gate_records is a field's records, or nil for a field of an earlier layout.
local function gate_records(raw)
  if raw == '' then return '' end
  if string.sub(raw, 1, 1) ~= GMARK or (#raw - 1) % GREC ~= 0 then return nil end
  return string.sub(raw, 2)
end

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
      local recs = gate_records(redis.call('HGET', key, f) or '')
      if recs == nil then
        orig[f], cur[f] = false, '' -- an earlier layout: dropped (flush deletes it)
      else
        orig[f], cur[f] = recs, gate_prune(recs, cutoff)
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
        local recs = gate_records(all[i + 1])
        if recs == nil then
          -- A field of an earlier layout: its versions were loaded again by the
          -- rebuild the epoch's tag asked for (gate_epoch).
          orig[f], cur[f] = false, ''
        else
          orig[f], cur[f] = recs, gate_prune(recs, cutoff)
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
          if f == 'cutoff' then sets[#sets + 1] = s else sets[#sets + 1] = GMARK .. s end
        end
      end
    end
    -- In parts, as unpack bounds how many values one call can take.
    for i = 1, #dels, 1000 do redis.call('HDEL', key, unpack(dels, i, math.min(#dels, i + 999))) end
    for i = 1, #sets, 2000 do redis.call('HSET', key, unpack(sets, i, math.min(#sets, i + 1999))) end
    if #sets > 0 then redis.call('PEXPIRE', key, ttl) end
    return #sets > 0
  end
  -- vpad packs a version as the records hold it, for the lines a caller writes.
  g.vpad = vpad
  return g
end
