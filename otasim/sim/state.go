package sim

import (
	"time"

	"github.com/paritysync/paritysync/models"
)

// ApplyRecord is one line as the channel wrote it to its state, in apply order.
type ApplyRecord struct {
	At           time.Time     `json:"at"`
	Property     string        `json:"property"`
	Family       models.Family `json:"family"`
	RoomTypeCode string        `json:"room_type_code"`
	RatePlanCode string        `json:"rate_plan_code"`
	From         models.Date   `json:"from"`
	To           models.Date   `json:"to"`
	Version      int64         `json:"version"`
	// Days are the days of the week the write kept of From..To (every day when
	// empty).
	Days models.Weekdays `json:"days,omitzero"`
	// Late is true for a write Faults.ApplyDelayMS delayed.
	Late bool `json:"late,omitempty"`
}

// receivedKey is a night of one family, for StaleReceived.
type receivedKey struct {
	property string
	family   models.Family
	cell     cellKey
}

type cellKey struct {
	room, rate string
	date       models.Date
}

// cellState keeps the version per family: families are pushed independently, so a
// stale rates line must not be judged against the version an availability line set.
type cellState struct {
	cell     models.ARICell
	versions map[models.Family]int64
}

// deferApplies makes the push about to be decided collect its writes when f delays
// them; s.mu held. It returns where they are collected.
func (ch *channel) deferApplies(f Faults) *[]func(time.Time) {
	q := &[]func(time.Time){}
	if f.ApplyDelayMS > 0 {
		ch.deferred = q
	}
	return q
}

// applyLate writes the lines a delayed push collected, f.ApplyDelayMS after it was
// received, whether or not its client is still waiting: the channel received it.
// Only then is its reply kept for replay: a re-send that arrives meanwhile is
// another push, applied in its turn.
func (s *Simulator) applyLate(ch *channel, f Faults, q []func(time.Time)) {
	if len(q) == 0 {
		return
	}
	t := time.NewTimer(time.Duration(f.ApplyDelayMS) * time.Millisecond)
	select {
	case <-t.C:
	case <-s.closed:
		t.Stop()
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch.stats.FaultsInjected++
	now := s.now()
	for _, do := range q {
		do(now)
	}
}

// Applied is the apply log of channel (every channel for ""), oldest first.
func (s *Simulator) Applied(channel string) []ApplyRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ApplyRecord
	for slug, ch := range s.bySlug {
		if channel == "" || slug == channel {
			out = append(out, ch.applied...)
		}
	}
	return out
}

// receive notes the newest version received per night and counts a push that carries
// an older one than a push before it.
func (ch *channel) receive(req models.ARIRequest) {
	stale := false
	for _, l := range req.Lines {
		if ch.receiveLine(req.PropertyID, req.Family, l) {
			stale = true
		}
	}
	if stale {
		ch.stats.StaleReceived++
	}
}

// receiveLine notes the newest version received for each night of l and reports
// whether l carries an older version than one already received for any of them.
func (ch *channel) receiveLine(property string, fam models.Family, l models.ARILine) bool {
	stale := false
	for d := l.From; !d.After(l.To); d = d.AddDays(1) {
		if !l.Covers(d) {
			continue // a day the line's days leave out
		}
		k := receivedKey{property: property, family: fam,
			cell: cellKey{room: l.RoomTypeCode, rate: l.RatePlanCode, date: d}}
		if v, ok := ch.received[k]; ok && l.Version < v {
			stale = true
			continue
		}
		ch.received[k] = l.Version
	}
	return stale
}

// apply writes every night of l whose stored version for the family is not newer,
// or, while a delayed push is decided, keeps l for its late apply.
func (ch *channel) apply(property string, fam models.Family, l models.ARILine) {
	if ch.deferred != nil {
		*ch.deferred = append(*ch.deferred, func(now time.Time) { ch.write(property, fam, l, true, now) })
		return
	}
	ch.write(property, fam, l, false, ch.clock())
}

// write writes l to the channel's state and its apply log. A late write is
// last-writer-wins: it overwrites a newer version too, counting it in
// OlderApplied; any other keeps the newer version (StaleOverwrites).
func (ch *channel) write(property string, fam models.Family, l models.ARILine, late bool, now time.Time) {
	if len(ch.applied) >= ch.maxLog {
		n := copy(ch.applied, ch.applied[len(ch.applied)-ch.maxLog+1:])
		ch.applied = ch.applied[:n]
	}
	ch.applied = append(ch.applied, ApplyRecord{At: now, Property: property, Family: fam,
		RoomTypeCode: l.RoomTypeCode, RatePlanCode: l.RatePlanCode, From: l.From, To: l.To, Version: l.Version, Days: l.Days, Late: late})
	cells := ch.cells[property]
	if cells == nil {
		cells = map[cellKey]*cellState{}
		ch.cells[property] = cells
	}
	for d := l.From; !d.After(l.To); d = d.AddDays(1) {
		if !l.Covers(d) {
			continue
		}
		k := cellKey{room: l.RoomTypeCode, rate: l.RatePlanCode, date: d}
		c := cells[k]
		if c == nil {
			c = &cellState{
				cell:     models.ARICell{RoomTypeCode: l.RoomTypeCode, RatePlanCode: l.RatePlanCode, Date: d},
				versions: map[models.Family]int64{},
			}
			cells[k] = c
		}
		if l.Version < c.versions[fam] {
			if !late {
				ch.stats.StaleOverwrites++
				continue
			}
			ch.stats.OlderApplied++
		}
		c.versions[fam] = l.Version
		c.cell.Version = 0
		for _, v := range c.versions {
			c.cell.Version = max(c.cell.Version, v)
		}
		set(&c.cell.Amount, l.Amount)
		if l.Currency != "" {
			c.cell.Currency = l.Currency
		}
		set(&c.cell.Inventory, l.Inventory)
		set(&c.cell.StopSell, l.StopSell)
		set(&c.cell.MinLOS, l.MinLOS)
		set(&c.cell.MaxLOS, l.MaxLOS)
		set(&c.cell.CTA, l.CTA)
		set(&c.cell.CTD, l.CTD)
		ch.stats.NightsApplied++
	}
}

// set copies a present optional value, so the cell never aliases request memory.
func set[T any](dst **T, src *T) {
	if src != nil {
		v := *src
		*dst = &v
	}
}
