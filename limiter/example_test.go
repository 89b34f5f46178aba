package limiter_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
)

func Example() {
	url := os.Getenv("REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		fmt.Println(err)
		return
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx := context.Background()

	channels := models.DefaultChannels()
	prefix := fmt.Sprintf("limiterexample:%d:", time.Now().UnixNano())
	defer func() {
		iter := rdb.Scan(ctx, 0, prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
	}()
	l := limiter.New(rdb, channels, limiter.Options{Prefix: prefix})

	// The first request finds the window empty and goes now; its slot is spent.
	first := limiter.Request{Channel: "booking_com", Family: models.FamilyRates,
		Property: "prop_0000abcd", Priority: models.PriorityDefault, Cost: 1, ID: "batch/b1/booking_com/p3/0/0"}
	d, err := l.Reserve(ctx, first)
	if err != nil {
		// Fail closed: no decision, no call to the channel.
		fmt.Println(err)
		return
	}
	fmt.Printf("state=%s tier=%s used=%d\n", d.State, d.Tier, d.DailyUsed)
	// The caller sends, then ends the lease on the request's nights.
	_ = l.Release(ctx, first)

	// After a 429 with Retry-After: 30, every worker waits.
	_ = l.Backoff(ctx, "booking_com", 30*time.Second)
	d, _ = l.Reserve(ctx, limiter.Request{Channel: "booking_com", Family: models.FamilyRates,
		Property: "prop_0000abcd", Priority: models.PriorityUrgent, Cost: 1, ID: "batch/b1/booking_com/p1/0/0"})
	fmt.Printf("state=%s wait≈%s\n", d.State, d.Wait.Round(time.Second))
	// Output:
	// state=send tier=ok used=1
	// state=backoff wait≈30s
}
