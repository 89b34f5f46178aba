package limiter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/paritysync/paritysync/models"
)

// testRedis connects to REDIS_URL and returns a client plus a fresh key prefix whose
// keys are deleted when the test ends.
func testRedis(tb testing.TB) (*redis.Client, string) {
	tb.Helper()
	url := os.Getenv("REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		tb.Fatalf("REDIS_URL %q: %v", url, err)
	}
	rdb := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		tb.Skipf("limiter tests need Redis at %s (set REDIS_URL): %v", url, err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "limitertest:" + hex.EncodeToString(b[:]) + ":"
	tb.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			_ = rdb.Del(ctx, keys...).Err()
		}
		_ = rdb.Close()
	})
	return rdb, prefix
}

// testChannel is a channel whose rates bucket refills at exactly perMinute with depth
// burst: FamilyBudget refills at (RatePerMinute−Burst)×share, so the whole share goes
// to rates and the ceiling is perMinute+burst.
func testChannel(tb testing.TB, slug string, perMinute, burst, quota int) models.ChannelConfig {
	tb.Helper()
	c := models.ChannelConfig{
		Slug: slug, BasePath: "/" + slug, RatePerMinute: perMinute + burst, Burst: burst,
		Shares: models.FamilyShares{Rates: 100}, Scope: models.ScopeChannel,
		DailyQuota: quota, QuotaUnit: models.QuotaRequests, HorizonDays: 365,
		MaxLinesPerRequest: 100, MaxRetryAfter: time.Minute,
	}
	gotRate, gotBurst := c.FamilyBudget(models.FamilyRates)
	if gotRate != float64(perMinute) || gotBurst != burst {
		tb.Fatalf("test channel budget = %v/min burst %d, want %d/min burst %d", gotRate, gotBurst, perMinute, burst)
	}
	return c
}

func req(channel string, priority int) Request {
	return Request{Channel: channel, Family: models.FamilyRates, Priority: priority, Cost: 1}
}

func mustAcquire(t *testing.T, l *Limiter, r Request) Decision {
	t.Helper()
	d, err := l.Acquire(context.Background(), r)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	return d
}

// hammer runs callers goroutines that acquire until the deadline, each sleeping the
// RetryAfter it is given, and returns how many were allowed.
func hammer(t *testing.T, l *Limiter, callers int, d time.Duration, mk func(i int) Request) int64 {
	t.Helper()
	var admitted atomic.Int64
	var firstErr atomic.Value
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := mk(i)
			for time.Now().Before(deadline) {
				dec, err := l.Acquire(context.Background(), r)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				if dec.Allowed {
					admitted.Add(1)
					continue
				}
				wait := min(dec.RetryAfter, time.Until(deadline))
				if wait > 0 {
					time.Sleep(wait)
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		t.Fatalf("acquire: %v", err)
	}
	return admitted.Load()
}

func TestBucketCapsThroughput(t *testing.T) {
	rdb, prefix := testRedis(t)
	ch := testChannel(t, "capped", 600, 5, 1_000_000)
	l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix})

	// Priority 1 may use the whole bucket, reserve included, so the budget is exact.
	admitted := hammer(t, l, 8, 3*time.Second, func(int) Request { return req("capped", 1) })

	const budget = 5 + 30 // burst + 3 s at 10/s
	t.Logf("admitted %d of budget %d", admitted, budget)
	if admitted > budget {
		t.Fatalf("admitted %d, above budget %d", admitted, budget)
	}
	if float64(admitted) < 0.95*budget {
		t.Fatalf("admitted %d, below 95%% of budget %d", admitted, budget)
	}
}

