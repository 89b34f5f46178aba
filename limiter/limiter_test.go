package limiter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/paritysync/paritysync/dial/redistest"
	"github.com/paritysync/paritysync/models"
)

// testRedis connects to REDIS_URL and returns a client plus a fresh key prefix whose
// keys are deleted when the test ends.
func testRedis(tb testing.TB) (*redis.Client, string) {
	tb.Helper()
	return redistest.Client(tb, "limitertest")
}

// testChannel is a channel limited to perMinute requests per window with the given
// burst; rates and availability share it 2:1.
func testChannel(slug string, perMinute, burst, quota int) models.ChannelConfig {
	return models.ChannelConfig{
		Slug: slug, BasePath: "/" + slug, RatePerMinute: perMinute, Burst: burst,
		Shares: models.FamilyShares{Rates: 60, Availability: 30, Restrictions: 10}, Scope: models.ScopeChannel,
		DailyQuota: quota, QuotaUnit: models.QuotaRequests, HorizonDays: 365,
		MaxLinesPerRequest: 100, MaxRetryAfter: time.Minute,
		BreakerFailures: 3, BreakerCooldown: 300 * time.Millisecond,
	}
}

// shortWindowChannel is testChannel(slug, 60, burst, 1000) limited per scope over a
// 6 s window: one interval is (6 s + the 500 ms margin) / 60, 108 ms, so held slots
// come due, and a back-off's waiters leave, within a short test.
func shortWindowChannel(slug string, burst int, scope models.LimitScope) models.ChannelConfig {
	ch := testChannel(slug, 60, burst, 1000)
	ch.Scope = scope
	ch.Window = 6 * time.Second
	return ch
}

// inEachScope runs test once for each limit scope, per channel and per property.
func inEachScope(t *testing.T, test func(t *testing.T, scope models.LimitScope)) {
	t.Helper()
	for _, scope := range []models.LimitScope{models.ScopeChannel, models.ScopeProperty} {
		t.Run(string(scope), func(t *testing.T) { test(t, scope) })
	}
}

// perPropertyLimiter is a limiter of one channel that limits per property and
// family (testChannel's, scope property).
func perPropertyLimiter(t *testing.T, slug string, perMinute, burst, quota int) *Limiter {
	t.Helper()
	rdb, prefix := testRedis(t)
	ch := testChannel(slug, perMinute, burst, quota)
	ch.Scope = models.ScopeProperty
	return New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix})
}

// neighboursSend checks that requests of slug for another property and for another
// family are sent: on a per-property channel each property and family has its own
// window and back-off. why ends the failure message.
func neighboursSend(t *testing.T, l *Limiter, slug, why string) {
	t.Helper()
	other := req(slug, 3)
	other.Property = "prop_00000002"
	avail := req(slug, 3)
	avail.Family = models.FamilyAvailability
	for _, r := range []Request{other, avail} {
		if d := mustReserve(t, l, r); d.State != Send {
			t.Fatalf("%s/%s %s: %+v", r.Property, r.Family, why, d)
		}
	}
}

var ids atomic.Int64

func req(channel string, priority int) Request {
	return Request{Channel: channel, Family: models.FamilyRates, Priority: priority, Cost: 1,
		Property: "prop_00000001", ID: "r" + strconv.FormatInt(ids.Add(1), 10)}
}

// lineReq is a request of priority 3 on channel with one line: room, the nights
// from..to, at version.
func lineReq(channel, room, from, to string, version int64) Request {
	r := req(channel, 3)
	r.Lines = []models.ARILine{line(room, from, to, version)}
	return r
}

// mustSettle settles s and fails the test on an error.
func mustSettle(t testing.TB, l *Limiter, s Settlement) Settled {
	t.Helper()
	got, err := l.Settle(context.Background(), s)
	if err != nil {
		t.Fatalf("settle %s: %v", s.Request.ID, err)
	}
	return got
}

func mustReserve(t testing.TB, l *Limiter, r Request) Decision {
	t.Helper()
	d, err := l.Reserve(context.Background(), r)
	if err != nil {
		t.Fatalf("reserve %+v: %v", r, err)
	}
	return d
}

// slotsOf reserves every request at once and returns each one's slot as an offset
// from the first call: reservations make a whole schedule visible without waiting.
func slotsOf(t *testing.T, l *Limiter, rs []Request) []time.Duration {
	t.Helper()
	start := time.Now()
	out := make([]time.Duration, len(rs))
	for i, r := range rs {
		d := mustReserve(t, l, r)
		if d.State != Send && d.State != Wait {
			t.Fatalf("request %d: state %s, want send or wait", i, d.State)
		}
		out[i] = time.Since(start) + d.Wait
	}
	return out
}

// maxInWindow is the most slots in any window of length w.
func maxInWindow(slots []time.Duration, w time.Duration) int { return models.MostInWindow(slots, w) }

func TestScheduleKeepsTheDeclaredWindowAndBurstAndUsesAllOfIt(t *testing.T) {
	checkWindowAndBurst(t, 0, 0)
}

// A channel that declares a short window is held to it exactly as a 60 s one is; the
// margin, absolute time, is scaled with the window so that window use stays comparable.
func TestScheduleKeepsADeclaredShortWindow(t *testing.T) {
	checkWindowAndBurst(t, 6*time.Second, 50*time.Millisecond)
}

