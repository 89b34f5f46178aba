package models

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"testing"
)

const prop = "prop_0a1b2c3d"

// rate is a rates-only mutation of DLX/BAR on booking_com at priority 3.
func rate(id, date, amount string, version int64) Mutation {
	return Mutation{ID: id, PropertyID: prop, RoomTypeCode: "DLX", RatePlanCode: "BAR", Channel: "booking_com",
		StayDate: day(date), Values: Values{Amount: dec(amount), Currency: "EUR"}, Version: version, Priority: PriorityDefault,
		CorrelationID: "c-" + id}
}

func with(m Mutation, mod func(*Mutation)) Mutation { mod(&m); return m }

// span is a line's room, plan, dates and version in a compact comparable form.
func span(l ARILine) string {
	return fmt.Sprintf("%s/%s %s..%s v%d", l.RoomTypeCode, l.RatePlanCode, l.From, l.To, l.Version)
}

func spans(r ChannelRequest) []string {
	out := make([]string, len(r.Lines))
	for i, l := range r.Lines {
		out[i] = span(l)
	}
	return out
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCoalesceLines(t *testing.T) {
	cases := []struct {
		name string
		in   []Mutation
		want []string // spans of the single request's lines
	}{
		{"consecutive equal nights merge",
			[]Mutation{rate("a", "2026-04-01", "100", 1), rate("b", "2026-04-02", "100", 1), rate("c", "2026-04-03", "100.00", 1)},
			[]string{"DLX/BAR 2026-04-01..2026-04-03 v1"}},
		{"input order does not matter",
			[]Mutation{rate("c", "2026-04-03", "100", 1), rate("a", "2026-04-01", "100", 1), rate("b", "2026-04-02", "100", 1)},
			[]string{"DLX/BAR 2026-04-01..2026-04-03 v1"}},
		{"a price change splits",
			[]Mutation{rate("a", "2026-04-01", "100", 1), rate("b", "2026-04-02", "100", 1), rate("c", "2026-04-03", "110", 1)},
			[]string{"DLX/BAR 2026-04-01..2026-04-02 v1", "DLX/BAR 2026-04-03..2026-04-03 v1"}},
		{"a currency change splits",
			[]Mutation{rate("a", "2026-04-01", "100", 1), with(rate("b", "2026-04-02", "100", 1), func(m *Mutation) { m.Currency = "USD" })},
			[]string{"DLX/BAR 2026-04-01..2026-04-01 v1", "DLX/BAR 2026-04-02..2026-04-02 v1"}},
		{"a version change splits equal values",
			[]Mutation{rate("a", "2026-04-01", "100", 1), rate("b", "2026-04-02", "100", 2), rate("c", "2026-04-03", "100", 2)},
			[]string{"DLX/BAR 2026-04-01..2026-04-01 v1", "DLX/BAR 2026-04-02..2026-04-03 v2"}},
		{"a gap splits",
			[]Mutation{rate("a", "2026-04-01", "100", 1), rate("b", "2026-04-03", "100", 1)},
			[]string{"DLX/BAR 2026-04-01..2026-04-01 v1", "DLX/BAR 2026-04-03..2026-04-03 v1"}},
		{"month end is consecutive",
			[]Mutation{rate("a", "2026-04-30", "100", 1), rate("b", "2026-05-01", "100", 1)},
			[]string{"DLX/BAR 2026-04-30..2026-05-01 v1"}},
		{"room types and plans never merge, sorted",
			[]Mutation{
				with(rate("a", "2026-04-02", "100", 1), func(m *Mutation) { m.RoomTypeCode = "STD" }),
				with(rate("b", "2026-04-01", "100", 1), func(m *Mutation) { m.RatePlanCode = "NRF" }),
				rate("c", "2026-04-01", "100", 1),
				with(rate("d", "2026-04-01", "100", 1), func(m *Mutation) { m.RoomTypeCode = "STD" }),
			},
			[]string{"DLX/BAR 2026-04-01..2026-04-01 v1", "DLX/NRF 2026-04-01..2026-04-01 v1", "STD/BAR 2026-04-01..2026-04-02 v1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := Coalesce(tc.in, ChannelMap(DefaultChannels()))
			if len(out.Requests) != 1 {
				t.Fatalf("got %d requests, want 1: %s", len(out.Requests), mustJSON(t, out))
			}
			got := spans(out.Requests[0])
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("lines = %q, want %q", got, tc.want)
			}
			if n := len(out.Requests[0].Refs); n != len(tc.in) {
				t.Fatalf("%d refs for %d mutations", n, len(tc.in))
			}
			if len(out.Superseded) != 0 {
				t.Fatalf("superseded = %v", out.Superseded)
			}
		})
	}
}