func TestPriorityReserve(t *testing.T) {
	t.Run("last reserve token", func(t *testing.T) {
		rdb, prefix := testRedis(t)
		// 6/min: no token refills within the test, so the counts are exact.
		ch := testChannel(t, "reserve", 6, 5, 1_000_000)
		l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix})
		reserve := ch.Reserve(5)
		for i := range 5 - reserve {
			if d := mustAcquire(t, l, req("reserve", 5)); !d.Allowed {
				t.Fatalf("bulk request %d denied with %d tokens above the reserve", i, 5-i)
			}
		}
		if d := mustAcquire(t, l, req("reserve", 3)); d.Allowed {
			t.Fatal("priority 3 took a reserve token")
		} else if d.RetryAfter < 9*time.Second {
			t.Fatalf("priority 3 RetryAfter = %v, want about a token's refill (10 s)", d.RetryAfter)
		}
		if d := mustAcquire(t, l, req("reserve", 1)); !d.Allowed {
			t.Fatal("priority 1 denied while the reserve holds a token")
		}
		if d := mustAcquire(t, l, req("reserve", 1)); d.Allowed {
			t.Fatal("priority 1 allowed from an empty bucket")
		}
	})

	t.Run("urgent through saturation", func(t *testing.T) {
		rdb, prefix := testRedis(t)
		ch := testChannel(t, "busy", 600, 5, 1_000_000)
		l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var bulk atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					d, err := l.Acquire(ctx, req("busy", 5))
					if err != nil {
						return
					}
					if d.Allowed {
						bulk.Add(1)
						continue
					}
					select {
					case <-ctx.Done():
					case <-time.After(d.RetryAfter):
					}
				}
			}()
		}
		time.Sleep(300 * time.Millisecond) // let bulk drain the bucket to the reserve
		urgent := 0
		for range 10 {
			// 250 ms refills 2.5 tokens: bulk takes only what lies above the reserve, so
			// the reserve must be there for every urgent call.
			time.Sleep(250 * time.Millisecond)
			if mustAcquire(t, l, req("busy", 1)).Allowed {
				urgent++
			}
		}
		cancel()
		wg.Wait()
		if bulk.Load() == 0 {
			t.Fatal("bulk callers never got a token: the bucket was not saturated")
		}
		if urgent != 10 {
			t.Fatalf("priority 1 allowed %d of 10 times under bulk saturation", urgent)
		}
	})
}

func TestPauseResume(t *testing.T) {
	rdb, prefix := testRedis(t)
	ch := testChannel(t, "pausable", 600, 5, 1000)
	l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix, PausePoll: 3 * time.Second})
	ctx := context.Background()

	if err := l.Pause(ctx, "pausable", "maintenance window"); err != nil {
		t.Fatal(err)
	}
	d := mustAcquire(t, l, req("pausable", 1))
	if d.Allowed || d.PausedReason != "maintenance window" || d.RetryAfter != 3*time.Second {
		t.Fatalf("paused channel: got %+v, want denied with reason and 3 s poll", d)
	}
	st, err := l.Status(ctx, "pausable")
	if err != nil {
		t.Fatal(err)
	}
	if st.PausedReason != "maintenance window" {
		t.Fatalf("status reason %q", st.PausedReason)
	}
	if ttl := rdb.PTTL(ctx, prefix+"{pausable}:pause").Val(); ttl <= 0 {
		t.Fatalf("pause key TTL %v, want one", ttl)
	}
	if err := l.Resume(ctx, "pausable"); err != nil {
		t.Fatal(err)
	}
	if d := mustAcquire(t, l, req("pausable", 1)); !d.Allowed || d.PausedReason != "" {
		t.Fatalf("resumed channel: got %+v", d)
	}
}