// checkWindowAndBurst saturates a channel of the given window (zero: the 60 s
// default) and asserts at most the limit in any window, exactly the burst back to
// back, and a span within 3 % of the minimum the window allows.
func checkWindowAndBurst(t *testing.T, window, margin time.Duration) {
	rdb, prefix := testRedis(t)
	const rate, burst, n = 30, 3, 95
	cfg := testChannel("win", rate, burst, 10000)
	cfg.Window = window
	w := cfg.WindowLength()
	l := New(rdb, []models.ChannelConfig{cfg}, Options{Prefix: prefix, Margin: margin})
	rs := make([]Request, n)
	for i := range rs {
		rs[i] = req("win", 3)
		// Families share the one window: every third is an availability request.
		if i%3 == 2 {
			rs[i].Family = models.FamilyAvailability
		}
	}
	slots := slotsOf(t, l, rs)
	if got := maxInWindow(slots, w); got > rate {
		t.Errorf("most slots in a %s window %d, want <= %d", w, got, rate)
	}
	sorted := slices.Clone(slots)
	slices.Sort(sorted)
	backToBack := 0
	for i := range sorted {
		if sorted[i] < sorted[0]+w/120 {
			backToBack++
		}
	}
	if backToBack != burst {
		t.Errorf("%d slots at once, want the burst %d", backToBack, burst)
	}
	// Saturated, the schedule runs at the declared limit: the minimum the window
	// allows, stretched only by the margin per window.
	span := sorted[n-1]
	ideal := time.Duration(float64(n-burst) / rate * float64(w))
	if span > ideal*103/100 {
		t.Errorf("%d requests span %s, want <= 1.03 x %s", n, span, ideal)
	}
	t.Logf("%d requests at %d per %s burst %d: span %s (ideal %s, %.3f), most in a window %d",
		n, rate, w, burst, span.Round(time.Millisecond), ideal.Round(time.Millisecond),
		float64(span)/float64(ideal), maxInWindow(slots, w))
}

func TestBulkWorkLeavesTheBurstToUrgentWork(t *testing.T) {
	rdb, prefix := testRedis(t)
	l := New(rdb, []models.ChannelConfig{testChannel("bulkburst", 60, 5, 1000)}, Options{Prefix: prefix})
	if d := mustReserve(t, l, req("bulkburst", 5)); d.State != Send {
		t.Fatalf("first bulk request: %+v, want send", d)
	}
	if d := mustReserve(t, l, req("bulkburst", 5)); d.State != Wait || d.Wait < 900*time.Millisecond {
		t.Fatalf("second bulk request: %+v, want a paced slot, not the burst", d)
	}
	// Default-priority work on an idle schedule still has its burst.
	l2 := New(rdb, []models.ChannelConfig{testChannel("defburst", 60, 5, 1000)}, Options{Prefix: prefix})
	for i := range 5 {
		if d := mustReserve(t, l2, req("defburst", 3)); d.State != Send {
			t.Fatalf("default priority %d: %+v, want the burst", i, d)
		}
	}
}

func TestReservationHoldsItsSlot(t *testing.T) {
	rdb, prefix := testRedis(t)
	l := New(rdb, []models.ChannelConfig{testChannel("hold", 60, 1, 1000)}, Options{Prefix: prefix})
	first := mustReserve(t, l, req("hold", 3))
	if first.State != Send {
		t.Fatalf("first request: %+v, want send", first)
	}
	r := req("hold", 3)
	d := mustReserve(t, l, r)
	if d.State != Wait || d.Wait < 900*time.Millisecond || d.Wait > 1100*time.Millisecond {
		t.Fatalf("second request: %+v, want a held slot about 1 s away", d)
	}
	again := mustReserve(t, l, r)
	if again.State != Wait || again.Wait > d.Wait || d.Wait-again.Wait > 100*time.Millisecond {
		t.Fatalf("asking again: %+v, want the same slot (wait %s)", again, d.Wait)
	}
	st, err := l.Status(context.Background(), "hold")
	if err != nil {
		t.Fatal(err)
	}
	if st.Ahead != 1 || st.InWindow != 1 {
		t.Fatalf("status %+v: want 1 slot in the window and 1 ahead", st)
	}
	time.Sleep(again.Wait + 20*time.Millisecond)
	if due := mustReserve(t, l, r); due.State != Send || due.DailyUsed != 2 {
		t.Fatalf("at its slot: %+v, want send with 2 used", due)
	}
}