func TestCoalesceMergedLineRefs(t *testing.T) {
	out := Coalesce([]Mutation{rate("b", "2026-04-02", "100", 1), rate("a", "2026-04-01", "100", 1), rate("z", "2026-04-05", "90", 4)}, nil)
	r := out.Requests[0]
	want := []MutationRef{
		{ID: "a", Version: 1, Line: 0, StayDate: day("2026-04-01"), CorrelationID: "c-a"},
		{ID: "b", Version: 1, Line: 0, StayDate: day("2026-04-02"), CorrelationID: "c-b"},
		{ID: "z", Version: 4, Line: 1, StayDate: day("2026-04-05"), CorrelationID: "c-z"},
	}
	if string(mustJSON(t, r.Refs)) != string(mustJSON(t, want)) {
		t.Fatalf("refs = %s\nwant   %s", mustJSON(t, r.Refs), mustJSON(t, want))
	}
	if r.Channel != "booking_com" || r.PropertyID != prop || r.Family != FamilyRates || r.Cost() != 2 {
		t.Fatalf("request header = %+v", r)
	}
}

func TestCoalesceSupersede(t *testing.T) {
	cases := []struct {
		name       string
		in         []Mutation
		wantAmount string
		wantRef    string
		wantLost   []Superseded
	}{
		{"higher version wins though earlier",
			[]Mutation{rate("new", "2026-04-01", "120", 5), rate("old", "2026-04-01", "100", 3)},
			"120", "new", []Superseded{{ID: "old", Channel: "booking_com", Family: FamilyRates, Version: 3, By: 5}}},
		{"tie goes to the later",
			[]Mutation{rate("first", "2026-04-01", "100", 3), rate("second", "2026-04-01", "110", 3)},
			"110", "second", []Superseded{{ID: "first", Channel: "booking_com", Family: FamilyRates, Version: 3, By: 3}}},
		{"losers name the final winner",
			[]Mutation{rate("v1", "2026-04-01", "100", 1), rate("v2", "2026-04-01", "101", 2), rate("v3", "2026-04-01", "102", 3)},
			"102", "v3", []Superseded{
				{ID: "v1", Channel: "booking_com", Family: FamilyRates, Version: 1, By: 3},
				{ID: "v2", Channel: "booking_com", Family: FamilyRates, Version: 2, By: 3},
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := Coalesce(tc.in, nil)
			if len(out.Requests) != 1 || len(out.Requests[0].Lines) != 1 {
				t.Fatalf("want one line: %s", mustJSON(t, out))
			}
			if got := out.Requests[0].Lines[0].Amount.String(); got != tc.wantAmount {
				t.Errorf("amount = %s, want %s", got, tc.wantAmount)
			}
			if refs := out.Requests[0].Refs; len(refs) != 1 || refs[0].ID != tc.wantRef {
				t.Errorf("refs = %+v, want only %s", refs, tc.wantRef)
			}
			if string(mustJSON(t, out.Superseded)) != string(mustJSON(t, tc.wantLost)) {
				t.Errorf("superseded = %s, want %s", mustJSON(t, out.Superseded), mustJSON(t, tc.wantLost))
			}
		})
	}
}

// A mutation touching two families competes separately in each.
func TestCoalesceSupersedePerFamily(t *testing.T) {
	both := with(rate("both", "2026-04-01", "100", 1), func(m *Mutation) { m.Inventory = ptr(5) })
	inv := with(rate("inv", "2026-04-01", "0", 2), func(m *Mutation) { m.Amount, m.Currency, m.Inventory = nil, "", ptr(3) })
	out := Coalesce([]Mutation{both, inv}, nil)
	if len(out.Requests) != 2 {
		t.Fatalf("got %d requests, want rates and availability", len(out.Requests))
	}
	rates, avail := out.Requests[0], out.Requests[1]
	if rates.Family != FamilyRates || rates.Refs[0].ID != "both" {
		t.Errorf("rates request = %+v", rates)
	}
	if avail.Family != FamilyAvailability || avail.Refs[0].ID != "inv" || *avail.Lines[0].Inventory != 3 {
		t.Errorf("availability request = %+v", avail)
	}
	want := []Superseded{{ID: "both", Channel: "booking_com", Family: FamilyAvailability, Version: 1, By: 2}}
	if string(mustJSON(t, out.Superseded)) != string(mustJSON(t, want)) {
		t.Errorf("superseded = %s", mustJSON(t, out.Superseded))
	}
}

