package models

import "encoding/json"

// allDays is every day of the week as a set.
const allDays Weekdays = 1<<7 - 1

// withWeekdays merges, in each request for a channel that takes a days pattern
// (Protocol.TakesDays), the lines that carry the same values across a days pattern
// into one line with Days (MergeWeekdays); other requests are left as they are.
func withWeekdays(reqs []ChannelRequest, channels map[string]ChannelConfig) []ChannelRequest {
	for i, r := range reqs {
		if cfg, ok := channels[r.Channel]; ok && cfg.Protocol.TakesDays(r.Family) {
			reqs[i] = r.MergeWeekdays()
		}
	}
	return reqs
}

// daysOf is the set of days of the week l covers.
func daysOf(l ARILine) Weekdays {
	var w Weekdays
	for d, i := l.From, 0; !d.After(l.To) && i < 7; d, i = d.AddDays(1), i+1 {
		if l.Days.Has(d.Time().Weekday()) {
			w |= 1 << d.Time().Weekday()
		}
	}
	return w
}

// countDays is how many nights of from..to fall on a day of w.
func countDays(from, to Date, w Weekdays) int {
	n := 0
	for d := from; !d.After(to); d = d.AddDays(1) {
		if w.Has(d.Time().Weekday()) {
			n++
		}
	}
	return n
}

// coveredNights is how many nights l sets.
func coveredNights(l ARILine) int {
	if l.Days.IsZero() {
		return l.Nights()
	}
	return countDays(l.From, l.To, l.Days)
}

// valueKey is l without its nights: two lines with the same key set the same room
// type and rate plan to the same values at the same version.
func valueKey(l ARILine) string {
	l.From, l.To, l.Days = Date{}, Date{}, 0
	b, err := json.Marshal(l)
	if err != nil {
		// Only unsupported types fail to marshal, and a line has none.
		panic("models: marshal line: " + err.Error())
	}
	return string(b)
}

// MergeWeekdays is r with the lines that set the same values (valueKey) on
// nights that make exactly a days pattern merged into one line with Days: the
// weekends of March to October at one price are one line, not 35. A run of lines
// merges while every night from its first to its last on one of the days its lines
// cover is set by one of them; a line that would break that starts the next run.
// The refs follow their nights to the lines that carry them. O(lines × span) in
// the nights each merged run spans.
func (r ChannelRequest) MergeWeekdays() ChannelRequest {
	if len(r.Lines) < 2 {
		return r
	}
	groups := map[string][]int{}
	var order []string
	for i, l := range r.Lines {
		k := valueKey(l)
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	if len(order) == len(r.Lines) {
		return r
	}
	out := r
	out.Lines, out.Refs = nil, nil
	moved := make([]int, len(r.Lines)) // old line → new line
	emit := func(run []int, days Weekdays) {
		l := r.Lines[run[0]]
		if len(run) > 1 {
			l.To = r.Lines[run[len(run)-1]].To
			l.Days = days
			if days == allDays {
				l.Days = 0
			}
		}
		for _, i := range run {
			moved[i] = len(out.Lines)
		}
		out.Lines = append(out.Lines, l)
	}
	for _, k := range order {
		idx := groups[k] // in request order, which Coalesce made by night
		run, days, set := idx[:1], daysOf(r.Lines[idx[0]]), coveredNights(r.Lines[idx[0]])
		for _, i := range idx[1:] {
			l := r.Lines[i]
			last := r.Lines[run[len(run)-1]]
			w := days | daysOf(l)
			n := set + coveredNights(l)
			if l.From.After(last.To) && countDays(r.Lines[run[0]].From, l.To, w) == n {
				run, days, set = append(run, i), w, n
				continue
			}
			emit(run, days)
			run, days, set = []int{i}, daysOf(l), coveredNights(l)
		}
		emit(run, days)
	}
	for _, ref := range r.Refs {
		if ref.Line >= 0 && ref.Line < len(moved) {
			ref.Line = moved[ref.Line]
		}
		out.Refs = append(out.Refs, ref)
	}
	return out
}