func TestUrgentTakesTheEarliestBulkSlot(t *testing.T) {
	rdb, prefix := testRedis(t)
	l := New(rdb, []models.ChannelConfig{testChannel("prio", 60, 1, 1000)}, Options{Prefix: prefix})
	var bulk []Request
	for range 20 {
		bulk = append(bulk, req("prio", 5))
	}
	slots := slotsOf(t, l, bulk)
	urgent := mustReserve(t, l, req("prio", 1))
	if urgent.Wait > 1100*time.Millisecond {
		t.Fatalf("urgent behind 20 bulk requests waits %s, want <= 1 token interval", urgent.Wait)
	}
	// The bulk request whose slot the urgent one took moved to the tail; the others kept theirs.
	moved := mustReserve(t, l, bulk[1])
	if moved.Wait < slots[19]-time.Second {
		t.Fatalf("bumped bulk request waits %s, want after the last bulk slot (%s)", moved.Wait, slots[19])
	}
	if kept := mustReserve(t, l, bulk[2]); kept.Wait > slots[2] {
		t.Fatalf("bulk request 2 moved: waits %s, held %s", kept.Wait, slots[2])
	}
	// Equal priority does not jump the queue within one property and family.
	late := mustReserve(t, l, req("prio", 5))
	if late.Wait < slots[19] {
		t.Fatalf("a new bulk request waits %s, want behind the queue (%s)", late.Wait, slots[19])
	}
}

func TestPropertiesTakeTurns(t *testing.T) {
	rdb, prefix := testRedis(t)
	l := New(rdb, []models.ChannelConfig{testChannel("turns", 60, 1, 1000)}, Options{Prefix: prefix})
	for range 30 {
		mustReserve(t, l, req("turns", 4))
	}
	for i := range 3 {
		r := req("turns", 4)
		r.Property = "prop_00000002"
		d := mustReserve(t, l, r)
		if want := time.Duration(i+1)*time.Second + 200*time.Millisecond; d.Wait > want {
			t.Fatalf("other property's change %d behind a 30-request sync waits %s, want <= %s", i, d.Wait, want)
		}
	}
}

func TestWorkWaitingMaxAgeIsNotMovedBack(t *testing.T) {
	rdb, prefix := testRedis(t)
	l := New(rdb, []models.ChannelConfig{testChannel("age", 60, 1, 1000)},
		Options{Prefix: prefix, MaxAge: 300 * time.Millisecond})
	mustReserve(t, l, req("age", 5))
	var slots []time.Duration
	for range 5 {
		slots = append(slots, mustReserve(t, l, req("age", 5)).Wait)
	}
	time.Sleep(400 * time.Millisecond)
	urgent := mustReserve(t, l, req("age", 1))
	if urgent.Wait < slots[4]-500*time.Millisecond {
		t.Fatalf("urgent waits %s: it moved bulk work older than MaxAge (last bulk slot %s)", urgent.Wait, slots[4])
	}
}

func line(room string, from, to string, version int64) models.ARILine {
	f, _ := models.ParseDate(from)
	tt, _ := models.ParseDate(to)
	return models.ARILine{RoomTypeCode: room, RatePlanCode: "BAR", From: f, To: tt, Version: version}
}

func TestOrderingGateDropsOlderNightsAndLeasesInFlightOnes(t *testing.T) {
	rdb, prefix := testRedis(t)
	l := New(rdb, []models.ChannelConfig{testChannel("gate", 600, 50, 1000)}, Options{Prefix: prefix})
	ctx := context.Background()

	a := req("gate", 3)
	a.Lines = []models.ARILine{line("DBL", "2030-05-01", "2030-05-03", 6)}
	if d := mustReserve(t, l, a); d.State != Send || len(d.Dropped) != 0 {
		t.Fatalf("v6: %+v, want send", d)
	}
	// v5 of nights 2..4 while v6 is in flight: never in flight together.
	b := req("gate", 3)
	b.Lines = []models.ARILine{line("DBL", "2030-05-02", "2030-05-04", 5), line("SGL", "2030-05-02", "2030-05-02", 5)}
	if d := mustReserve(t, l, b); d.State != Blocked || d.Wait <= 0 {
		t.Fatalf("overlapping request while v6 is in flight: %+v, want blocked", d)
	}
	if err := l.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	d := mustReserve(t, l, b)
	if d.State != Send {
		t.Fatalf("after release: %+v, want send", d)
	}
	want := []models.LineNight{{Line: 0, Date: mustDate("2030-05-02")}, {Line: 0, Date: mustDate("2030-05-03")}}
	if !slices.Equal(d.Dropped, want) {
		t.Fatalf("dropped %v, want %v (older than the v6 sent)", d.Dropped, want)
	}
	used := d.DailyUsed
	if err := l.Release(ctx, b); err != nil {
		t.Fatal(err)
	}
	// Entirely older: nothing is sent and nothing is spent.
	c := lineReq("gate", "DBL", "2030-05-01", "2030-05-02", 4)
	if d := mustReserve(t, l, c); d.State != Superseded || len(d.Dropped) != 2 {
		t.Fatalf("v4: %+v, want superseded with 2 nights", d)
	}
	// The same version again (a retry of lost answer) is not older.
	e := lineReq("gate", "DBL", "2030-05-01", "2030-05-01", 6)
	if d := mustReserve(t, l, e); d.State != Send || len(d.Dropped) != 0 || d.DailyUsed != used+1 {
		t.Fatalf("equal version: %+v, want send charging 1", d)
	}
	// Other families and properties have their own memory.
	f := req("gate", 3)
	f.Family = models.FamilyAvailability
	f.Lines = []models.ARILine{line("DBL", "2030-05-01", "2030-05-01", 1)}
	if d := mustReserve(t, l, f); d.State != Send {
		t.Fatalf("availability v1: %+v, want send", d)
	}
}

