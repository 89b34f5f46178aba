package limiter

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/paritysync/paritysync/dial/redistest"
	"github.com/paritysync/paritysync/models"
)

// TestRedisMemoryAfterALargeBatch drives 100,000 mutations over a year of nights —
// 46 properties × 3 rooms × 2 rate plans, a price and a version of their own each
// week — coalesced into requests, through Reserve and Settle, waits for the leases
// and reservations to expire, and sums MEMORY USAGE of every key the limiter left:
// it must be within 2 MB of where it started. The channel's window is 2 s so that
// the schedule expires in seconds; the keys and their TTLs are those of a 60 s one.
// It runs only when LIMITER_MEMORY is set:
//
//	LIMITER_MEMORY=1 go test -run TestRedisMemoryAfterALargeBatch -v ./limiter
func TestRedisMemoryAfterALargeBatch(t *testing.T) {
	if os.Getenv("LIMITER_MEMORY") == "" {
		t.Skip("set LIMITER_MEMORY=1 to run the Redis memory measurement")
	}
	rdb, prefix := testRedis(t)
	ctx := context.Background()
	cfg := testChannel("mem", 1_000_000, 500_000, 1<<40)
	cfg.Window = 2 * time.Second
	l := New(rdb, []models.ChannelConfig{cfg}, Options{Prefix: prefix, Lease: time.Second, Margin: 50 * time.Millisecond})

	const n = 100_000
	today := models.DateOf(time.Now().UTC())
	rooms, plans := []string{"DLXKING", "STDQUEEN", "SUITE"}, []string{"BAR_FLEX", "BAR_NR"}
	ms := make([]models.Mutation, 0, n)
	for night := 1; len(ms) < n; night++ {
		for p := 0; p < 46 && len(ms) < n; p++ {
			for ri, r := range rooms {
				for _, plan := range plans {
					if len(ms) == n {
						break
					}
					week := int64(night / 7)
					amount := decimal.New(10000+int64(ri)*5000+week*500, -2)
					m := models.Mutation{ID: fmt.Sprintf("m%06d", len(ms)), PropertyID: fmt.Sprintf("prop_%08x", p),
						RoomTypeCode: r, RatePlanCode: plan, Channel: "mem", StayDate: today.AddDays(night),
						Values: models.Values{Amount: &amount, Currency: "EUR"}, Version: 1_764_500_000_000_000_000 + week}
					m.ApplyDefaults(nil)
					ms = append(ms, m)
				}
			}
		}
	}
	if last := ms[len(ms)-1].StayDate; last.DaysSince(today) > 366 {
		t.Fatalf("the batch reaches %s, beyond a year of nights", last)
	}
	reqs := models.Coalesce(ms, map[string]models.ChannelConfig{"mem": cfg}).Requests

	before, _ := redistest.Memory(t, rdb, prefix)
	start := time.Now()
	ok := true
	lines := 0
	for i, cr := range reqs {
		r := Request{Channel: "mem", Family: cr.Family, Property: cr.PropertyID, Priority: cr.Priority, Cost: 1,
			ID: fmt.Sprintf("%s-%d", cr.IdempotencyKey(), i), Lines: cr.Lines}
		lines += len(cr.Lines)
		for {
			d, err := l.Reserve(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if d.State == Wait {
				time.Sleep(d.Wait)
				continue
			}
			if d.State != Send || len(d.Dropped) != 0 {
				t.Fatalf("request %d: %+v, want send", i, d)
			}
			break
		}
		if _, err := l.Settle(ctx, Settlement{Request: r, Healthy: &ok}); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	peak, peakKinds := redistest.Memory(t, rdb, prefix)

	// Wait for the leases and the schedule to expire: a window, a lease and a second.
	deadline := time.Now().Add(30 * time.Second)
	var after int64
	var afterKinds redistest.Kinds
	for {
		after, afterKinds = redistest.Memory(t, rdb, prefix)
		if afterKinds["sched"]+afterKinds["res"]+afterKinds["lease"] == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	gates, _ := rdb.Keys(ctx, prefix+"{mem}:gate:*").Result()
	t.Logf("%d mutations, %d requests, %d lines in %s; Redis memory under the prefix: before %d B, "+
		"after the last settle %d B (%s), once leases and reservations expired %d B (%s); %d gate keys",
		len(ms), len(reqs), lines, took.Round(time.Millisecond), before, peak, peakKinds, after,
		afterKinds, len(gates))
	if left := afterKinds["sched"] + afterKinds["res"] + afterKinds["lease"]; left > 0 {
		t.Errorf("%d B of schedule, reservations and leases still held 30 s after the batch", left)
	}
	if after-before > 2<<20 {
		t.Errorf("Redis memory grew %d B over the batch, want at most 2 MB", after-before)
	}
}