// Lines carry only their own family's fields, so a rates request never resets
// inventory or restrictions on the channel.
func TestCoalesceLinesCarryOnlyTheirFamily(t *testing.T) {
	m := validMutation()
	out := Coalesce([]Mutation{m}, nil)
	want := []string{
		`{"room_type_code":"DLXKING","rate_plan_code":"BAR_FLEX","from":"2026-03-10","to":"2026-03-10","amount":"129.9","currency":"EUR","version":7}`,
		`{"room_type_code":"DLXKING","rate_plan_code":"BAR_FLEX","from":"2026-03-10","to":"2026-03-10","inventory":4,"version":7}`,
		`{"room_type_code":"DLXKING","rate_plan_code":"BAR_FLEX","from":"2026-03-10","to":"2026-03-10","stop_sell":false,"min_los":2,"max_los":14,"cta":false,"ctd":true,"version":7}`,
	}
	if len(out.Requests) != 3 {
		t.Fatalf("got %d requests", len(out.Requests))
	}
	for i, r := range out.Requests {
		if r.Family != Families[i] {
			t.Errorf("request %d family %s, want %s", i, r.Family, Families[i])
		}
		if got := string(mustJSON(t, r.Lines[0])); got != want[i] {
			t.Errorf("%s line = %s\nwant %s", r.Family, got, want[i])
		}
	}
	// The line must not alias the input.
	*out.Requests[1].Lines[0].Inventory = 99
	if *m.Inventory != 4 {
		t.Error("line aliases the mutation's inventory")
	}
}

func TestCoalescePacksAtMaxLines(t *testing.T) {
	chans := ChannelMap(DefaultChannels())
	c := chans["booking_com"]
	c.MaxLinesPerRequest = 2
	chans["booking_com"] = c
	var in []Mutation
	for i := range 5 {
		// Alternating prices: no two nights merge, five lines.
		in = append(in, rate(fmt.Sprint(i), day("2026-04-01").AddDays(i).String(), fmt.Sprint(100+i%2), 1))
	}
	out := Coalesce(in, chans)
	if len(out.Requests) != 3 {
		t.Fatalf("got %d requests, want 3", len(out.Requests))
	}
	for i, want := range []int{2, 2, 1} {
		r := out.Requests[i]
		if len(r.Lines) != want || r.Cost() != want {
			t.Errorf("request %d has %d lines, want %d", i, len(r.Lines), want)
		}
		for j, ref := range r.Refs {
			if ref.Line != j {
				t.Errorf("request %d ref %d points at line %d", i, j, ref.Line)
			}
		}
	}
	if got := out.Requests[2].Lines[0].From; got != day("2026-04-05") {
		t.Errorf("last request starts %s", got)
	}
}

func TestCoalescePriorityPerRequest(t *testing.T) {
	urgent := with(rate("u", "2026-04-02", "100", 1), func(m *Mutation) { m.Priority = PriorityUrgent })
	bulk := with(rate("b", "2026-04-03", "100", 1), func(m *Mutation) { m.Priority = PriorityBulk })
	def := rate("d", "2026-04-01", "100", 1)
	unset := with(rate("z", "2026-04-04", "100", 1), func(m *Mutation) { m.Priority = 0; m.FullSync = true })
	out := Coalesce([]Mutation{bulk, def, unset, urgent}, nil)
	var got []string
	for _, r := range out.Requests {
		got = append(got, fmt.Sprintf("p%d:%s", r.Priority, r.Refs[0].ID))
	}
	// Priorities never share a request, so urgent work is not held back by bulk; a
	// missing priority gets ApplyDefaults' value (5 for a full sync) rather than
	// sorting first as 0, so z joins b's line.
	if want := "[p1:u p3:d p5:b]"; fmt.Sprint(got) != want {
		t.Fatalf("requests = %v, want %s", got, want)
	}
	if len(out.Requests[2].Lines) != 1 || out.Requests[2].Lines[0].To != day("2026-04-04") {
		t.Fatalf("bulk request lines = %q", spans(out.Requests[2]))
	}
}