func TestBackoff(t *testing.T) {
	rdb, prefix := testRedis(t)
	ch := testChannel(t, "backoff", 600, 5, 1000)
	l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix})
	ctx := context.Background()

	if err := l.Backoff(ctx, "backoff", 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// A later, shorter Retry-After must not cut the wait.
	if err := l.Backoff(ctx, "backoff", 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	d := mustAcquire(t, l, req("backoff", 1))
	if d.Allowed || d.RetryAfter <= 200*time.Millisecond || d.RetryAfter > 300*time.Millisecond {
		t.Fatalf("during backoff: got %+v, want denied with RetryAfter in (200ms, 300ms]", d)
	}
	time.Sleep(d.RetryAfter)
	if d := mustAcquire(t, l, req("backoff", 1)); !d.Allowed {
		t.Fatalf("after backoff: got %+v, want allowed", d)
	}

	// A longer back-off extends; Resume clears it.
	if err := l.Backoff(ctx, "backoff", 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := l.Backoff(ctx, "backoff", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := mustAcquire(t, l, req("backoff", 1)); d.Allowed || d.RetryAfter < 9*time.Second {
		t.Fatalf("after extending backoff: got %+v, want denied for about 10 s", d)
	}
	st, err := l.Status(ctx, "backoff")
	if err != nil {
		t.Fatal(err)
	}
	if st.PausedFor < 9*time.Second {
		t.Fatalf("status PausedFor = %v", st.PausedFor)
	}
	if err := l.Resume(ctx, "backoff"); err != nil {
		t.Fatal(err)
	}
	if d := mustAcquire(t, l, req("backoff", 1)); !d.Allowed {
		t.Fatalf("after resume: got %+v, want allowed", d)
	}
}

// redisNowMS reads the Redis clock, the limiter's only clock.
func redisNowMS(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMilli()
}

func TestDailyTiers(t *testing.T) {
	rdb, prefix := testRedis(t)
	ch := testChannel(t, "quota", 60000, 100, 20)
	l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix})
	ctx := context.Background()

	// untilMidnight checks a quota denial's RetryAfter against the Redis clock.
	untilMidnight := func(d Decision) {
		t.Helper()
		now := redisNowMS(t, rdb)
		want := (now/86_400_000+1)*86_400_000 - now
		if got := d.RetryAfter.Milliseconds(); got < want-1000 || got > want+1000 {
			t.Fatalf("RetryAfter %v, want time to UTC midnight %v", d.RetryAfter, time.Duration(want)*time.Millisecond)
		}
	}

	wantTier := map[int]Tier{13: TierOK, 14: TierWarn, 16: TierWarn, 17: TierPage, 18: TierPage, 19: TierThrottle, 20: TierStop}
	for used := 1; used <= 20; used++ {
		if used == 18 {
			if d := mustAcquire(t, l, req("quota", 4)); !d.Allowed || d.DailyUsed != 18 {
				t.Fatalf("priority 4 at 17/20: got %+v, want allowed (18/20 is below 95 %%)", d)
			}
			continue
		}
		if used == 19 {
			// Bulk work may not take the day into the throttle tier (18+1 = 95 %).
			d := mustAcquire(t, l, req("quota", 4))
			if d.Allowed || d.Tier != TierThrottle || d.DailyUsed != 18 {
				t.Fatalf("priority 4 at 18/20: got %+v, want denied as throttle", d)
			}
			untilMidnight(d)
		}
		if used == 20 {
			if d := mustAcquire(t, l, req("quota", 4)); d.Allowed || d.DailyUsed != 19 || d.Tier != TierStop {
				t.Fatalf("priority 4 at 19/20 (throttle tier): got %+v, want denied", d)
			}
			// A request that would cross 100 % is denied even for priority 1.
			big := req("quota", 1)
			big.Cost = 2
			if d := mustAcquire(t, l, big); d.Allowed || d.DailyUsed != 19 || d.Tier != TierStop {
				t.Fatalf("cost 2 at 19/20: got %+v, want denied as stop", d)
			}
		}
		d := mustAcquire(t, l, req("quota", 3))
		if !d.Allowed || d.DailyUsed != used || d.DailyLimit != 20 {
			t.Fatalf("request %d: got %+v", used, d)
		}
		if want, ok := wantTier[used]; ok && d.Tier != want {
			t.Fatalf("at %d/20 tier %q, want %q", used, d.Tier, want)
		}
	}
	d := mustAcquire(t, l, req("quota", 1))
	if d.Allowed || d.Tier != TierStop || d.DailyUsed != 20 {
		t.Fatalf("at 20/20: got %+v, want denied with tier stop", d)
	}
	untilMidnight(d)
	if got := rdb.Get(ctx, prefix+"{quota}:daily").Val(); got != "20" {
		t.Fatalf("daily counter %s after denials, want 20", got)
	}

	// The quota resets at midnight because the counter expires exactly then.
	at, err := rdb.PExpireTime(ctx, prefix+"{quota}:daily").Result()
	if err != nil {
		t.Fatal(err)
	}
	now := redisNowMS(t, rdb)
	midnight := (now/86_400_000 + 1) * 86_400_000
	if got := at.Milliseconds(); got != midnight && got != midnight-86_400_000 {
		t.Fatalf("daily counter expires at %d, want next UTC midnight %d", got, midnight)
	}
	pttl := rdb.PTTL(ctx, prefix+"{quota}:daily").Val()
	if diff := time.Duration(midnight-now)*time.Millisecond - pttl; diff < -time.Second || diff > time.Second {
		t.Fatalf("daily counter PTTL %v, want %v", pttl, time.Duration(midnight-now)*time.Millisecond)
	}
	st, err := l.Status(ctx, "quota")
	if err != nil {
		t.Fatal(err)
	}
	if st.DailyUsed != 20 || st.Tier != TierStop || st.QuotaResetsIn <= 0 || st.QuotaResetsIn > 24*time.Hour {
		t.Fatalf("status %+v", st)
	}
}

func TestThrottleHalvesRefill(t *testing.T) {
	rdb, prefix := testRedis(t)
	ch := testChannel(t, "halved", 600, 1, 100)
	l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix})
	ctx := context.Background()

	// waitForToken drains the one-token bucket and returns how long a refill takes.
	waitForToken := func() time.Duration {
		t.Helper()
		if err := rdb.Del(ctx, prefix+"{halved}:bucket:rates").Err(); err != nil {
			t.Fatal(err)
		}
		if d := mustAcquire(t, l, req("halved", 1)); !d.Allowed {
			t.Fatalf("full bucket denied: %+v", d)
		}
		d := mustAcquire(t, l, req("halved", 1))
		if d.Allowed {
			t.Fatal("empty bucket allowed")
		}
		return d.RetryAfter
	}
	normal := waitForToken()
	if normal < 90*time.Millisecond || normal > 100*time.Millisecond {
		t.Fatalf("refill at 600/min takes %v, want ~100ms", normal)
	}
	if err := rdb.Set(ctx, prefix+"{halved}:daily", 95, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if d := mustAcquire(t, l, req("halved", 4)); d.Allowed || d.Tier != TierThrottle || d.RetryAfter < time.Second {
		t.Fatalf("priority 4 in the throttle tier: got %+v, want denied until midnight", d)
	}
	throttled := waitForToken()
	if throttled < 180*time.Millisecond || throttled > 200*time.Millisecond {
		t.Fatalf("refill in the throttle tier takes %v, want ~200ms", throttled)
	}
}