func mustDate(s string) models.Date {
	d, err := models.ParseDate(s)
	if err != nil {
		panic(err)
	}
	return d
}

func TestOrderingGateComparesVersionsBeyondFloatPrecision(t *testing.T) {
	rdb, prefix := testRedis(t)
	l := New(rdb, []models.ChannelConfig{testChannel("big", 600, 50, 1000)}, Options{Prefix: prefix})
	ctx := context.Background()
	const base = int64(1_764_523_456_789_000_001) // a nanosecond clock: beyond 2^53
	newer := req("big", 3)
	newer.Lines = []models.ARILine{line("DBL", "2030-05-01", "2030-05-01", base+1)}
	if d := mustReserve(t, l, newer); d.State != Send {
		t.Fatalf("%+v", d)
	}
	if err := l.Release(ctx, newer); err != nil {
		t.Fatal(err)
	}
	older := req("big", 3)
	older.Lines = []models.ARILine{line("DBL", "2030-05-01", "2030-05-01", base)}
	if d := mustReserve(t, l, older); d.State != Superseded {
		t.Fatalf("version %d after %d: %+v, want superseded", base, base+1, d)
	}
	tenfold := req("big", 3)
	tenfold.Lines = []models.ARILine{line("DBL", "2030-05-01", "2030-05-01", 9)}
	if d := mustReserve(t, l, tenfold); d.State != Superseded {
		t.Fatalf("version 9 after %d: %+v, want superseded", base+1, d)
	}
}

func TestExpiredLeaseNoLongerBlocks(t *testing.T) {
	rdb, prefix := testRedis(t)
	l := New(rdb, []models.ChannelConfig{testChannel("lease", 600, 50, 1000)},
		Options{Prefix: prefix, Lease: 200 * time.Millisecond})
	a := req("lease", 3)
	a.Lines = []models.ARILine{line("DBL", "2030-05-01", "2030-05-01", 1)}
	mustReserve(t, l, a) // the worker dies: no Release
	b := req("lease", 3)
	b.Lines = []models.ARILine{line("DBL", "2030-05-01", "2030-05-01", 2)}
	if d := mustReserve(t, l, b); d.State != Blocked {
		t.Fatalf("%+v, want blocked", d)
	}
	time.Sleep(250 * time.Millisecond)
	if d := mustReserve(t, l, b); d.State != Send {
		t.Fatalf("after the lease expired: %+v, want send", d)
	}
}

// Answers that send nothing leave the pace and the schedule where they were: after
// three blocked answers (one of them for a slot held first) a burst of 6 is whole.
func TestARequestNotSentConsumesNothing(t *testing.T) {
	rdb, prefix := testRedis(t)
	ch := shortWindowChannel("nosend", 6, models.ScopeChannel)
	l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix})
	ctx := context.Background()
	blocker := req("nosend", 3)
	blocker.Lines = []models.ARILine{line("DBL", "2030-05-01", "2030-05-03", 2)}
	if d := mustReserve(t, l, blocker); d.State != Send {
		t.Fatalf("first request: %+v, want send", d)
	}
	// One interval later the burst is whole again.
	time.Sleep(150 * time.Millisecond)
	before, err := l.Status(ctx, "nosend")
	if err != nil {
		t.Fatal(err)
	}
	overlapping := func() Request {
		r := req("nosend", 3)
		r.Lines = []models.ARILine{line("DBL", "2030-05-02", "2030-05-02", 3)}
		return r
	}
	for i := range 2 {
		if d := mustReserve(t, l, overlapping()); d.State != Blocked {
			t.Fatalf("overlapping request %d: %+v, want blocked", i, d)
		}
	}
	held := overlapping()
	held.Hold = true
	if d := mustReserve(t, l, held); d.State != Wait || d.Wait != 0 {
		t.Fatalf("holding a due slot: %+v, want wait 0", d)
	}
	held.Hold = false
	if d := mustReserve(t, l, held); d.State != Blocked {
		t.Fatalf("the held request at its slot: %+v, want blocked", d)
	}
	after, err := l.Status(ctx, "nosend")
	if err != nil {
		t.Fatal(err)
	}
	if after.InWindow != before.InWindow || after.Ahead != before.Ahead || after.NextSlotIn > before.NextSlotIn ||
		after.DailyUsed != before.DailyUsed {
		t.Fatalf("after three blocked answers the schedule moved: %+v, before %+v", after, before)
	}
	for i := range 6 {
		if d := mustReserve(t, l, req("nosend", 3)); d.State != Send {
			t.Fatalf("fresh request %d of the burst: %+v, want send", i, d)
		}
	}
}

func TestHoldReservesWithoutSending(t *testing.T) {
	rdb, prefix := testRedis(t)
	l := New(rdb, []models.ChannelConfig{testChannel("hold2", 600, 5, 1000)}, Options{Prefix: prefix})
	r := req("hold2", 3)
	r.Hold = true
	if d := mustReserve(t, l, r); d.State != Wait || d.Wait != 0 || d.DailyUsed != 0 {
		t.Fatalf("hold of a due slot: %+v, want wait 0 and nothing spent", d)
	}
	r.Hold = false
	if d := mustReserve(t, l, r); d.State != Send || d.DailyUsed != 1 {
		t.Fatalf("then: %+v, want send", d)
	}
	if n := statusOf(t, l, "hold2").InWindow; n != 1 {
		t.Fatalf("in window %d, want 1: a held then sent slot is one slot", n)
	}
}

