package models

import (
	"fmt"
	"testing"
)

// perPropertyBatch is n properties × nights one-line rate requests on a channel that
// packs one line per request; a night's amount differs from its neighbours', so
// nothing merges.
func perPropertyBatch(n, nights int) ([]Mutation, map[string]ChannelConfig) {
	ch := NewChannelConfig("channex", 10)
	ch.Burst, ch.Scope, ch.MaxLinesPerRequest = 2, ScopeProperty, 1
	var ms []Mutation
	for p := range n {
		for d := range nights {
			m := rate(fmt.Sprintf("m-%03d-%02d", p, d), "2026-04-01", fmt.Sprint(100+d), 1)
			m.PropertyID, m.Channel = fmt.Sprintf("prop_%08x", p), ch.Slug
			m.StayDate = m.StayDate.AddDays(d)
			ms = append(ms, m)
		}
	}
	return ms, ChannelMap([]ChannelConfig{ch})
}

func TestCoalesceInterleavesPropertiesSoAChunkHoldsMany(t *testing.T) {
	ms, chs := perPropertyBatch(50, 20)
	// One urgent change of the last property: strict priority puts it first.
	urgent := ms[len(ms)-1]
	urgent.ID, urgent.Priority, urgent.RoomTypeCode = "urgent", PriorityUrgent, "STD"
	ms = append(ms, urgent)

	reqs := Coalesce(ms, chs).Requests
	if len(reqs) != 50*20+1 {
		t.Fatalf("%d requests, want %d", len(reqs), 50*20+1)
	}
	if reqs[0].Refs[0].ID != "urgent" {
		t.Fatalf("first request %s, want the urgent one", reqs[0].Refs[0].ID)
	}
	// A chunk is consecutive requests (PARITYSYNC_CHUNK_SIZE, 100 by default).
	first := map[string]int{}
	for _, r := range reqs[1:101] {
		first[r.PropertyID]++
	}
	if len(first) != 50 {
		t.Fatalf("the first chunk holds requests of %d properties, want all 50: %v", len(first), first)
	}
	// Each property's requests keep their order: its nights in ascending order.
	last := map[string]Date{}
	for _, r := range reqs[1:] {
		if d, ok := last[r.PropertyID]; ok && !d.Before(r.Lines[0].From) {
			t.Fatalf("property %s: night %s after %s", r.PropertyID, r.Lines[0].From, d)
		}
		last[r.PropertyID] = r.Lines[0].From
	}
}

func TestCoalesceInterleavingKeepsPriorityRuns(t *testing.T) {
	ms, chs := perPropertyBatch(3, 2)
	for i := range ms {
		if i%2 == 0 {
			ms[i].Priority = PriorityBulk
		}
	}
	reqs := Coalesce(ms, chs).Requests
	for i := 1; i < len(reqs); i++ {
		if reqs[i].Priority < reqs[i-1].Priority {
			t.Fatalf("request %d at priority %d after one at %d", i, reqs[i].Priority, reqs[i-1].Priority)
		}
	}
}

func TestInFlightFollowsTheChannelsAggregateRate(t *testing.T) {
	perProperty := NewChannelConfig("channex", 10)
	perProperty.Scope = ScopeProperty
	perChannel := NewChannelConfig("expedia", 600)
	for _, tc := range []struct {
		name       string
		c          ChannelConfig
		properties int
		limit      int
		want       int
	}{
		// 10/min × 50 properties = 8.3/s; × a 1 s push cycle = 9 in flight.
		{"per property, 50 properties", perProperty, 50, 0, 9},
		// 33.3/s would want 34: the limit holds it.
		{"per property, 200 properties", perProperty, 200, 0, DefaultMaxInFlight},
		{"per property, 200 properties, higher limit", perProperty, 200, 64, 34},
		// A slow channel keeps the lanes a child always had.
		{"per property, one property", perProperty, 1, 0, MinInFlight},
		// Per channel the properties do not add up: 10/s.
		{"per channel", perChannel, 500, 0, 10},
		{"limit below the minimum", perProperty, 50, 2, 2},
	} {
		if got := tc.c.InFlight(tc.properties, tc.limit); got != tc.want {
			t.Errorf("%s: InFlight = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestPlanInFlightCountsThePropertiesWithWork(t *testing.T) {
	ms, chs := perPropertyBatch(50, 3)
	reqs := Coalesce(ms, chs).Requests
	got := PlanInFlight(reqs, chs, 0)
	want := []ChannelInFlight{{Channel: "channex", Properties: 50, InFlight: 9}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("PlanInFlight = %v, want %v", got, want)
	}
}
