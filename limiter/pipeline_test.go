package limiter

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/paritysync/paritysync/models"
)

// connectionSetup tells the handshake of a new connection from a call.
func connectionSetup(cmd redis.Cmder) bool { return cmd.Name() == "hello" || cmd.Name() == "client" }

// roundTrips is a go-redis hook counting round trips, a command alone or a pipeline,
// leaving out the handshakes of new connections.
type roundTrips struct{ n atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !connectionSetup(cmd) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !connectionSetup(cmds[0]) {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

func pipelineLimiter(t *testing.T) (*Limiter, *roundTrips) {
	t.Helper()
	rdb, prefix := testRedis(t)
	counted := redis.NewClient(rdb.Options())
	h := &roundTrips{}
	counted.AddHook(h)
	t.Cleanup(func() { _ = counted.Close() })
	return New(counted, []models.ChannelConfig{testChannel("pipe", 600, 10, 10000)}, Options{Prefix: prefix}), h
}

func TestDispatchReadsTheGateEpochAndTheSlotsLateness(t *testing.T) {
	ctx := context.Background()
	l, h := pipelineLimiter(t)
	d, err := l.Dispatch(ctx, req("pipe", 3))
	if err != nil || d.State != Send || d.Epoch != "" {
		t.Fatalf("before any rebuild: %+v, %v; want send with no epoch", d, err)
	}
	if _, err := l.MarkGateRebuilt(ctx, "pipe", "e1", nil); err != nil {
		t.Fatal(err)
	}
	r := req("pipe", 3)
	r.Hold = true
	held := mustReserve(t, l, r)
	if held.State != Wait {
		t.Fatalf("hold: %+v", held)
	}
	const late = 300 * time.Millisecond
	time.Sleep(held.Wait + late)
	r.Hold = false
	before := h.n.Load()
	d, err = l.Dispatch(ctx, r)
	if err != nil || d.State != Send || d.Epoch != "e1" {
		t.Fatalf("late holder: %+v, %v; want send under epoch e1", d, err)
	}
	if n := h.n.Load() - before; n != 1 {
		t.Errorf("Dispatch took %d round trips, want 1", n)
	}
	if d.Late < late-50*time.Millisecond || d.Late >= l.Margin() {
		t.Errorf("late by %s, want about %s (within the %s margin)", d.Late, late, l.Margin())
	}
}

func TestSettleReleasesAndHoldsTheNextSlotInOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	l, h := pipelineLimiter(t)
	night := models.DateOf(time.Now()).AddDays(3)
	line := models.ARILine{RoomTypeCode: "DBL", RatePlanCode: "BAR", From: night, To: night, Version: 1}
	first, other := req("pipe", 3), req("pipe", 3)
	first.Lines = []models.ARILine{line}
	line.Version = 2
	other.Lines = []models.ARILine{line}
	if d := mustReserve(t, l, first); d.State != Send {
		t.Fatalf("first: %+v", d)
	}
	if d := mustReserve(t, l, other); d.State != Blocked {
		t.Fatalf("other while first is in flight: %+v, want blocked", d)
	}
	next := req("pipe", 3)
	healthy := true
	before := h.n.Load()
	got, err := l.Settle(ctx, Settlement{Request: first, Healthy: &healthy, Next: &next,
		RateLimit: &RateLimit{Limit: 600, Remaining: 500, Reset: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if n := h.n.Load() - before; n != 1 {
		t.Errorf("Settle took %d round trips, want 1", n)
	}
	if got.Next.State != Wait || got.Breaker != BreakerClosed {
		t.Errorf("settled %+v, want the next slot held and the breaker closed", got)
	}
	if d := mustReserve(t, l, other); d.State != Send {
		t.Errorf("other after the release: %+v, want send", d)
	}
}

// A push whose answer never came keeps its nights for the lease and the channel's
// apply delay: a newer version waits for all of it, while the request's own retry
// (same id) goes at once.
func TestUnsettledPushKeepsItsNightsForTheChannelsApplyDelay(t *testing.T) {
	const applyDelay, lease = 300 * time.Millisecond, 200 * time.Millisecond
	l, first, newer := firstOfTwoSent(t, applyDelay, lease)
	sent := time.Now()
	healthy := false
	mustSettle(t, l, Settlement{Request: first, Healthy: &healthy, Unsettled: true})
	if d := mustReserve(t, l, newer); d.State != Blocked {
		t.Fatalf("newer version after a timeout: %+v, want blocked", d)
	}
	if d := mustReserve(t, l, first); d.State != Send {
		t.Fatalf("retry of the timed-out push (same id): %+v, want send", d)
	}
	resent := time.Now()
	mustSettle(t, l, Settlement{Request: first, Healthy: &healthy, Unsettled: true})
	// Past the lease alone, within the lease and the apply delay of the retry.
	time.Sleep(time.Until(sent.Add(lease + 50*time.Millisecond)))
	if d := mustReserve(t, l, newer); d.State != Blocked {
		t.Fatalf("newer version within the apply delay: %+v, want blocked", d)
	}
	time.Sleep(time.Until(resent.Add(lease + applyDelay + 50*time.Millisecond)))
	if d := mustReserve(t, l, newer); d.State != Send {
		t.Fatalf("newer version after the lease and the apply delay: %+v, want send", d)
	}
}

// A definite answer releases at once, as before.
func TestSettledPushReleasesItsNightsAtOnce(t *testing.T) {
	l, first, newer := firstOfTwoSent(t, time.Minute, 0)
	mustSettle(t, l, Settlement{Request: first})
	if d := mustReserve(t, l, newer); d.State != Send {
		t.Fatalf("newer version after a definite answer: %+v, want send", d)
	}
}

// A quota_exhausted answer stops the family it came from: Reserve answers Quota
// (tier stop) to that family only, until the stop ends, and Status reports it.
func TestStopFamilyStopsOnlyThatFamily(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testRedis(t)
	l := New(rdb, []models.ChannelConfig{testChannel("fam", 600, 10, 10000)}, Options{Prefix: prefix})
	if err := l.StopFamily(ctx, "fam", models.FamilyRates, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// A shorter stop never cuts a longer one short.
	if err := l.StopFamily(ctx, "fam", models.FamilyRates, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	rates := req("fam", 1)
	d := mustReserve(t, l, rates)
	if d.State != Quota || !d.FamilyStopped || d.Tier != TierStop || d.Wait <= 200*time.Millisecond || d.Wait > 300*time.Millisecond {
		t.Fatalf("rates while stopped: %+v, want quota (stop) for about 300ms", d)
	}
	avail := req("fam", 3)
	avail.Family = models.FamilyAvailability
	if d := mustReserve(t, l, avail); d.State != Send {
		t.Fatalf("availability while rates are stopped: %+v, want send", d)
	}
	st, err := l.Status(ctx, "fam")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Stopped) != 1 || st.Stopped[0].Family != models.FamilyRates || st.Stopped[0].For <= 0 || st.Tier != TierOK {
		t.Fatalf("status %+v, want rates stopped, the tier still ok", st)
	}
	time.Sleep(d.Wait + 20*time.Millisecond)
	if d := mustReserve(t, l, rates); d.State != Send {
		t.Fatalf("rates after the stop: %+v, want send", d)
	}
	if st, err := l.Status(ctx, "fam"); err != nil || len(st.Stopped) != 0 {
		t.Fatalf("status after the stop: %+v, %v; want no family stopped", st, err)
	}
}

// firstOfTwoSent is a limiter on channel "late", which may apply what it receives up
// to applyDelay late, with the given lease (0: the default), that has sent first,
// the older of two versions of one night (oneNightTwice); newer is the other.
func firstOfTwoSent(t *testing.T, applyDelay, lease time.Duration) (l *Limiter, first, newer Request) {
	t.Helper()
	rdb, prefix := testRedis(t)
	ch := testChannel("late", 600, 10, 10000)
	ch.MaxApplyDelay = applyDelay
	l = New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix, Lease: lease})
	first, newer = oneNightTwice("late")
	if d := mustReserve(t, l, first); d.State != Send {
		t.Fatalf("first: %+v", d)
	}
	return l, first, newer
}

// oneNightTwice is a request on channel for one night three days ahead, and a newer
// version of the same night.
func oneNightTwice(channel string) (first, newer Request) {
	night := models.DateOf(time.Now()).AddDays(3)
	ln := models.ARILine{RoomTypeCode: "DBL", RatePlanCode: "BAR", From: night, To: night, Version: 1}
	first, newer = req(channel, 3), req(channel, 3)
	first.Lines = []models.ARILine{ln}
	ln.Version = 2
	newer.Lines = []models.ARILine{ln}
	return first, newer
}

// forgetLibrary deletes the limiter's library from the test's Redis: what a server
// restarted empty (or a new one) looks like to the decision. Other tests' calls
// that find it gone load it again.
func forgetLibrary(t *testing.T, l *Limiter) {
	t.Helper()
	err := l.rdb.(*redis.Client).FunctionDelete(context.Background(), "paritysync_"+library.hash).Err()
	if err != nil && !strings.Contains(err.Error(), "not exist") {
		t.Fatal(err)
	}
}

// A server without the library loads it at the first decision, whichever way the
// decision comes: alone, in Dispatch's transaction, or held in Settle's pipeline,
// where only the decision goes again: the breaker counts the failure beside it once.
func TestDecisionsLoadTheLibraryWhereTheServerHasNone(t *testing.T) {
	ctx := context.Background()
	l, _ := pipelineLimiter(t)
	forgetLibrary(t, l)
	if d := mustReserve(t, l, req("pipe", 3)); d.State != Send {
		t.Fatalf("reserve on a server without the library: %+v, want send", d)
	}
	forgetLibrary(t, l)
	if d, err := l.Dispatch(ctx, req("pipe", 3)); err != nil || d.State != Send {
		t.Fatalf("dispatch on a server without the library: %+v, %v; want send", d, err)
	}
	// The test channel's breaker opens at the third failure in a row.
	sick := false
	for i := 1; i <= 2; i++ {
		forgetLibrary(t, l)
		next := req("pipe", 3)
		got := mustSettle(t, l, Settlement{Request: req("pipe", 3), Unsettled: true, Healthy: &sick, Next: &next})
		if got.Breaker != BreakerClosed || got.Next.State != Wait {
			t.Fatalf("failure %d on a server without the library: %+v, want the breaker closed "+
				"(one failure counted per answer) and the next slot held", i, got)
		}
	}
	if got := mustSettle(t, l, Settlement{Request: req("pipe", 3), Unsettled: true, Healthy: &sick}); got.Breaker != BreakerOpen {
		t.Errorf("third failure: breaker %q, want open", got.Breaker)
	}
}
