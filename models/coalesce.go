package models

import (
	"cmp"
	"slices"
)

// DefaultMaxLinesPerRequest packs requests for a channel missing from the map given
// to Coalesce; validation rejects such mutations, so this only keeps Coalesce total.
const DefaultMaxLinesPerRequest = 100

// Coalesced is what a batch of mutations becomes: the channel requests to send and
// the parts of mutations a newer version made pointless.
type Coalesced struct {
	Requests   []ChannelRequest `json:"requests"`
	Superseded []Superseded     `json:"superseded"`
}

// Superseded is one family's part of a mutation that lost to a newer (or, at equal
// version, later) mutation of the same cell; its outcome is superseded.
type Superseded struct {
	ID      string `json:"id"`
	Channel string `json:"channel"`
	Family  Family `json:"family"`
	Version int64  `json:"version"`
	// By is the version that won the cell.
	By int64 `json:"by"`
	// StayDate and Nights name the night of a range mutation that lost (Nights > 0
	// is the range's night count): the range's other nights go on.
	StayDate Date `json:"stay_date,omitzero"`
	Nights   int  `json:"nights,omitempty"`
}

// cellFamily is the unit of last-writer-wins: a mutation touching rates and
// restrictions competes separately in each.
type cellFamily struct {
	cell   Cell
	family Family
}

// part is one family's share of one winning mutation, with its sort key
// precomputed: ranks instead of strings and a day number instead of a Date, so the
// sort compares integers.
// It holds no pointers, so the sort swaps it without GC write barriers.
type part struct {
	idx      int // of the mutation in the input
	famIdx   int
	priority int
	channel  int // rank of the channel slug
	property int // rank of the property id
	room     int // rank of the room type code
	plan     int // rank of the rate plan code
	day      int64
}

// Coalesce turns validated mutations (ApplyDefaults already applied) into as few
// channel requests as possible. It is pure and deterministic: output depends only on
// the input, never on map iteration, so a workflow can call it and replay it, and
// the same batch always yields the same requests and idempotency keys.
//
// Per (cell, family) the highest version wins; at equal versions the later mutation
// in input order wins, as the PMS sent it last. Winners are grouped by channel,
// priority, property and family, sorted by room type, rate plan and date, and runs
// of consecutive nights with equal values and equal version merge into one line.
// Lines pack into requests of at most the channel's MaxLinesPerRequest. Requests
// come out by channel and priority, most urgent first, and within a priority
// round-robin by property (see interleave).
func Coalesce(ms []Mutation, channels map[string]ChannelConfig) Coalesced {
	fams := make([]familySet, len(ms))
	// Pass 1: the winning input index per (cell, family).
	winner := make(map[cellFamily]int, len(ms))
	for i := range ms {
		fams[i] = ms[i].familySet()
		for fi, f := range Families {
			if !fams[i].has(fi) {
				continue
			}
			k := cellFamily{ms[i].Cell(), f}
			if w, ok := winner[k]; !ok || ms[i].Version >= ms[w].Version {
				winner[k] = i
			}
		}
	}

	// Pass 2, in input order: winners become parts, losers are reported.
	parts := make([]part, 0, len(winner))
	var superseded []Superseded
	for i := range ms {
		m := &ms[i]
		for fi, f := range Families {
			if !fams[i].has(fi) {
				continue
			}
			w := winner[cellFamily{m.Cell(), f}]
			if w != i {
				superseded = append(superseded, Superseded{ID: m.ID, Channel: m.Channel, Family: f,
					Version: m.Version, By: ms[w].Version, StayDate: m.RangeNight(), Nights: m.RangeNights})
				continue
			}
			parts = append(parts, part{idx: i, famIdx: fi, priority: m.effectivePriority(),
				day: m.StayDate.Time().Unix() / 86400})
		}
	}
	// Sorted by content rather than left in input order, so a shuffled batch reports
	// the same superseded list.
	slices.SortFunc(superseded, func(a, b Superseded) int {
		return cmp.Or(cmp.Compare(a.Channel, b.Channel), cmp.Compare(a.ID, b.ID),
			cmp.Compare(familyIndex(a.Family), familyIndex(b.Family)),
			cmp.Compare(a.Version, b.Version), cmp.Compare(a.By, b.By),
			cmp.Compare(a.StayDate.Time().Unix(), b.StayDate.Time().Unix()))
	})

	rank(parts, func(p *part) string { return ms[p.idx].Channel }, func(p *part, r int) { p.channel = r })
	rank(parts, func(p *part) string { return ms[p.idx].PropertyID }, func(p *part, r int) { p.property = r })
	rank(parts, func(p *part) string { return ms[p.idx].RoomTypeCode }, func(p *part, r int) { p.room = r })
	rank(parts, func(p *part) string { return ms[p.idx].RatePlanCode }, func(p *part, r int) { p.plan = r })
	// One (cell, family) has exactly one winner, so this order is total: no two
	// parts compare equal and the sort needs no stability to be deterministic.
	slices.SortFunc(parts, func(a, b part) int {
		return cmp.Or(cmp.Compare(a.channel, b.channel), cmp.Compare(a.priority, b.priority),
			cmp.Compare(a.property, b.property), cmp.Compare(a.famIdx, b.famIdx),
			cmp.Compare(a.room, b.room), cmp.Compare(a.plan, b.plan), cmp.Compare(a.day, b.day))
	})

	var out []ChannelRequest
	var starts []int
	for lo := 0; lo < len(parts); {
		hi := lo + 1
		for hi < len(parts) && sameGroup(parts[lo], parts[hi]) {
			hi++
		}
		out, starts = appendGroup(out, ms, parts[lo:hi], maxLines(channels, ms[parts[lo].idx].Channel), starts[:0])
		lo = hi
	}
	return Coalesced{Requests: interleave(withWeekdays(out, channels)), Superseded: superseded}
}