func TestResendTakesANewSlotAndTheOldOneStaysCounted(t *testing.T) {
	rdb, prefix := testRedis(t)
	l := New(rdb, []models.ChannelConfig{testChannel("resend", 60, 5, 1000)}, Options{Prefix: prefix})
	r := req("resend", 3)
	mustReserve(t, l, r)
	if d := mustReserve(t, l, r); d.State != Send || d.DailyUsed != 2 {
		t.Fatalf("resend of a sent request: %+v, want a second send", d)
	}
	if n := statusOf(t, l, "resend").InWindow; n != 2 {
		t.Fatalf("in window %d, want 2: both sends count", n)
	}
}

// statusOf is channel's Status.
func statusOf(t *testing.T, l *Limiter, channel string) Status {
	t.Helper()
	st, err := l.Status(context.Background(), channel)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestPauseBackoffAndQuota(t *testing.T) {
	rdb, prefix := testRedis(t)
	l := New(rdb, []models.ChannelConfig{testChannel("stop", 600, 50, 20)}, Options{Prefix: prefix})
	ctx := context.Background()
	if err := l.Pause(ctx, "stop", "maintenance"); err != nil {
		t.Fatal(err)
	}
	if d := mustReserve(t, l, req("stop", 1)); d.State != Paused || d.PausedReason != "maintenance" || d.Wait != 30*time.Minute {
		t.Fatalf("paused: %+v", d)
	}
	if err := l.Resume(ctx, "stop"); err != nil {
		t.Fatal(err)
	}
	if err := l.Backoff(ctx, "stop", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Backoff(ctx, "stop", time.Second); err != nil {
		t.Fatal(err)
	}
	if d := mustReserve(t, l, req("stop", 1)); d.State != Backoff || d.Wait < 4*time.Second || d.Wait > 5*time.Second {
		t.Fatalf("backoff: %+v, want about 5 s (a shorter one does not cut it)", d)
	}
	if err := l.Resume(ctx, "stop"); err != nil {
		t.Fatal(err)
	}
	for range 18 {
		if d := mustReserve(t, l, req("stop", 3)); d.State != Send {
			t.Fatalf("%+v, want send", d)
		}
	}
	// 19 of 20 is 95 %: bulk waits for the reset, urgent goes on.
	if d := mustReserve(t, l, req("stop", 5)); d.State != Quota || d.Tier != TierThrottle || d.DailyUsed != 18 {
		t.Fatalf("bulk at 95 %%: %+v, want quota/throttle and nothing spent", d)
	}
	for range 2 {
		if d := mustReserve(t, l, req("stop", 1)); d.State != Send {
			t.Fatalf("urgent below 100 %%: %+v", d)
		}
	}
	if d := mustReserve(t, l, req("stop", 1)); d.State != Quota || d.Tier != TierStop || d.Wait > 24*time.Hour {
		t.Fatalf("at 100 %%: %+v, want quota stop until midnight", d)
	}
}

func TestCircuitBreakerOpensOnAStreakProbesOnceAndClosesOnRecovery(t *testing.T) {
	rdb, prefix := testRedis(t)
	l := New(rdb, []models.ChannelConfig{testChannel("brk", 600, 50, 1000)}, Options{Prefix: prefix})
	ctx := context.Background()
	outcome := func(ok bool) (string, bool) {
		t.Helper()
		st, changed, err := l.Outcome(ctx, "brk", ok)
		if err != nil {
			t.Fatal(err)
		}
		return st, changed
	}
	outcome(false)
	outcome(false)
	if st, _ := outcome(true); st != BreakerClosed {
		t.Fatalf("a success resets the streak: %s", st)
	}
	outcome(false)
	outcome(false)
	if st, changed := outcome(false); st != BreakerOpen || !changed {
		t.Fatalf("third failure in a row: %s %v, want opened", st, changed)
	}
	if d := mustReserve(t, l, req("brk", 1)); d.State != Breaker || d.Wait <= 0 || d.Wait > 300*time.Millisecond {
		t.Fatalf("while open: %+v, want a breaker wait up to the cool-down", d)
	}
	st, err := l.Status(ctx, "brk")
	if err != nil {
		t.Fatal(err)
	}
	if st.Breaker != BreakerOpen || st.BreakerOpenFor <= 0 || st.Failures != 3 {
		t.Fatalf("status %+v", st)
	}
	time.Sleep(320 * time.Millisecond)
	probe := req("brk", 3)
	if d := mustReserve(t, l, probe); d.State != Send {
		t.Fatalf("after the cool-down: %+v, want one probe sent", d)
	}
	if d := mustReserve(t, l, req("brk", 1)); d.State != Breaker {
		t.Fatalf("while the probe is out: %+v, want others to wait", d)
	}
	if st, changed := outcome(false); st != BreakerOpen || !changed {
		t.Fatalf("failed probe: %s %v, want open again", st, changed)
	}
	time.Sleep(320 * time.Millisecond)
	if d := mustReserve(t, l, req("brk", 3)); d.State != Send {
		t.Fatalf("second probe: %+v", d)
	}
	if st, changed := outcome(true); st != BreakerClosed || !changed {
		t.Fatalf("good probe: %s %v, want closed", st, changed)
	}
	for range 3 {
		if d := mustReserve(t, l, req("brk", 3)); d.State != Send {
			t.Fatalf("closed again: %+v", d)
		}
	}
}

// tenSent is a limiter on channel slug (perMinute a window, burst 10) that has just
// sent ten requests of its own.
func tenSent(t *testing.T, slug string, perMinute int) *Limiter {
	t.Helper()
	rdb, prefix := testRedis(t)
	l := New(rdb, []models.ChannelConfig{testChannel(slug, perMinute, 10, 1000)}, Options{Prefix: prefix})
	for range 10 {
		mustReserve(t, l, req(slug, 3))
	}
	return l
}

// adaptRates reports the rates family's rate headers (limit, remaining, reset) on
// channel, and fails the test on an error.
func adaptRates(t *testing.T, l *Limiter, channel string, limit, remaining int, reset time.Duration) {
	t.Helper()
	if err := l.Adapt(context.Background(), channel, "", models.FamilyRates, limit, remaining, reset); err != nil {
		t.Fatal(err)
	}
}

func TestHeadersLowerTheLimitOnlyForOthersTraffic(t *testing.T) {
	l := tenSent(t, "adapt", 30)
	// Our own 10 explain the server's 20 remaining: nothing changes.
	adaptRates(t, l, "adapt", 30, 20, time.Minute)
	if st := statusOf(t, l, "adapt"); st.Foreign != 0 || st.Limit != 30 || st.PausedFor != 0 {
		t.Fatalf("own traffic lowered the limit: %+v", st)
	}
	// 5 remaining where we expect 20: others use 15 of the window.
	adaptRates(t, l, "adapt", 30, 5, time.Minute)
	if st := statusOf(t, l, "adapt"); st.Foreign != 15 || st.Limit != 15 || st.ForeignFor < 59*time.Second {
		t.Fatalf("want 15 foreign for a minute: %+v", st)
	}
	// Nothing remaining that we did not use: every worker waits for the reset.
	adaptRates(t, l, "adapt", 30, 0, 20*time.Second)
	if st := statusOf(t, l, "adapt"); st.PausedFor < 19*time.Second {
		t.Fatalf("remaining 0: %+v, want a back-off to the reset", st)
	}
}

func TestNothingRemainingOfOurOwnWindowIsNoBackoff(t *testing.T) {
	l := tenSent(t, "full", 10)
	adaptRates(t, l, "full", 10, 0, time.Minute)
	if st := statusOf(t, l, "full"); st.PausedFor != 0 || st.Foreign != 0 {
		t.Fatalf("our own full window paused the channel: %+v", st)
	}
}

func TestPerPropertyWindows(t *testing.T) {
	l := perPropertyLimiter(t, "props", 10, 10, 1000)
	for range 10 {
		if d := mustReserve(t, l, req("props", 3)); d.State != Send {
			t.Fatalf("%+v", d)
		}
	}
	if d := mustReserve(t, l, req("props", 3)); d.State != Wait || d.Wait < 59*time.Second {
		t.Fatalf("11th for one property and family: %+v, want a slot a window later", d)
	}
	neighboursSend(t, l, "props", "has its own window")
	noProp := req("props", 3)
	noProp.Property = ""
	if _, err := l.Reserve(context.Background(), noProp); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("no property on a per-property channel: %v", err)
	}
}

func TestConcurrentReservationsKeepTheWindow(t *testing.T) {
	rdb, prefix := testRedis(t)
	const rate = 40
	l := New(rdb, []models.ChannelConfig{testChannel("conc", rate, 4, 100000)}, Options{Prefix: prefix})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 15 {
				r := req("conc", 1+(g+i)%5)
				r.Property = fmt.Sprintf("prop_%08d", g%3)
				mustReserve(t, l, r)
			}
		}()
	}
	wg.Wait()
	// Urgent work and turns move held slots, so the schedule is read back whole.
	z, err := rdb.ZRangeWithScores(context.Background(), prefix+"{conc}:sched:all", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var slots []time.Duration
	for _, x := range z {
		slots = append(slots, time.Duration(x.Score*float64(time.Millisecond)))
	}
	if len(slots) != 120 {
		t.Fatalf("%d slots, want 120", len(slots))
	}
	if got := maxInWindow(slots, time.Minute); got > rate {
		t.Fatalf("120 concurrent reservations: %d in a 60 s window, want <= %d", got, rate)
	}
}

