package limiter

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/paritysync/paritysync/models"
)

// TestSoak measures sends against the declared limit over a long run with callers
// that wait for their held slots, as the workflows do; it runs only when LIMITER_SOAK
// holds a duration, e.g. LIMITER_SOAK=60s go test -run TestSoak -v ./limiter
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
			l := New(rdb, []models.ChannelConfig{testChannel("soak", perMinute, burst, 1<<40)}, Options{Prefix: prefix})
			start := time.Now()
			var mu sync.Mutex
			var sends []time.Duration
			var wg sync.WaitGroup
			for c := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Since(start) < dur {
						// Mixed priorities, as in production.
						r := req("soak", c%5+1)
						for {
							d, err := l.Reserve(context.Background(), r)
							if err != nil {
								t.Error(err)
								return
							}
							if d.State == Send {
								mu.Lock()
								sends = append(sends, time.Since(start))
								mu.Unlock()
								break
							}
							time.Sleep(d.Wait)
						}
					}
				}()
			}
			wg.Wait()
			most := maxInWindow(sends, time.Minute)
			t.Logf("callers=%d duration=%s sends=%d most in any 60 s=%d limit=%d utilisation=%.4f",
				callers, dur, len(sends), most, perMinute, float64(len(sends))/(perMinute*dur.Minutes()))
			if most > perMinute {
				t.Errorf("%d sends in a 60 s window, above the limit %d", most, perMinute)
			}
		})
	}
}