// interleave reorders each (channel, priority) run of reqs, which arrive grouped by
// property, round-robin by property: the first request of every property, then the
// second of every property, and so on. Chunks are consecutive requests, so a chunk
// then holds work of many properties, and on a channel that limits per property
// its lanes are not all waiting for one property's window while others have a slot
// due. A property's own requests keep their order, so two that touch the same
// nights go in the order Coalesce made them. O(len(reqs)): each round visits only
// the properties with requests left.
func interleave(reqs []ChannelRequest) []ChannelRequest {
	out := make([]ChannelRequest, 0, len(reqs))
	type span struct{ next, end int }
	var spans []span
	for lo := 0; lo < len(reqs); {
		spans = spans[:0]
		hi := lo
		for hi < len(reqs) && reqs[hi].Channel == reqs[lo].Channel && reqs[hi].Priority == reqs[lo].Priority {
			if hi == lo || reqs[hi].PropertyID != reqs[hi-1].PropertyID {
				spans = append(spans, span{next: hi, end: hi})
			}
			spans[len(spans)-1].end = hi + 1
			hi++
		}
		for len(spans) > 0 {
			live := spans[:0]
			for _, sp := range spans {
				out = append(out, reqs[sp.next])
				if sp.next++; sp.next < sp.end {
					live = append(live, sp)
				}
			}
			spans = live
		}
		lo = hi
	}
	return out
}

// rank replaces a string key by its position among the distinct values in byte
// order, which sorts exactly as the strings do.
func rank(parts []part, key func(*part) string, set func(*part, int)) {
	ids := make(map[string]int)
	var distinct []string
	for i := range parts {
		k := key(&parts[i])
		if _, ok := ids[k]; !ok {
			ids[k] = len(distinct)
			distinct = append(distinct, k)
		}
	}
	slices.Sort(distinct)
	for r, k := range distinct {
		ids[k] = r
	}
	for i := range parts {
		set(&parts[i], ids[key(&parts[i])])
	}
}

func sameGroup(a, b part) bool {
	return a.channel == b.channel && a.priority == b.priority && a.property == b.property && a.famIdx == b.famIdx
}