// Slots are written in whole ms, sent at once or held, so that a window's schedule
// of up to 128 slots stays a listpack of integers: a fractional score is parsed
// again by every count and insert that walks the set.
func TestTheScheduleKeepsWholeMilliseconds(t *testing.T) {
	rdb, prefix := testRedis(t)
	l := New(rdb, []models.ChannelConfig{testChannel("whole", 600, 20, 100000)}, Options{Prefix: prefix})
	sent, held := 0, 0
	for range 60 {
		switch d := mustReserve(t, l, req("whole", 3)); d.State {
		case Send:
			sent++
		case Wait:
			held++
		}
	}
	if sent == 0 || held == 0 {
		t.Fatalf("%d sent and %d held, want both", sent, held)
	}
	ctx := context.Background()
	key := prefix + "{whole}:sched:all"
	z, err := rdb.ZRangeWithScores(ctx, key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range z {
		if x.Score != math.Trunc(x.Score) {
			t.Errorf("slot %v of %s: not a whole ms", x.Score, x.Member)
		}
	}
	if enc, err := rdb.ObjectEncoding(ctx, key).Result(); err != nil || enc != "listpack" {
		t.Errorf("a schedule of %d slots is encoded %q (%v), want listpack", len(z), enc, err)
	}
}

func TestEveryKeyHasTTLAndHashTag(t *testing.T) {
	rdb, prefix := testRedis(t)
	l := New(rdb, []models.ChannelConfig{testChannel("ttl", 600, 5, 1000)}, Options{Prefix: prefix})
	ctx := context.Background()
	r := req("ttl", 1)
	r.Lines = []models.ARILine{line("DBL", "2030-05-01", "2030-05-01", 1)}
	mustReserve(t, l, r)
	mustReserve(t, l, req("ttl", 3))
	// Bulk work never takes the burst: this one holds a slot, and so fills the index.
	if d := mustReserve(t, l, req("ttl", 5)); d.State != Wait {
		t.Fatalf("bulk request after two sends: %+v, want a held slot", d)
	}
	if _, _, err := l.Outcome(ctx, "ttl", false); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		l.Adapt(ctx, "ttl", "", models.FamilyRates, 600, 1, 30*time.Second),
		l.Backoff(ctx, "ttl", time.Second),
		l.Pause(ctx, "ttl", "check"),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	n := 0
	for iter.Next(ctx) {
		k := iter.Val()
		n++
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("key %s has no TTL (%v)", k, ttl)
		}
		if !strings.HasPrefix(k, prefix+"{ttl}:") {
			t.Errorf("key %s lacks its channel hash tag", k)
		}
	}
	// pause, paused_until, daily, adaptive, sched, tat, res, gate, lease, breaker,
	// the held index: index, turn, and the mark of the scope's keys' TTLs: alive (no
	// budget: CheckConfig was not called)
	if n != 13 {
		t.Errorf("%d keys, want 13", n)
	}
}