func TestCoalesceRequestOrder(t *testing.T) {
	var in []Mutation
	for _, ch := range []string{"expedia", "agoda", "booking_com"} {
		for _, p := range []string{"prop_000000bb", "prop_000000aa"} {
			m := validMutation()
			m.ID, m.Channel, m.PropertyID = ch+p, ch, p
			in = append(in, m)
		}
	}
	out := Coalesce(in, nil)
	var got []string
	for _, r := range out.Requests {
		got = append(got, fmt.Sprintf("%s/%s/%s", r.Channel, r.PropertyID[5:], r.Family))
	}
	// By channel, then round-robin by property: each property's requests in their
	// family order.
	var want []string
	for _, ch := range []string{"agoda", "booking_com", "expedia"} {
		for _, f := range Families {
			for _, p := range []string{"000000aa", "000000bb"} {
				want = append(want, fmt.Sprintf("%s/%s/%s", ch, p, f))
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("order = %v\nwant    %v", got, want)
	}
}

func TestCoalesceDeterministic(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	in := randomMutations(rng, 2000, false)
	first := mustJSON(t, Coalesce(in, ChannelMap(DefaultChannels())))
	if again := mustJSON(t, Coalesce(in, ChannelMap(DefaultChannels()))); !bytes.Equal(first, again) {
		t.Fatal("two runs over the same input differ")
	}
	// Without version ties input order cannot matter, so any shuffle is the same batch.
	for range 5 {
		shuffled := append([]Mutation(nil), in...)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if got := mustJSON(t, Coalesce(shuffled, ChannelMap(DefaultChannels()))); !bytes.Equal(first, got) {
			t.Fatal("a shuffled batch coalesces differently")
		}
	}
}

// randomMutations draws n mutations over a small space of cells so that merges,
// supersedes and value changes are all common. With ties false no two mutations of
// one cell share a version.
func randomMutations(rng *rand.Rand, n int, ties bool) []Mutation {
	channels := []string{"booking_com", "expedia"}
	props := []string{"prop_00000001", "prop_00000002"}
	rooms := []string{"DLX", "STD"}
	plans := []string{"BAR", "NRF"}
	start := day("2026-06-01")
	version := int64(0)
	out := make([]Mutation, n)
	for i := range out {
		m := Mutation{
			ID: fmt.Sprintf("m%05d", i), Channel: channels[rng.Intn(2)], PropertyID: props[rng.Intn(2)],
			RoomTypeCode: rooms[rng.Intn(2)], RatePlanCode: plans[rng.Intn(2)],
			StayDate: start.AddDays(rng.Intn(20)), Priority: 1 + 2*rng.Intn(2), CorrelationID: fmt.Sprint("c", i),
		}
		if ties {
			m.Version = 1 + rng.Int63n(3)
		} else {
			version++
			m.Version = version
			if rng.Intn(3) > 0 {
				m.Version = 1 // long equal-version runs, as from a bulk load
			}
		}
		fams := 1 + rng.Intn(7) // bit set of families, never empty
		if fams&1 != 0 {
			m.Amount, m.Currency = dec(fmt.Sprint(100+rng.Intn(2)*10)), "EUR"
		}
		if fams&2 != 0 {
			m.Inventory = ptr(rng.Intn(2))
		}
		if fams&4 != 0 {
			m.StopSell = ptr(rng.Intn(4) == 0)
			if rng.Intn(2) == 0 {
				m.MinLOS = ptr(1 + rng.Intn(2))
			}
		}
		out[i] = m
	}
	if !ties {
		// Give every repeat of a (cell, family) a fresh version so there is no tie.
		seen := map[cellFamily]bool{}
		for i := range out {
			for _, f := range out[i].Families() {
				k := cellFamily{out[i].Cell(), f}
				if seen[k] {
					version++
					out[i].Version = version
				}
				seen[k] = true
			}
		}
	}
	return out
}

// TestCoalesceProperties checks the invariants on random batches: every (mutation,
// family) is carried by exactly one line or reported superseded by a version at least
// its own; every night of a line has that line's values and version; lines are
// maximal, so no line stops where nothing changed and none crosses a change; requests
// respect max lines and priorities.
func TestCoalesceProperties(t *testing.T) {
	chans := ChannelMap(DefaultChannels())
	c := chans["expedia"]
	c.MaxLinesPerRequest = 3
	chans["expedia"] = c
	for seed := int64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewSource(seed))
		in := randomMutations(rng, 1+rng.Intn(300), seed%2 == 0)
		out := Coalesce(in, chans)
		byID := map[string]*Mutation{}
		for i := range in {
			byID[in[i].ID] = &in[i]
		}
		type key struct {
			id string
			f  Family
		}
		covered := map[key]int{}
		best := map[cellFamily]int64{}
		for _, m := range in {
			for _, f := range m.Families() {
				k := cellFamily{m.Cell(), f}
				best[k] = max(best[k], m.Version)
			}
		}
		for _, r := range out.Requests {
			if len(r.Lines) == 0 || len(r.Lines) > maxLines(chans, r.Channel) {
				t.Fatalf("seed %d: request with %d lines", seed, len(r.Lines))
			}
			nights := make([]int, len(r.Lines))
			minPrio := PriorityBulk + 1
			for _, ref := range r.Refs {
				m := byID[ref.ID]
				covered[key{ref.ID, r.Family}]++
				l := r.Lines[ref.Line]
				minPrio = min(minPrio, m.Priority)
				nights[ref.Line]++
				switch {
				case m.Channel != r.Channel || m.PropertyID != r.PropertyID:
					t.Fatalf("seed %d: %s in the wrong request", seed, ref.ID)
				case m.RoomTypeCode != l.RoomTypeCode || m.RatePlanCode != l.RatePlanCode:
					t.Fatalf("seed %d: %s on a line of another room or plan", seed, ref.ID)
				case m.StayDate.Before(l.From) || m.StayDate.After(l.To) || ref.StayDate != m.StayDate:
					t.Fatalf("seed %d: %s (%s) outside its line %s", seed, ref.ID, m.StayDate, span(l))
				case m.Version != l.Version || ref.Version != m.Version:
					t.Fatalf("seed %d: %s v%d on line v%d", seed, ref.ID, m.Version, l.Version)
				case !m.Values.Same(r.Family, l.Values):
					t.Fatalf("seed %d: %s values differ from its line %s", seed, ref.ID, mustJSON(t, l))
				case m.Version != best[cellFamily{m.Cell(), r.Family}]:
					t.Fatalf("seed %d: %s v%d won over a higher version", seed, ref.ID, m.Version)
				}
			}
			if r.Priority != minPrio {
				t.Fatalf("seed %d: request priority %d, refs' most urgent %d", seed, r.Priority, minPrio)
			}
			for i, l := range r.Lines {
				if nights[i] != l.Nights() {
					t.Fatalf("seed %d: line %s has %d refs for %d nights", seed, span(l), nights[i], l.Nights())
				}
				if i > 0 {
					p := r.Lines[i-1]
					if p.RoomTypeCode == l.RoomTypeCode && p.RatePlanCode == l.RatePlanCode && p.To.AddDays(1) == l.From &&
						p.Version == l.Version && p.Values.Same(r.Family, l.Values) {
						t.Fatalf("seed %d: lines %s and %s should have merged", seed, span(p), span(l))
					}
				}
			}
		}
		for _, s := range out.Superseded {
			covered[key{s.ID, s.Family}]++
			if s.By < s.Version || s.By != best[cellFamily{byID[s.ID].Cell(), s.Family}] {
				t.Fatalf("seed %d: %+v", seed, s)
			}
		}
		for _, m := range in {
			for _, f := range m.Families() {
				if n := covered[key{m.ID, f}]; n != 1 {
					t.Fatalf("seed %d: %s/%s covered %d times", seed, m.ID, f, n)
				}
			}
		}
		if total, want := len(covered), familyCount(in); total != want {
			t.Fatalf("seed %d: %d (mutation, family) covered, %d in input", seed, total, want)
		}
	}
}

