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

	d, err := l.Acquire(ctx, limiter.Request{
		Channel: "booking_com", Family: models.FamilyRates, Priority: models.PriorityDefault, Cost: 1,
	})
	if err != nil {
		// Fail closed: no decision, no call to the channel.
		fmt.Println(err)
		return
	}
	fmt.Printf("allowed=%v tier=%s used=%d\n", d.Allowed, d.Tier, d.DailyUsed)

	// After a 429 with Retry-After: 30, every worker waits.
	_ = l.Backoff(ctx, "booking_com", 30*time.Second)
	d, _ = l.Acquire(ctx, limiter.Request{
		Channel: "booking_com", Family: models.FamilyRates, Priority: models.PriorityUrgent, Cost: 1,
	})
	fmt.Printf("allowed=%v wait≈%s\n", d.Allowed, d.RetryAfter.Round(time.Second))
	// Output:
	// allowed=true tier=ok used=1
	// allowed=false wait≈30s
}