// The scope's keys are renewed through one mark of how long they live (alive), not
// by reading their TTLs: a key that empties (its held slots came due) and is made
// again while the mark still says it lives must get a TTL all the same.
func TestKeysMadeAgainWhileTheMarkLivesHaveTTLs(t *testing.T) {
	inEachScope(t, func(t *testing.T, scope models.LimitScope) {
		rdb, prefix := testRedis(t)
		// Held slots come due and leave the index between the calls below.
		ch := shortWindowChannel("again", 1, scope)
		l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix})
		ctx := context.Background()
		for i := range 24 {
			// Bulk work holds a slot whenever one was sent within the interval.
			mustReserve(t, l, req("again", 4+i%2))
			iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			for iter.Next(ctx) {
				if ttl := rdb.PTTL(ctx, iter.Val()).Val(); ttl <= 0 {
					t.Fatalf("call %d: key %s has no TTL (%v)", i, iter.Val(), ttl)
				}
			}
			// Every third gap outlasts the held slots, so the index and turn
			// empty and are made again by the next call.
			if i%3 == 2 {
				time.Sleep(300 * time.Millisecond)
			} else {
				time.Sleep(40 * time.Millisecond)
			}
		}
	})
}

func TestInvalidRequests(t *testing.T) {
	rdb, prefix := testRedis(t)
	ch := testChannel("known", 600, 5, 1000)
	ch.Shares = models.FamilyShares{Rates: 100}
	l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix})
	ctx := context.Background()
	unknown := []struct {
		name string
		call func() error
	}{
		{"reserve", func() error { _, err := l.Reserve(ctx, req("nope", 1)); return err }},
		{"release", func() error { return l.Release(ctx, req("nope", 1)) }},
		{"backoff", func() error { return l.Backoff(ctx, "nope", time.Second) }},
		{"adapt", func() error { return l.Adapt(ctx, "nope", "", models.FamilyRates, 1, 1, time.Second) }},
		{"pause", func() error { return l.Pause(ctx, "nope", "x") }},
		{"resume", func() error { return l.Resume(ctx, "nope") }},
		{"status", func() error { _, err := l.Status(ctx, "nope"); return err }},
	}
	for _, c := range unknown {
		if err := c.call(); !errors.Is(err, ErrUnknownChannel) {
			t.Errorf("%s on an unknown channel: err %v, want ErrUnknownChannel", c.name, err)
		}
	}
	noShare := req("known", 1)
	noShare.Family = models.FamilyAvailability
	if _, err := l.Reserve(ctx, noShare); !errors.Is(err, ErrNoBudget) {
		t.Errorf("family without a weight: err %v, want ErrNoBudget", err)
	}
	noID := req("known", 1)
	noID.ID = ""
	noCost := req("known", 1)
	noCost.Cost = 0
	for _, r := range []Request{req("known", 0), req("known", 6), noID, noCost} {
		if _, err := l.Reserve(ctx, r); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%+v: err %v, want ErrInvalidRequest", r, err)
		}
	}
}

func TestRedisDownFailsClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens here any more
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	l := New(rdb, []models.ChannelConfig{testChannel("down", 600, 5, 1000)}, Options{})
	d, err := l.Reserve(context.Background(), req("down", 1))
	if err == nil || d.State == Send {
		t.Fatalf("Redis down: got %+v, %v; want an error and no send", d, err)
	}
	if !strings.HasPrefix(err.Error(), "reserve down: ") {
		t.Fatalf("error %q lacks its context", err)
	}
}

func BenchmarkReserve(b *testing.B) {
	rdb, prefix := testRedis(b)
	ch := models.ChannelConfig{
		Slug: "bench", RatePerMinute: 1_000_000_000, Burst: 1_000_000,
		Shares: models.FamilyShares{Rates: 100}, Scope: models.ScopeChannel,
		DailyQuota: 1 << 50, QuotaUnit: models.QuotaRequests,
	}
	l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix})
	var n atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			r := Request{Channel: "bench", Family: models.FamilyRates, Priority: 3, Cost: 1,
				Property: "prop_00000001", ID: strconv.FormatInt(i, 10),
				Lines: []models.ARILine{line("DBL", "2030-05-01", "2030-05-07", i)}}
			d, err := l.Reserve(context.Background(), r)
			if err != nil {
				b.Error(err)
				return
			}
			if d.State != Send {
				b.Errorf("not sent with a huge budget: %+v", d)
				return
			}
			_ = l.Release(context.Background(), r)
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// On a channel that limits per property, a 429 backs off the property's window it
// came from; the channel's other properties and windows go on.
func TestA429OnAPropertyBacksOffThatPropertyOnly(t *testing.T) {
	rdb, prefix := testRedis(t)
	ch := testChannel("prop429", 60, 6, 1000)
	ch.Scope = models.ScopeProperty
	l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix})
	ctx := context.Background()
	if err := l.BackoffScope(ctx, "prop429", "prop_00000001", models.FamilyRates, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := mustReserve(t, l, req("prop429", 1)); d.State != Backoff || d.Wait < 4900*time.Millisecond {
		t.Fatalf("the property that got the 429: %+v, want a 5 s back-off", d)
	}
	neighboursSend(t, l, "prop429", "is not backed off")
	if err := l.BackoffScope(ctx, "prop429", "", models.FamilyRates, time.Second); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("back-off without a property on a per-property channel: %v", err)
	}
	// On a channel that limits per channel, the same call holds the whole channel.
	l2 := New(rdb, []models.ChannelConfig{testChannel("chan429", 60, 6, 1000)}, Options{Prefix: prefix})
	if err := l2.BackoffScope(ctx, "chan429", "prop_00000001", models.FamilyRates, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	o := req("chan429", 3)
	o.Property = "prop_00000002"
	if d := mustReserve(t, l2, o); d.State != Backoff {
		t.Fatalf("another property of a per-channel channel: %+v, want the channel's back-off", d)
	}
}

// When a back-off ends, the requests that waited for it leave at the channel's pace,
// one interval apart, not together in a burst.
func TestWaitersAfterABackoffLeaveAtThePace(t *testing.T) {
	inEachScope(t, func(t *testing.T, scope models.LimitScope) {
		rdb, prefix := testRedis(t)
		ch := shortWindowChannel("after429", 6, scope)
		l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix})
		interval := (ch.Window + l.Margin()) / time.Duration(ch.RatePerMinute)
		ctx := context.Background()
		// The back-off ends at end or a little after (the call's own latency).
		end := time.Now().Add(300 * time.Millisecond)
		if err := l.BackoffScope(ctx, "after429", "prop_00000001", models.FamilyRates, 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		var waiters []Request
		for range 4 {
			r := req("after429", 3)
			d := mustReserve(t, l, r)
			if d.State != Backoff {
				t.Fatalf("during the back-off: %+v", d)
			}
			waiters = append(waiters, r)
		}
		time.Sleep(time.Until(end.Add(20 * time.Millisecond)))
		asked := time.Now()
		slots := slotsOf(t, l, waiters)
		// The pace restarts at the back-off's end: waiter i leaves no earlier
		// than i intervals after it (half an interval's slack), however late the
		// waiters ask again (a busy machine may wake this test after the end).
		for i, at := range slots {
			after := asked.Add(at).Sub(end)
			if want := time.Duration(i)*interval - interval/2; after < want {
				t.Fatalf("waiters after the back-off leave %v after asking, %v after its end: waiter %d %s after the end, want at least %s (one interval is %s)",
					slots, asked.Sub(end), i, after, want, interval)
			}
			// A waiter whose turn of the pace is still ahead when they ask
			// leaves about an interval after the one before, not with it.
			if ahead := end.Add(time.Duration(i) * interval).Sub(asked); i > 0 && ahead > interval/2 {
				if gap := slots[i] - slots[i-1]; gap < interval/2 {
					t.Fatalf("waiters after the back-off leave at %v: %s apart, want about one interval (%s)", slots, gap, interval)
				}
			}
		}
	})
}