func TestAdaptiveRate(t *testing.T) {
	rdb, prefix := testRedis(t)
	ch := testChannel(t, "adaptive", 600, 1, 1_000_000)
	l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix})
	ctx := context.Background()

	// 10 left in a window resetting in 60 s: 90 % of it is 9/min, one token per 6.67 s.
	if err := l.Adapt(ctx, "adaptive", 100, 10, time.Minute); err != nil {
		t.Fatal(err)
	}
	if d := mustAcquire(t, l, req("adaptive", 1)); !d.Allowed {
		t.Fatalf("full bucket denied: %+v", d)
	}
	d := mustAcquire(t, l, req("adaptive", 1))
	if d.Allowed || d.RetryAfter < 6500*time.Millisecond || d.RetryAfter > 6700*time.Millisecond {
		t.Fatalf("after Adapt: got %+v, want denied for ~6.67 s (9/min)", d)
	}
	st, err := l.Status(ctx, "adaptive")
	if err != nil {
		t.Fatal(err)
	}
	if st.AdaptiveRate < 8.99 || st.AdaptiveRate > 9.01 || st.AdaptiveFor < 59*time.Second || st.AdaptiveFor > time.Minute {
		t.Fatalf("status adaptive %v for %v, want 9/min for ~60 s", st.AdaptiveRate, st.AdaptiveFor)
	}
	if len(st.Families) != 1 || st.Families[0].RatePerMinute < 8.99 || st.Families[0].RatePerMinute > 9.01 {
		t.Fatalf("status families %+v, want rates at 9/min", st.Families)
	}

	// A server report above the configured rate never raises it.
	if err := l.Adapt(ctx, "adaptive", 10000, 10000, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, prefix+"{adaptive}:bucket:rates").Err(); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, l, req("adaptive", 1))
	if d := mustAcquire(t, l, req("adaptive", 1)); d.RetryAfter > 100*time.Millisecond {
		t.Fatalf("generous headers: RetryAfter %v, want at most the configured 100ms", d.RetryAfter)
	}

	// Nothing remaining: the whole channel waits for the server's reset.
	if err := l.Adapt(ctx, "adaptive", 100, 0, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := mustAcquire(t, l, req("adaptive", 1)); d.Allowed || d.RetryAfter < 1500*time.Millisecond || d.RetryAfter > 2*time.Second {
		t.Fatalf("remaining 0: got %+v, want denied until the reset (~2 s)", d)
	}
}

