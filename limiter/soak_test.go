package limiter

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/paritysync/paritysync/models"
)

// TestSoak measures admitted against budget over a long run; it runs only when
// LIMITER_SOAK holds a duration, e.g. LIMITER_SOAK=60s go test -run TestSoak -v ./limiter
func TestSoak(t *testing.T) {
	env := os.Getenv("LIMITER_SOAK")
	if env == "" {
		t.Skip("set LIMITER_SOAK=60s to run the soak measurement")
	}
	dur, err := time.ParseDuration(env)
	if err != nil {
		t.Fatalf("LIMITER_SOAK=%q: %v", env, err)
	}
	const perMinute, burst = 600, 10
	for _, callers := range []int{8, 64} {
		t.Run(fmt.Sprintf("callers=%d", callers), func(t *testing.T) {
			rdb, prefix := testRedis(t)
			ch := testChannel(t, "soak", perMinute, burst, 1<<40)
			l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix})
			// Mixed priorities, as in production: urgent callers may use the reserve.
			admitted := hammer(t, l, callers, dur, func(i int) Request { return req("soak", i%5+1) })
			budget := perMinute*dur.Minutes() + burst
			t.Logf("callers=%d duration=%s admitted=%d budget=%.0f (rate×duration+burst) ratio=%.4f",
				callers, dur, admitted, budget, float64(admitted)/budget)
			if float64(admitted) > budget {
				t.Errorf("admitted %d above budget %.0f", admitted, budget)
			}
			if float64(admitted) < 0.99*budget {
				t.Errorf("admitted %d below 99%% of budget %.0f", admitted, budget)
			}
		})
	}
}
