package limiter

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/paritysync/paritysync/models"
)

// Workers that would compute a different budget for one channel are told so, with
// each field that differs; workers that agree share the one in force.
func TestCheckConfigRefusesADifferentBudget(t *testing.T) {
	rdb, prefix := testRedis(t)
	ctx := context.Background()
	cfg := testChannel("shared", 60, 6, 1000)
	first := New(rdb, []models.ChannelConfig{cfg, testChannel("other", 30, 3, 1000)}, Options{Prefix: prefix})
	if err := first.CheckConfig(ctx); err != nil {
		t.Fatalf("first worker: %v", err)
	}
	same := New(rdb, []models.ChannelConfig{cfg}, Options{Prefix: prefix})
	if err := same.CheckConfig(ctx); err != nil {
		t.Fatalf("a worker with the same budget: %v", err)
	}
	differs := cfg
	differs.RatePerMinute, differs.Window = 40, 6*time.Second
	other := testChannel("other", 30, 3, 1000)
	other.Scope = models.ScopeProperty
	err := New(rdb, []models.ChannelConfig{differs, other}, Options{Prefix: prefix}).CheckConfig(ctx)
	if !errors.Is(err, ErrBudgetMismatch) {
		t.Fatalf("a worker with another rate and window: %v, want ErrBudgetMismatch", err)
	}
	for _, want := range []string{
		"channel shared: rate_per_minute 40 here, 60 in force, window 6s here, 1m0s in force",
		"channel other: scope property here, channel in force",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "burst") {
		t.Errorf("error %q names a field that agrees", err)
	}
	if ttl := rdb.PTTL(ctx, prefix+"{shared}:budget").Val(); ttl <= 0 || ttl > 10*time.Minute {
		t.Errorf("budget TTL %s, want up to 10 min", ttl)
	}
	// Decisions keep the budget alive.
	rdb.PExpire(ctx, prefix+"{shared}:budget", time.Minute)
	mustReserve(t, first, req("shared", 3))
	if ttl := rdb.PTTL(ctx, prefix+"{shared}:budget").Val(); ttl < 9*time.Minute {
		t.Errorf("budget TTL after a decision %s, want renewed to 10 min", ttl)
	}
}