// limiterState is every key of a test prefix with its value, to prove a call wrote nothing.
func limiterState(t *testing.T, rdb *redis.Client, prefix string) map[string]string {
	t.Helper()
	ctx := context.Background()
	state := map[string]string{}
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		switch rdb.Type(ctx, k).Val() {
		case "hash":
			h := rdb.HGetAll(ctx, k).Val()
			state[k] = h["t"] + "@" + h["ts"]
		default:
			state[k] = rdb.Get(ctx, k).Val()
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return state
}

func TestDeniedConsumesNothing(t *testing.T) {
	rdb, prefix := testRedis(t)
	ch := testChannel(t, "stingy", 6, 2, 3)
	l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix})
	ctx := context.Background()

	for range 2 {
		if d := mustAcquire(t, l, req("stingy", 1)); !d.Allowed {
			t.Fatalf("full bucket denied: %+v", d)
		}
	}
	check := func(what string, r Request) {
		t.Helper()
		before := limiterState(t, rdb, prefix)
		if d := mustAcquire(t, l, r); d.Allowed {
			t.Fatalf("%s: allowed, want denied", what)
		}
		after := limiterState(t, rdb, prefix)
		if len(before) != len(after) {
			t.Fatalf("%s: keys %v became %v", what, before, after)
		}
		for k, v := range before {
			if after[k] != v {
				t.Fatalf("%s: %s changed from %q to %q", what, k, v, after[k])
			}
		}
	}
	check("empty bucket", req("stingy", 1))
	big := req("stingy", 1)
	big.Cost = 5
	check("over quota", big)
	if err := l.Backoff(ctx, "stingy", time.Minute); err != nil {
		t.Fatal(err)
	}
	check("backoff", req("stingy", 1))
	if err := l.Pause(ctx, "stingy", "test"); err != nil {
		t.Fatal(err)
	}
	check("pause", req("stingy", 1))
	if used := rdb.Get(ctx, prefix+"{stingy}:daily").Val(); used != "2" {
		t.Fatalf("daily counter %s, want 2", used)
	}
}

