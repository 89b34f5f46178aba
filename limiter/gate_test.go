package limiter

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/paritysync/paritysync/models"
)

// gateRecords reads the ranges the gate of (channel, property, family) holds for one
// room and rate plan, as lua/gate.lua writes them, checking that they are sorted,
// disjoint and merged (no two neighbours of one version).
func gateRecords(t *testing.T, rdb *redis.Client, key, roomPlan string) []gateRange {
	t.Helper()
	s, err := rdb.HGet(context.Background(), key, roomPlan).Result()
	if err == redis.Nil {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	// '#', then records of three bytes of first night, three of last night and ten
	// of version (20 digits, two to a byte).
	const width = 16
	if len(s) == 0 || s[0] != '#' || (len(s)-1)%width != 0 {
		t.Fatalf("gate field %s: %d bytes, not '#' and whole %d-byte records", roomPlan, len(s), width)
	}
	s = s[1:]
	day := func(b string) int64 { return int64(b[0])<<16 | int64(b[1])<<8 | int64(b[2]) }
	var out []gateRange
	for i := 0; i < len(s); i += width {
		from, to := day(s[i:i+3]), day(s[i+3:i+6])
		v, err := strconv.ParseInt(hex.EncodeToString([]byte(s[i+6:i+16])), 10, 64)
		if err != nil || from > to {
			t.Fatalf("gate field %s: bad record %x", roomPlan, s[i:i+width])
		}
		r := gateRange{key: roomPlan, from: from, to: to, version: v}
		if k := len(out) - 1; k >= 0 {
			if out[k].to >= from {
				t.Fatalf("gate field %s: records %+v and %+v overlap or are out of order", roomPlan, out[k], r)
			}
			if out[k].to+1 == from && out[k].version == v {
				t.Fatalf("gate field %s: neighbours %+v and %+v of one version not merged", roomPlan, out[k], r)
			}
		}
		out = append(out, r)
	}
	return out
}

// decide reserves r until it is decided (waiting out held slots for up to 5 s) and
// releases it if it was sent.
func decide(t *testing.T, l *Limiter, r Request) Decision {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		d := mustReserve(t, l, r)
		if d.State == Wait && time.Now().Before(deadline) {
			time.Sleep(d.Wait)
			continue
		}
		if d.State == Send {
			if err := l.Release(context.Background(), r); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
}

// TestGateOfAYearAtOneVersionAWeekIsOWeeks sends a property's year at one version,
// then each of its 52 weeks at a version of its own, and checks that the gate holds
// one range per week (not one entry per night) and still decides every night
// exactly: an older version is refused on any night inside a range, newer and equal
// ones go, and nights outside every range take any version.
func TestGateOfAYearAtOneVersionAWeekIsOWeeks(t *testing.T) {
	rdb, prefix := testRedis(t)
	l := New(rdb, []models.ChannelConfig{testChannel("year", 1_000_000, 500_000, 1<<40)}, Options{Prefix: prefix})
	ctx := context.Background()
	key := prefix + "{year}:gate:prop_00000001:rates"
	first := mustDate("2030-01-01")
	at := func(n int) string { return first.AddDays(n).String() }
	send := func(from, to int, v int64) Decision {
		r := req("year", 3)
		r.Lines = []models.ARILine{line("DBL", at(from), at(to), v)}
		return decide(t, l, r)
	}
	if d := send(0, 364, 1); d.State != Send {
		t.Fatalf("the year at v1: %+v", d)
	}
	if got := gateRecords(t, rdb, key, "DBL|BAR"); len(got) != 1 {
		t.Fatalf("the year at one version: %d ranges, want 1: %+v", len(got), got)
	}
	// week w holds version 100 + 10w; the last week takes the year's 365th night too.
	week := func(w int) (int, int) {
		if w == 51 {
			return 7 * w, 364
		}
		return 7 * w, 7*w + 6
	}
	for w := range 52 {
		a, z := week(w)
		if d := send(a, z, int64(100+10*w)); d.State != Send || len(d.Dropped) != 0 {
			t.Fatalf("week %d: %+v, want send", w, d)
		}
	}
	recs := gateRecords(t, rdb, key, "DBL|BAR")
	bytes, _ := rdb.MemoryUsage(ctx, key, 0).Result()
	t.Logf("gate of a year at one version a week: %d ranges, MEMORY USAGE %d B", len(recs), bytes)
	if len(recs) > 2*52 {
		t.Fatalf("%d ranges for 52 weekly versions, want at most %d", len(recs), 2*52)
	}
	for w := range 52 {
		a, z := week(w)
		v := int64(100 + 10*w)
		for _, n := range []int{a, (a + z) / 2, z} {
			if d := send(n, n, v-1); d.State != Superseded || len(d.Dropped) != 1 || d.Dropped[0].Date != first.AddDays(n) {
				t.Fatalf("week %d night %s at v%d under v%d: %+v, want superseded", w, at(n), v-1, v, d)
			}
		}
		if d := send(a, a, v); d.State != Send {
			t.Fatalf("week %d at its own version again: %+v, want send", w, d)
		}
	}
	// A line over two weeks at a version between theirs: the first week's nights go,
	// the second's are dropped, exactly.
	d := send(10, 20, 115)
	var want []models.LineNight
	for n := 14; n <= 20; n++ {
		want = append(want, models.LineNight{Line: 0, Date: first.AddDays(n)})
	}
	if d.State != Send || !slices.Equal(d.Dropped, want) {
		t.Fatalf("v115 over weeks 1 (v110) and 2 (v120): %+v, want send dropping %v", d, want)
	}
	// Outside every range any version goes.
	for _, n := range []int{-1, -30, 365, 400} {
		if d := send(n, n, 1); d.State != Send || len(d.Dropped) != 0 {
			t.Fatalf("night %s outside the gate's ranges: %+v, want send", at(n), d)
		}
	}
	if d := send(-5, 370, 2); d.State != Send || len(d.Dropped) != 365 {
		t.Fatalf("v2 over the year and beyond: %+v, want send dropping the year's 365 nights", d)
	}
}

// TestGateDecidesAsAMapOfNights drives random lines and rebuild loads through the
// gate and compares every answer with a plain map of night to newest version.
func TestGateDecidesAsAMapOfNights(t *testing.T) {
	rdb, prefix := testRedis(t)
	l := New(rdb, []models.ChannelConfig{testChannel("model", 1_000_000, 500_000, 1<<40)}, Options{Prefix: prefix})
	ctx := context.Background()
	key := prefix + "{model}:gate:prop_00000001:rates"
	rooms := []string{"DBL", "SGL", "TWN"}
	first := mustDate("2030-01-01")
	const nights = 40
	model := map[string]map[int]int64{}
	for _, r := range rooms {
		model[r] = map[int]int64{}
	}
	rnd := rand.New(rand.NewPCG(7, 11))
	for op := range 600 {
		rq := req("model", 3)
		type span struct {
			room string
			a, z int
			v    int64
		}
		var spans []span
		if op%3 == 1 {
			// Disjoint lines of one room, in any order: one pass over its ranges.
			room, at := rooms[rnd.IntN(len(rooms))], rnd.IntN(4)
			for at < nights {
				z := min(nights-1, at+rnd.IntN(5))
				spans = append(spans, span{room, at, z, int64(1 + rnd.IntN(30))})
				at = z + 1 + rnd.IntN(3)
			}
			rnd.Shuffle(len(spans), func(i, j int) { spans[i], spans[j] = spans[j], spans[i] })
			spans = spans[:1+rnd.IntN(len(spans))]
		} else {
			for range 1 + rnd.IntN(3) {
				a := rnd.IntN(nights)
				z := min(nights-1, a+rnd.IntN(12))
				spans = append(spans, span{rooms[rnd.IntN(len(rooms))], a, z, int64(1 + rnd.IntN(30))})
			}
		}
		if op%5 == 4 {
			// A rebuild's load of the same spans: raises only.
			var gn []GateNight
			raised := 0
			seen := map[string]int64{}
			for _, s := range spans {
				for n := s.a; n <= s.z; n++ {
					gn = append(gn, GateNight{Room: s.room, Plan: "BAR", Night: first.AddDays(n), Version: s.v})
					k := s.room + "|" + strconv.Itoa(n)
					seen[k] = max(seen[k], s.v)
				}
			}
			for k, v := range seen {
				var room string
				var n int
				fmt.Sscanf(k, "%3s|%d", &room, &n)
				if cur, ok := model[room][n]; !ok || v > cur {
					model[room][n] = v
					raised++
				}
			}
			got, err := l.LoadGate(ctx, "model", "prop_00000001", models.FamilyRates, gn)
			if err != nil || got != raised {
				t.Fatalf("op %d: load %+v raised %d, %v; want %d", op, spans, got, err, raised)
			}
		} else {
			var want []models.LineNight
			after := map[string]map[int]int64{}
			for _, r := range rooms {
				after[r] = map[int]int64{}
			}
			anyKept := false
			for i, s := range spans {
				rq.Lines = append(rq.Lines, line(s.room, first.AddDays(s.a).String(), first.AddDays(s.z).String(), s.v))
				for n := s.a; n <= s.z; n++ {
					cur, ok := after[s.room][n]
					if !ok {
						cur, ok = model[s.room][n]
					}
					if ok && cur > s.v {
						want = append(want, models.LineNight{Line: i, Date: first.AddDays(n)})
						continue
					}
					// Lines of one request are decided in order: a later line
					// never lowers what an earlier one raised.
					after[s.room][n] = s.v
					anyKept = true
				}
			}
			d := decide(t, l, rq)
			wantState := Send
			if !anyKept {
				wantState = Superseded
			}
			if d.State != wantState || !slices.Equal(d.Dropped, want) {
				t.Fatalf("op %d: %+v: %s dropping %v; want %s dropping %v", op, spans, d.State, d.Dropped, wantState, want)
			}
			if anyKept {
				for r, m := range after {
					for n, v := range m {
						model[r][n] = v
					}
				}
			}
		}
		for _, r := range rooms {
			got := map[int]int64{}
			for _, rec := range gateRecords(t, rdb, key, r+"|BAR") {
				for n := rec.from; n <= rec.to; n++ {
					got[int(n-dayNumber(first))] = rec.version
				}
			}
			if !mapsEqual(got, model[r]) {
				t.Fatalf("op %d: gate of %s holds %v, want %v", op, r, got, model[r])
			}
		}
	}
}

func mapsEqual(a, b map[int]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestGateForgetsNightsBeforeThePropertysToday moves the limiter's clock past some
// sent nights: the gate drops them from every room and rate plan of the property
// (those written and those not), by the property's own today, and a past night is
// neither checked nor recorded.
func TestGateForgetsNightsBeforeThePropertysToday(t *testing.T) {
	rdb, prefix := testRedis(t)
	// UTC+14: at 12:00 UTC it is already the next day at the property.
	zones, err := models.ParsePropertyZones("", "prop_00000001=Pacific/Kiritimati")
	if err != nil {
		t.Fatal(err)
	}
	l := New(rdb, []models.ChannelConfig{testChannel("past", 1_000_000, 500_000, 1<<40)}, Options{Prefix: prefix, Zones: zones})
	clock := time.Date(2030, 3, 1, 0, 0, 0, 0, time.UTC) // 2030-03-01 14:00 at the property
	l.now = func() time.Time { return clock }
	key := prefix + "{past}:gate:prop_00000001:rates"
	r := req("past", 3)
	r.Lines = []models.ARILine{line("DBL", "2030-03-01", "2030-03-10", 5), line("SGL", "2030-03-01", "2030-03-10", 5),
		line("TWN", "2030-02-20", "2030-03-02", 5)}
	if d := decide(t, l, r); d.State != Send {
		t.Fatalf("%+v", d)
	}
	day := func(s string) int64 { return dayNumber(mustDate(s)) }
	if got := gateRecords(t, rdb, key, "TWN|BAR"); len(got) != 1 || got[0].from != day("2030-03-01") {
		t.Fatalf("TWN from 02-20 on 03-01: %+v, want only the nights from 03-01", got)
	}

	clock = time.Date(2030, 3, 4, 12, 0, 0, 0, time.UTC) // 2030-03-05 02:00 at the property
	r = req("past", 3)
	r.Lines = []models.ARILine{line("DBL", "2030-03-20", "2030-03-20", 6)}
	if d := decide(t, l, r); d.State != Send {
		t.Fatalf("%+v", d)
	}
	dbl := gateRecords(t, rdb, key, "DBL|BAR")
	if len(dbl) != 2 || dbl[0].from != day("2030-03-05") || dbl[0].to != day("2030-03-10") {
		t.Fatalf("DBL after the property's 03-05 began: %+v, want 03-05..03-10 and 03-20", dbl)
	}
	if sgl := gateRecords(t, rdb, key, "SGL|BAR"); len(sgl) != 1 || sgl[0].from != day("2030-03-05") {
		t.Fatalf("SGL, not written, after the property's 03-05 began: %+v, want 03-05..03-10", sgl)
	}
	if twn := gateRecords(t, rdb, key, "TWN|BAR"); twn != nil {
		t.Fatalf("TWN, wholly past: %+v, want gone", twn)
	}
	// A past night goes unchecked and is not recorded; today's is still guarded.
	r = req("past", 3)
	r.Lines = []models.ARILine{line("SGL", "2030-03-04", "2030-03-04", 1)}
	if d := decide(t, l, r); d.State != Send || len(d.Dropped) != 0 {
		t.Fatalf("a past night at an older version: %+v, want send, unchecked", d)
	}
	r = req("past", 3)
	r.Lines = []models.ARILine{line("SGL", "2030-03-04", "2030-03-05", 1)}
	if d := decide(t, l, r); d.State != Superseded || len(d.Dropped) != 1 || d.Dropped[0].Date != mustDate("2030-03-05") {
		t.Fatalf("today at an older version: %+v, want superseded for 03-05", d)
	}
	if sgl := gateRecords(t, rdb, key, "SGL|BAR"); len(sgl) != 1 || sgl[0].from != day("2030-03-05") {
		t.Fatalf("SGL after a past night went: %+v, want 03-05..03-10 only", sgl)
	}
	// A rebuild loads nothing before today either.
	n, err := l.LoadGate(context.Background(), "past", "prop_00000001", models.FamilyRates,
		[]GateNight{{Room: "QUE", Plan: "BAR", Night: mustDate("2030-03-04"), Version: 3},
			{Room: "QUE", Plan: "BAR", Night: mustDate("2030-03-05"), Version: 3}})
	if err != nil || n != 1 {
		t.Fatalf("load of 03-04 and 03-05: raised %d, %v; want 1", n, err)
	}
}

// TestGateOfNightFieldsIsRebuilt: a gate marked whole while it held one field per
// night (before it held ranges), or ranges written as text (31 bytes a record,
// before they were packed), counts as lost, so its owner rebuilds it from the system
// of record, and the old fields leave it.
func TestGateOfNightFieldsIsRebuilt(t *testing.T) {
	rdb, prefix := testRedis(t)
	l := New(rdb, []models.ChannelConfig{testChannel("old", 1_000_000, 500_000, 1<<40)}, Options{Prefix: prefix})
	ctx := context.Background()
	key := prefix + "{old}:gate:prop_00000001:rates"
	rdb.Set(ctx, prefix+"{old}:gate_epoch", "epoch-of-nights", time.Hour)
	rdb.HSet(ctx, key, "DBL|BAR|"+strconv.FormatInt(dayNumber(mustDate("2030-05-01")), 10), "7")
	if e, err := l.GateEpoch(ctx, "old"); err != nil || e != "" {
		t.Fatalf("epoch of a gate of nights: %q, %v; want none", e, err)
	}
	d := strconv.FormatInt(dayNumber(mustDate("2030-05-03")), 10)
	rdb.Set(ctx, prefix+"{old}:gate_epoch", "ranges:epoch-of-text", time.Hour)
	rdb.HSet(ctx, key, "STD|BAR", fmt.Sprintf("%06s%06s%019d", d, d, 9))
	if e, err := l.GateEpoch(ctx, "old"); err != nil || e != "" {
		t.Fatalf("epoch of a gate of text ranges: %q, %v; want none", e, err)
	}
	if n, err := l.LoadGate(ctx, "old", "prop_00000001", models.FamilyRates,
		[]GateNight{{Room: "DBL", Plan: "BAR", Night: mustDate("2030-05-01"), Version: 7}}); err != nil || n != 1 {
		t.Fatalf("load: %d, %v", n, err)
	}
	if e, err := l.MarkGateRebuilt(ctx, "old", "epoch-2", nil); err != nil || e != "epoch-2" {
		t.Fatalf("mark: %q, %v; want the new epoch", e, err)
	}
	if e, err := l.GateEpoch(ctx, "old"); err != nil || e != "epoch-2" {
		t.Fatalf("epoch after the rebuild: %q, %v", e, err)
	}
	r := req("old", 3)
	r.Lines = []models.ARILine{line("DBL", "2030-05-01", "2030-05-02", 6)}
	if d := decide(t, l, r); d.State != Send || len(d.Dropped) != 1 {
		t.Fatalf("v6 over the rebuilt v7: %+v, want send dropping 05-01", d)
	}
	fields, err := rdb.HKeys(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(fields)
	if !slices.Equal(fields, []string{"DBL|BAR", "cutoff"}) {
		t.Fatalf("gate fields %q, want the ranges and the sweep's day only", fields)
	}
}

// TestGateTakesOnlyTheNightsOfALinesDays: a line with days (the weekends of May
// 2030) records and leases only the nights it sets: a weekday line inside its span
// at an older version goes while it is in flight, a Saturday at an older version
// waits for it and is then dropped, and a line with days loses exactly the nights
// the gate holds newer, reported by its own index.
func TestGateTakesOnlyTheNightsOfALinesDays(t *testing.T) {
	rdb, prefix := testRedis(t)
	l := New(rdb, []models.ChannelConfig{testChannel("days", 600, 50, 1000)}, Options{Prefix: prefix})
	ctx := context.Background()
	weekend := models.Weekdays(1<<time.Saturday | 1<<time.Sunday)

	a := req("days", 3)
	a.Lines = []models.ARILine{line("DBL", "2030-05-01", "2030-05-31", 6)}
	a.Lines[0].Days = weekend
	if d := mustReserve(t, l, a); d.State != Send || len(d.Dropped) != 0 {
		t.Fatalf("weekends v6: %+v, want send", d)
	}
	wed := lineReq("days", "DBL", "2030-05-08", "2030-05-08", 2)
	if d := decide(t, l, wed); d.State != Send || len(d.Dropped) != 0 {
		t.Fatalf("a Wednesday inside the weekends' span: %+v, want send (the line does not set it)", d)
	}
	sat := lineReq("days", "DBL", "2030-05-11", "2030-05-11", 5)
	if d := mustReserve(t, l, sat); d.State != Blocked {
		t.Fatalf("a Saturday of the weekends in flight: %+v, want blocked", d)
	}
	if err := l.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	if d := decide(t, l, sat); d.State != Superseded {
		t.Fatalf("an older Saturday: %+v, want superseded", d)
	}
	// Fridays to Sundays at v4: the weekends' nights are dropped, the Fridays go.
	fri := req("days", 3)
	fri.Lines = []models.ARILine{line("SGL", "2030-05-01", "2030-05-01", 4), line("DBL", "2030-05-01", "2030-05-31", 4)}
	fri.Lines[1].Days = weekend | 1<<time.Friday
	d := decide(t, l, fri)
	if d.State != Send || len(d.Dropped) != 8 {
		t.Fatalf("Fridays to Sundays under newer weekends: %+v, want send with the 8 weekend nights dropped", d)
	}
	for _, n := range d.Dropped {
		if wd := n.Date.Time().Weekday(); n.Line != 1 || (wd != time.Saturday && wd != time.Sunday) {
			t.Fatalf("dropped %+v: want line 1's weekend nights only", n)
		}
	}
}
