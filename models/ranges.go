package models

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Weekdays is a set of days of the week, bit time.Weekday; the zero set means every
// day. On the wire it is a list of lower-case three-letter names, ["sat","sun"].
type Weekdays uint8

// dayNames are the wire names of the days, indexed by time.Weekday.
var dayNames = [7]string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// RuleDays is the rule of a days list the decoder cannot read.
const RuleDays = "must be a non-empty list of distinct days of the week: mon, tue, wed, thu, fri, sat, sun"

// ParseWeekdays reads a list of day names; an unknown, repeated or missing name is
// an error.
func ParseWeekdays(names []string) (Weekdays, error) {
	if len(names) == 0 {
		return 0, fmt.Errorf("days: empty list")
	}
	var w Weekdays
	for _, n := range names {
		d := -1
		for i, dn := range dayNames {
			if dn == n {
				d = i
			}
		}
		switch {
		case d < 0:
			return 0, fmt.Errorf("days: unknown day %q", n)
		case w&(1<<d) != 0:
			return 0, fmt.Errorf("days: %q appears more than once", n)
		}
		w |= 1 << d
	}
	return w, nil
}

// Has reports whether d is in w; every day is in the zero set.
func (w Weekdays) Has(d time.Weekday) bool { return w == 0 || w&(1<<d) != 0 }

// IsZero reports whether w is the zero set (every day, the field left out).
func (w Weekdays) IsZero() bool { return w == 0 }

// Names lists the days of w, Monday first; nil for the zero set.
func (w Weekdays) Names() []string {
	if w == 0 {
		return nil
	}
	var out []string
	for i := 1; i <= 7; i++ {
		if d := time.Weekday(i % 7); w&(1<<d) != 0 {
			out = append(out, dayNames[d])
		}
	}
	return out
}

// MarshalJSON writes the list of day names.
func (w Weekdays) MarshalJSON() ([]byte, error) { return json.Marshal(w.Names()) }

// UnmarshalJSON reads a list of day names.
func (w *Weekdays) UnmarshalJSON(b []byte) error {
	var names []string
	if err := json.Unmarshal(b, &names); err != nil {
		return fmt.Errorf("days: want a list of day names")
	}
	if names == nil {
		*w = 0
		return nil
	}
	v, err := ParseWeekdays(names)
	if err != nil {
		return err
	}
	*w = v
	return nil
}

// IsRange reports whether m gives a range of nights (from/to) rather than one
// stay_date.
func (m Mutation) IsRange() bool { return !m.From.IsZero() || !m.To.IsZero() || m.Days != 0 }

// MaxBatchNights bounds the nights one batch sets once its ranges are expanded, as
// many as a body of DefaultMaxMutations stay_date mutations: the work and memory
// of PrepareBatch stay where they were before ranges. Check refuses the rows of a
// body past it, and PrepareBatch the mutations of a batch past it.
const MaxBatchNights = DefaultMaxMutations

// Rules of a range mutation.
const (
	RuleBatchNights     = "must keep the nights of its body or batch, ranges expanded, at most 100000"
	RuleNotWithRange    = "must not be set with from/to"
	RuleRequiredWithTo  = "required with to"
	RuleRequiredWithFrm = "required with from"
	RuleFromLETo        = "must be <= to"
	RuleDaysWithRange   = "must only be set with from and to"
	RuleRangeHorizon    = "must make a range no longer than the channel's horizon (horizon_days + 1 nights)"
	RuleRangeNoNight    = "must select at least one night: no day of the range is in days"
	RuleRangeOutside    = "must select at least one night from today at the property to the channel's horizon"
)