func familyCount(ms []Mutation) int {
	n := 0
	for _, m := range ms {
		n += len(m.Families())
	}
	return n
}

// yearOfWeeklyRates is a year of daily rates for 12 room-rate pairs on the three
// default channels, the price changing every 7 nights, all at one version: what a
// PMS sends on its first full load.
func yearOfWeeklyRates() []Mutation {
	rooms := []string{"STD", "DLX", "STE", "FAM"}
	plans := []string{"BAR", "NRF", "BB"}
	start := day("2027-01-01")
	var out []Mutation
	for _, ch := range []string{"booking_com", "expedia", "agoda"} {
		for _, room := range rooms {
			for _, plan := range plans {
				for d := range 365 {
					out = append(out, Mutation{
						ID: fmt.Sprintf("%s-%s-%s-%d", ch, room, plan, d), PropertyID: prop, RoomTypeCode: room,
						RatePlanCode: plan, Channel: ch, StayDate: start.AddDays(d),
						Values: Values{Amount: dec(fmt.Sprintf("%d.50", 100+d/7)), Currency: "EUR"}, Version: 1, Priority: PriorityDefault,
					})
				}
			}
		}
	}
	return out
}

func TestCoalesceYearOfDailyRates(t *testing.T) {
	in := yearOfWeeklyRates()
	out := Coalesce(in, ChannelMap(DefaultChannels()))
	lines := 0
	for _, r := range out.Requests {
		lines += len(r.Lines)
	}
	// 365 nights = 52 full weeks + 1 night: 53 lines per pair, 636 per channel, 7
	// requests of at most 100 lines per channel.
	if len(in) != 13140 || lines != 3*12*53 || len(out.Requests) != 3*7 || len(out.Superseded) != 0 {
		t.Fatalf("in=%d lines=%d requests=%d superseded=%d", len(in), lines, len(out.Requests), len(out.Superseded))
	}
	t.Logf("year of weekly-changing daily rates: %d mutations -> %d lines -> %d requests (%.0f mutations per request)",
		len(in), lines, len(out.Requests), float64(len(in))/float64(len(out.Requests)))
}

