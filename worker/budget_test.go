package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
)

// TestWorkerRefusesToSplitAChannelsBudget: a second worker on the same Redis and key
// prefix whose channel file gives a channel another rate stops at start, naming the
// channel and the field; one with the same budget starts.
func TestWorkerRefusesToSplitAChannelsBudget(t *testing.T) {
	rdb, prefix := budgetTestRedis(t)
	s := models.Settings{KeyPrefix: prefix}
	first := models.NewChannelConfig("expedia", 60)
	if _, err := newLimiter(rdb, s, []models.ChannelConfig{first}); err != nil {
		t.Fatalf("first worker: %v", err)
	}
	if _, err := newLimiter(rdb, s, []models.ChannelConfig{first}); err != nil {
		t.Fatalf("a worker with the same budget: %v", err)
	}
	other := models.NewChannelConfig("expedia", 40)
	_, err := newLimiter(rdb, s, []models.ChannelConfig{other})
	var se startupError
	if !errors.As(err, &se) || !errors.Is(err, limiter.ErrBudgetMismatch) {
		t.Fatalf("error %v, want a startup error for the budget mismatch", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "expedia") || !strings.Contains(msg, "rate_per_minute") {
		t.Errorf("error %q does not name the channel and the field", msg)
	}
}

// budgetTestRedis connects to REDIS_URL (or the local default) and returns a key
// prefix of the test's own, whose keys are deleted when it ends.
func budgetTestRedis(t *testing.T) (*redis.Client, string) {
	t.Helper()
	url := os.Getenv("REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("Redis at %s: %v", url, err)
	}
	prefix := "paritysync-budget-" + uuid.NewString()[:8] + ":"
	t.Cleanup(func() {
		keys, _ := rdb.Keys(context.Background(), prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
		rdb.Close()
	})
	return rdb, prefix
}
