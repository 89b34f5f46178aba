package models

import (
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// weekendNights are the Saturday and Sunday nights of March to October 2027 at one
// price, as Expand makes them of a range with days sat, sun.
func weekendNights(channel string) []Mutation {
	amount := decimal.RequireFromString("129.00")
	var out []Mutation
	for d := (Date{Year: 2027, Month: time.March, Day: 1}); !d.After(Date{Year: 2027, Month: time.October, Day: 31}); d = d.AddDays(1) {
		if wd := d.Time().Weekday(); wd == time.Saturday || wd == time.Sunday {
			out = append(out, Mutation{ID: "w", PropertyID: "prop_0000abcd", RoomTypeCode: "DBL", RatePlanCode: "BAR_FLEX",
				Channel: channel, StayDate: d, Values: Values{Amount: &amount, Currency: "EUR"}, Version: 3})
		}
	}
	for i := range out {
		out[i].RangeNights = len(out)
	}
	return out
}

// TestCoalesceSendsAWeekdayPatternAsOneLine: 70 weekend nights at one price are
// one line with days sat, sun on a channel that takes days (Channex's rates,
// OpenTravel), every ref on it; the generic protocol and Channex's availability
// keep one line per weekend. A night the gate drops splits the line into the runs
// of its days that remain.
func TestCoalesceSendsAWeekdayPatternAsOneLine(t *testing.T) {
	cx := NewChannexChannel("channex_eu", ChannexMapping{})
	ota := NewChannelConfig("ota_eu", 60)
	ota.Protocol = ProtocolOpenTravel
	chs := ChannelMap([]ChannelConfig{cx, ota, NewChannelConfig("expedia", 60)})
	for _, ch := range []string{"channex_eu", "ota_eu"} {
		ms := weekendNights(ch)
		co := Coalesce(ms, chs)
		if len(co.Requests) != 1 || len(co.Requests[0].Lines) != 1 {
			t.Fatalf("%s: %d requests, lines %+v", ch, len(co.Requests), co.Requests)
		}
		r := co.Requests[0]
		l := r.Lines[0]
		want := Weekdays(1<<time.Saturday | 1<<time.Sunday)
		if l.Days != want || l.From != ms[0].StayDate || l.To != ms[len(ms)-1].StayDate || l.Amount.String() != "129" {
			t.Fatalf("%s: line %+v; want %s..%s sat, sun", ch, l, ms[0].StayDate, ms[len(ms)-1].StayDate)
		}
		if len(r.Refs) != len(ms) {
			t.Fatalf("%s: %d refs for %d nights", ch, len(r.Refs), len(ms))
		}
		for _, ref := range r.Refs {
			if ref.Line != 0 || !l.Covers(ref.StayDate) {
				t.Fatalf("%s: ref %+v not on the line", ch, ref)
			}
		}
		// The gate drops one Saturday: the runs left, each a plain range.
		drop := ms[10].StayDate
		cut, dropped := r.WithoutNights([]LineNight{{Line: 0, Date: drop}})
		if len(dropped) != 1 || dropped[0].StayDate != drop || len(cut.Refs) != len(ms)-1 {
			t.Fatalf("%s: dropped %+v, %d refs left", ch, dropped, len(cut.Refs))
		}
		for _, ref := range cut.Refs {
			if cl := cut.Lines[ref.Line]; !cl.Days.IsZero() || !cl.Covers(ref.StayDate) || cl.Covers(drop) {
				t.Fatalf("%s: ref %+v on line %+v", ch, ref, cl)
			}
		}
		if n := len(cut.Lines); n != 35 {
			t.Fatalf("%s: %d runs left, want 35 (one weekend left its Sunday)", ch, n)
		}
	}
	if co := Coalesce(weekendNights("expedia"), chs); len(co.Requests[0].Lines) != 35 {
		t.Fatalf("the generic protocol takes no days: %d lines, want 35 weekends", len(co.Requests[0].Lines))
	}
	avail := weekendNights("channex_eu")
	for i := range avail {
		n := 4
		avail[i].Amount, avail[i].Currency, avail[i].Inventory = nil, "", &n
	}
	if co := Coalesce(avail, chs); len(co.Requests[0].Lines) != 35 {
		t.Fatalf("Channex availability takes no days: %d lines", len(co.Requests[0].Lines))
	}
}

// TestMergeWeekdaysKeepsOtherValuesApart: nights at another price, or a gap in the
// pattern, are not merged into the pattern's line.
func TestMergeWeekdaysKeepsOtherValuesApart(t *testing.T) {
	cx := NewChannexChannel("channex_eu", ChannexMapping{})
	ms := weekendNights("channex_eu")
	other := decimal.RequireFromString("150")
	ms[4].Amount = &other            // one night at another price
	ms = append(ms[:20], ms[22:]...) // one weekend missing
	co := Coalesce(ms, ChannelMap([]ChannelConfig{cx}))
	lines := co.Requests[0].Lines
	if len(lines) != 4 {
		t.Fatalf("lines %+v; want the pattern before the other price, after it up to the gap, after the gap, and the other price", lines)
	}
	covered := 0
	for _, l := range lines {
		for d := l.From; !d.After(l.To); d = d.AddDays(1) {
			if l.Covers(d) {
				covered++
			}
		}
	}
	if covered != len(ms) {
		t.Fatalf("the lines set %d nights, want %d", covered, len(ms))
	}
}