// benchMutations is 10,000 mutations of a realistic mix: one property, 10 room-rate
// pairs, 2 channels, 500 nights, prices changing every 5 nights, a few inventory and
// restriction updates and some repeated cells.
func benchMutations() []Mutation {
	rng := rand.New(rand.NewSource(1))
	out := make([]Mutation, 0, 10000)
	for i := range 10000 {
		pair := i % 10
		d := (i / 20) % 500
		m := Mutation{
			ID: fmt.Sprint("m", i), PropertyID: prop, RoomTypeCode: fmt.Sprint("R", pair/2), RatePlanCode: fmt.Sprint("P", pair%2),
			Channel: []string{"booking_com", "expedia"}[(i/10)%2], StayDate: day("2027-01-01").AddDays(d),
			Version: int64(1 + rng.Intn(2)), Priority: PriorityDefault, CorrelationID: fmt.Sprint("c", i),
		}
		switch rng.Intn(10) {
		case 0:
			m.Inventory = ptr(rng.Intn(5))
		case 1:
			m.StopSell, m.MinLOS = ptr(false), ptr(2)
		default:
			m.Amount, m.Currency = dec(fmt.Sprintf("%d.00", 100+d/5)), "EUR"
		}
		out = append(out, m)
	}
	return out
}

func BenchmarkCoalesce(b *testing.B) {
	in := benchMutations()
	chans := ChannelMap(DefaultChannels())
	var out Coalesced
	b.ReportAllocs()
	for b.Loop() {
		out = Coalesce(in, chans)
	}
	b.ReportMetric(float64(len(out.Requests)), "requests")
}

func TestMutationOfIsLineOfReversed(t *testing.T) {
	amount := dec("120.50")
	inv, stop, minLOS := 4, true, 2
	m := Mutation{PropertyID: "prop_1a2b3c4d", RoomTypeCode: "DLX", RatePlanCode: "BAR", Channel: "expedia",
		StayDate: day("2030-01-02"), Values: Values{Amount: amount, Currency: "EUR", Inventory: &inv, StopSell: &stop, MinLOS: &minLOS}, Version: 7}
	for _, f := range Families {
		back := MutationOf(m.Cell(), f, lineOf(f, &m))
		others := m
		for _, g := range Families {
			if g != f {
				others = others.Without(g)
			}
		}
		if !back.Values.Same(f, others.Values) || back.Version != 7 || back.Cell() != m.Cell() {
			t.Errorf("%s: %+v does not carry the family's values back", f, back)
		}
		if got := back.Families(); len(got) != 1 || got[0] != f {
			t.Errorf("%s: the mutation touches %v", f, got)
		}
		if len(m.Without(f).Families()) != 2 {
			t.Errorf("Without(%s) left %v", f, m.Without(f).Families())
		}
	}
}