// continues reports whether b extends a's line: the next night of the same room type
// and rate plan with the same values and the same version. The version must match
// because the wire line carries a single version and the channel records it for
// every night it covers: merging nights of different versions would record a
// version the PMS never sent for some of them and break the stale-write guard and
// reconciliation, which compare versions per night.
func continues(ms []Mutation, a, b part) bool {
	return a.room == b.room && a.plan == b.plan && b.day == a.day+1 &&
		ms[a.idx].Version == ms[b.idx].Version && ms[a.idx].Values.Same(Families[a.famIdx], ms[b.idx].Values)
}

// appendGroup merges one (channel, priority, property, family) group's sorted parts
// into lines and packs them into requests of at most perRequest lines. starts is
// scratch space for the index of each line's first part.
func appendGroup(out []ChannelRequest, ms []Mutation, parts []part, perRequest int, starts []int) ([]ChannelRequest, []int) {
	for i := range parts {
		if i == 0 || !continues(ms, parts[i-1], parts[i]) {
			starts = append(starts, i)
		}
	}
	lineEnd := func(l int) int {
		if l+1 < len(starts) {
			return starts[l+1]
		}
		return len(parts)
	}
	first, family := &ms[parts[0].idx], Families[parts[0].famIdx]
	for l0 := 0; l0 < len(starts); l0 += perRequest {
		l1 := min(l0+perRequest, len(starts))
		req := ChannelRequest{Channel: first.Channel, PropertyID: first.PropertyID, Family: family,
			Priority: parts[0].priority, Lines: make([]ARILine, 0, l1-l0),
			Refs: make([]MutationRef, 0, lineEnd(l1-1)-starts[l0])}
		for l := l0; l < l1; l++ {
			run := parts[starts[l]:lineEnd(l)]
			line := lineOf(family, &ms[run[0].idx])
			line.To = ms[run[len(run)-1].idx].StayDate
			for _, p := range run {
				req.Refs = append(req.Refs, refOf(&ms[p.idx], l-l0))
				// Every part of a group shares its priority today; min keeps the
				// documented meaning (most urgent ref) should grouping ever change.
				req.Priority = min(req.Priority, p.priority)
			}
			req.Lines = append(req.Lines, line)
		}
		out = append(out, req)
	}
	return out, starts
}

func refOf(m *Mutation, line int) MutationRef {
	return MutationRef{ID: m.ID, Version: m.Version, Line: line, StayDate: m.StayDate, CorrelationID: m.CorrelationID,
		Nights: m.RangeNights}
}

// lineOf is the one-night line of m's family f; it copies the values so a request
// never aliases the caller's mutations.
func lineOf(f Family, m *Mutation) ARILine {
	return ARILine{RoomTypeCode: m.RoomTypeCode, RatePlanCode: m.RatePlanCode,
		From: m.StayDate, To: m.StayDate, Values: m.Values.Of(f), Version: m.Version}
}

// Line is the one-night line that sets family f of m's cell to m's values at m's
// version: what the store records as desired state.
func (m Mutation) Line(f Family) ARILine { return lineOf(f, &m) }

// Without is m with the values of family f cleared.
func (m Mutation) Without(f Family) Mutation {
	m.Values = m.Values.Without(f)
	return m
}

// MutationOf is the mutation that sets family f of cell c to the values line l
// carries, at l's version: lineOf the other way round.
func MutationOf(c Cell, f Family, l ARILine) Mutation {
	return Mutation{PropertyID: c.PropertyID, RoomTypeCode: c.RoomTypeCode, RatePlanCode: c.RatePlanCode,
		Channel: c.Channel, StayDate: c.StayDate, Values: l.Values.Of(f), Version: l.Version}
}

func maxLines(channels map[string]ChannelConfig, slug string) int {
	if c, ok := channels[slug]; ok && c.MaxLinesPerRequest > 0 {
		return c.MaxLinesPerRequest
	}
	return DefaultMaxLinesPerRequest
}