// rangeProblems adds the problems of m's nights: stay_date alone, or from/to/days.
func (v *Validator) rangeProblems(m Mutation, ch ChannelConfig, known bool, add func(field, rule string)) {
	if !m.IsRange() {
		if m.StayDate.IsZero() {
			add("stay_date", RuleRequired)
			return
		}
		today := v.Zones.Today(m.PropertyID, v.now())
		switch {
		case m.StayDate.Before(today):
			add("stay_date", RuleNotPast)
		case known && m.StayDate.After(today.AddDays(ch.HorizonDays)):
			add("stay_date", RuleWithinHorizon)
		}
		return
	}
	if m.From.IsZero() && m.To.IsZero() {
		add("days", RuleDaysWithRange)
		return
	}
	if !m.StayDate.IsZero() {
		add("stay_date", RuleNotWithRange)
	}
	switch {
	case m.From.IsZero():
		add("from", RuleRequiredWithTo)
		return
	case m.To.IsZero():
		add("to", RuleRequiredWithFrm)
		return
	case m.To.Before(m.From):
		add("from", RuleFromLETo)
		return
	}
	if !known {
		return
	}
	if m.To.DaysSince(m.From) > ch.HorizonDays {
		add("to", RuleRangeHorizon)
		return
	}
	nights, _ := v.rangeNights(m, ch)
	switch {
	case !anyDay(m):
		add("days", RuleRangeNoNight)
	case len(nights) == 0:
		add("from", RuleRangeOutside)
	}
}

// anyDay reports whether any night of m's range falls on one of its days.
func anyDay(m Mutation) bool {
	for d, i := m.From, 0; !d.After(m.To) && i < 7; d, i = d.AddDays(1), i+1 {
		if m.Days.Has(d.Time().Weekday()) {
			return true
		}
	}
	return false
}

// rangeNights lists the nights of m's range on its days between today and the
// channel's horizon, and says which nights of the range were clipped.
func (v *Validator) rangeNights(m Mutation, ch ChannelConfig) (nights []Date, clipped string) {
	today := v.Zones.Today(m.PropertyID, v.now())
	last := today.AddDays(ch.HorizonDays)
	var past, beyond []Date
	for d := m.From; !d.After(m.To); d = d.AddDays(1) {
		if !m.Days.Has(d.Time().Weekday()) {
			continue
		}
		switch {
		case d.Before(today):
			past = append(past, d)
		case d.After(last):
			beyond = append(beyond, d)
		default:
			nights = append(nights, d)
		}
	}
	var parts []string
	if len(past) > 0 {
		parts = append(parts, fmt.Sprintf("%d nights before today clipped (%s..%s)", len(past), past[0], past[len(past)-1]))
	}
	if len(beyond) > 0 {
		parts = append(parts, fmt.Sprintf("%d nights beyond the channel's horizon clipped (%s..%s)",
			len(beyond), beyond[0], beyond[len(beyond)-1]))
	}
	return nights, strings.Join(parts, "; ")
}

// Expansion is a valid mutation as the nights it sets: one mutation per night, each
// under m's id. Clipped says which nights of a range fell before today or beyond the
// channel's horizon and were left out; empty when none was.
type Expansion struct {
	Nights  []Mutation
	Clipped string
}

// Expand turns a valid mutation into its nights: m itself for a stay_date, the
// nights of a range on its days from today to the channel's horizon otherwise, each
// with StayDate set, From/To/Days cleared and RangeNights the count. Call it on a
// mutation Validate passed.
func (v *Validator) Expand(m Mutation) Expansion {
	if !m.IsRange() {
		return Expansion{Nights: []Mutation{m}}
	}
	nights, clipped := v.rangeNights(m, v.Channels[m.Channel])
	out := make([]Mutation, len(nights))
	for i, d := range nights {
		n := m
		n.StayDate, n.From, n.To, n.Days, n.RangeNights = d, Date{}, Date{}, 0, len(nights)
		out[i] = n
	}
	return Expansion{Nights: out, Clipped: clipped}
}

// RangeNight is the night of a range's expanded night (RangeNights > 0), the zero
// Date for a stay_date mutation: what names the part of a range a Superseded is.
func (m Mutation) RangeNight() Date {
	if m.RangeNights == 0 {
		return Date{}
	}
	return m.StayDate
}

// NightCount is how many nights m sets: 1 for a stay_date, the nights Expand
// makes of a range.
func (v *Validator) NightCount(m Mutation) int {
	if !m.IsRange() {
		return 1
	}
	nights, _ := v.rangeNights(m, v.Channels[m.Channel])
	return len(nights)
}
