package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/paritysync/paritysync/dial/testenv"
	"github.com/paritysync/paritysync/models"
)

// loseRedis deletes every key of prefix: what Redis restarted empty looks like to
// one limiter (the Redis is shared, so nothing else is touched).
func loseRedis(t *testing.T, rdb *redis.Client, prefix string) {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		if err := rdb.Del(ctx, keys...).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestGateRebuiltAfterRedisLossKeepsNewerVersionsOut(t *testing.T) {
	rdb, prefix := testRedis(t)
	l := New(rdb, []models.ChannelConfig{testChannel("rb", 600, 50, 1000)}, Options{Prefix: prefix})
	ctx := context.Background()
	if e, err := l.GateEpoch(ctx, "rb"); err != nil || e != "" {
		t.Fatalf("fresh epoch %q, %v; want none", e, err)
	}
	a := req("rb", 3)
	a.Lines = []models.ARILine{line("DBL", "2030-05-01", "2030-05-02", 6)}
	if d := mustReserve(t, l, a); d.State != Send {
		t.Fatalf("v6: %+v", d)
	}
	first, err := l.MarkGateRebuilt(ctx, "rb", "epoch-1", nil)
	if err != nil || first != "epoch-1" {
		t.Fatalf("mark: %q, %v", first, err)
	}
	if again, _ := l.MarkGateRebuilt(ctx, "rb", "epoch-2", nil); again != "epoch-1" {
		t.Fatalf("second mark took over: %q, want the first epoch kept", again)
	}

	loseRedis(t, rdb, prefix)
	if e, _ := l.GateEpoch(ctx, "rb"); e != "" {
		t.Fatalf("epoch %q survived the loss", e)
	}
	// What the system of record says was sent: v6 of both nights.
	sent := []GateNight{{Room: "DBL", Plan: "BAR", Night: mustDate("2030-05-01"), Version: 6},
		{Room: "DBL", Plan: "BAR", Night: mustDate("2030-05-02"), Version: 6}}
	if n, err := l.LoadGate(ctx, "rb", "prop_00000001", models.FamilyRates, sent); err != nil || n != 2 {
		t.Fatalf("load: %d, %v", n, err)
	}
	// Loading an older copy never lowers the gate.
	older := []GateNight{{Room: "DBL", Plan: "BAR", Night: mustDate("2030-05-01"), Version: 3}}
	if n, err := l.LoadGate(ctx, "rb", "prop_00000001", models.FamilyRates, older); err != nil || n != 0 {
		t.Fatalf("older load raised %d, %v", n, err)
	}
	if e, err := l.MarkGateRebuilt(ctx, "rb", "epoch-3", nil); err != nil || e != "epoch-3" {
		t.Fatalf("mark after loss: %q, %v", e, err)
	}
	b := req("rb", 3)
	b.Lines = []models.ARILine{line("DBL", "2030-05-01", "2030-05-02", 5)}
	if d := decide(t, l, b); d.State != Superseded || len(d.Dropped) != 2 {
		t.Fatalf("v5 after the rebuild: %+v, want superseded (v6 was sent before the loss)", d)
	}
	if ttl := rdb.PTTL(ctx, prefix+"{rb}:gate_epoch").Val(); ttl <= 0 {
		t.Errorf("gate_epoch has no TTL (%v)", ttl)
	}
}

func TestMarkingStartsTheBucketsEmpty(t *testing.T) {
	rdb, prefix := testRedis(t)
	const rate, burst = 60, 5
	l := New(rdb, []models.ChannelConfig{testChannel("cold", rate, burst, 10000)}, Options{Prefix: prefix})
	if _, err := l.MarkGateRebuilt(context.Background(), "cold", "e", nil); err != nil {
		t.Fatal(err)
	}
	rs := make([]Request, 10)
	for i := range rs {
		rs[i] = req("cold", 3)
	}
	slots := slotsOf(t, l, rs)
	interval := time.Minute / rate
	for i, s := range slots {
		// One slot per interval from the mark: no burst on top of what the channel's
		// window may still hold from before the loss.
		if want := time.Duration(i+1) * interval; s < want-100*time.Millisecond {
			t.Errorf("slot %d at %s, want >= %s", i, s, want)
		}
	}
	if got := maxInWindow(slots, 500*time.Millisecond); got > 1 {
		t.Errorf("%d slots back to back after the mark, want 1", got)
	}
}

func TestPerPropertyMarkStartsTheGivenScopesEmpty(t *testing.T) {
	l := perPropertyLimiter(t, "pp", 60, 5, 10000)
	if _, err := l.MarkGateRebuilt(context.Background(), "pp", "e",
		[]GateScope{{Property: "prop_00000001", Family: models.FamilyRates}}); err != nil {
		t.Fatal(err)
	}
	if d := mustReserve(t, l, req("pp", 3)); d.State != Wait || d.Wait < 500*time.Millisecond {
		t.Fatalf("first request of a marked scope: %+v, want a paced wait", d)
	}
	other := req("pp", 3)
	other.Property = "prop_00000002"
	if d := mustReserve(t, l, other); d.State != Send {
		t.Fatalf("a scope with no sends to rebuild: %+v, want send", d)
	}
}

// TestGateFootprint measures what the ordering gate costs Redis per night sent: the
// gate is all that Redis keeps per cell (the system of record keeps the rest).
func TestGateFootprint(t *testing.T) {
	rdb, prefix := testRedis(t)
	l := New(rdb, []models.ChannelConfig{testChannel("fp", 600, 50, 1000)}, Options{Prefix: prefix})
	ctx := context.Background()
	// A property's year of one family: 6 room-rate pairs x 365 nights.
	var nights []GateNight
	first := mustDate("2030-01-01")
	for _, room := range []string{"DLXKING", "STDQUEEN", "SUITE"} {
		for _, plan := range []string{"BAR_FLEX", "BAR_NR"} {
			for d := range 365 {
				nights = append(nights, GateNight{Room: room, Plan: plan, Night: first.AddDays(d), Version: 1764500000 + int64(d)})
			}
		}
	}
	if _, err := l.LoadGate(ctx, "fp", "prop_1a2b3c4d", models.FamilyRates, nights); err != nil {
		t.Fatal(err)
	}
	bytes, err := rdb.MemoryUsage(ctx, prefix+"{fp}:gate:prop_1a2b3c4d:rates", 0).Result()
	if err != nil {
		testenv.Unavailable(t, "Redis MEMORY USAGE unavailable (Redis 4.0 or later at REDIS_URL)", err)
	}
	per := float64(bytes) / float64(len(nights))
	t.Logf("gate: %d nights in %d B, %.1f B per night (cell x family)", len(nights), bytes, per)
	if per > 120 {
		t.Errorf("%.1f B per night, want <= 120", per)
	}
}