func TestEveryKeyHasTTLAndHashTag(t *testing.T) {
	rdb, prefix := testRedis(t)
	ch := testChannel(t, "ttl", 600, 5, 1000)
	prop := ch
	prop.Slug = "perprop"
	prop.Scope = models.ScopeProperty
	l := New(rdb, []models.ChannelConfig{ch, prop}, Options{Prefix: prefix})
	ctx := context.Background()

	mustAcquire(t, l, req("ttl", 1))
	pr := req("perprop", 1)
	pr.Property = "prop_0000abcd"
	mustAcquire(t, l, pr)
	if err := l.Adapt(ctx, "ttl", 100, 50, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Backoff(ctx, "ttl", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Pause(ctx, "ttl", "check"); err != nil {
		t.Fatal(err)
	}
	state := limiterState(t, rdb, prefix)
	// ttl: pause, paused_until, adaptive, daily, bucket; perprop: daily, bucket.
	if len(state) != 7 {
		t.Fatalf("got keys %v, want 7", state)
	}
	for k := range state {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("key %s has no TTL (%v)", k, ttl)
		}
		if !strings.HasPrefix(k, prefix+"{ttl}:") && !strings.HasPrefix(k, prefix+"{perprop}:") {
			t.Errorf("key %s lacks its channel hash tag", k)
		}
	}
}

func TestPropertyScope(t *testing.T) {
	rdb, prefix := testRedis(t)
	ch := testChannel(t, "props", 6, 1, 1000)
	ch.Scope = models.ScopeProperty
	l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix})

	a := req("props", 1)
	a.Property = "prop_0000000a"
	b := req("props", 1)
	b.Property = "prop_0000000b"
	if !mustAcquire(t, l, a).Allowed || !mustAcquire(t, l, b).Allowed {
		t.Fatal("each property's first request should find a full bucket")
	}
	if mustAcquire(t, l, a).Allowed {
		t.Fatal("property a's bucket should be empty")
	}
	if _, err := l.Acquire(context.Background(), req("props", 1)); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("no property on a per-property channel: err %v, want ErrInvalidRequest", err)
	}
}

func TestInvalidRequests(t *testing.T) {
	rdb, prefix := testRedis(t)
	ch := testChannel(t, "known", 600, 5, 1000)
	l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix})
	ctx := context.Background()

	unknown := []struct {
		name string
		call func() error
	}{
		{"acquire", func() error { _, err := l.Acquire(ctx, req("nope", 1)); return err }},
		{"backoff", func() error { return l.Backoff(ctx, "nope", time.Second) }},
		{"adapt", func() error { return l.Adapt(ctx, "nope", 1, 1, time.Second) }},
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
	if _, err := l.Acquire(ctx, noShare); !errors.Is(err, ErrNoBudget) {
		t.Errorf("family without share: err %v, want ErrNoBudget", err)
	}
	for _, r := range []Request{req("known", 0), req("known", 6), {Channel: "known", Family: models.FamilyRates, Priority: 1}} {
		if _, err := l.Acquire(ctx, r); !errors.Is(err, ErrInvalidRequest) {
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
	ch := testChannel(t, "down", 600, 5, 1000)
	l := New(rdb, []models.ChannelConfig{ch}, Options{})

	d, err := l.Acquire(context.Background(), req("down", 1))
	if err == nil || d.Allowed {
		t.Fatalf("Redis down: got %+v, %v; want an error and no token", d, err)
	}
	if !strings.HasPrefix(err.Error(), "acquire down: ") {
		t.Fatalf("error %q lacks its context", err)
	}
}

func BenchmarkAcquire(b *testing.B) {
	rdb, prefix := testRedis(b)
	ch := models.ChannelConfig{
		Slug: "bench", RatePerMinute: 1_000_000_000, Burst: 1_000_000,
		Shares: models.FamilyShares{Rates: 100}, Scope: models.ScopeChannel,
		DailyQuota: 1 << 50, QuotaUnit: models.QuotaRequests,
	}
	l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix})
	r := Request{Channel: "bench", Family: models.FamilyRates, Priority: 3, Cost: 1}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			d, err := l.Acquire(context.Background(), r)
			if err != nil {
				b.Error(err)
				return
			}
			if !d.Allowed {
				b.Errorf("denied with a huge budget: %+v", d)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}
