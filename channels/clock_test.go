package channels_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/paritysync/paritysync/channels"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sim"
)

// TestRetryAfterDatesAreReadOnTheChannelsClock: a channel whose clock is 5 s behind
// or ahead of ours answers a 3 s storm with date-only Retry-After. Waiting out each
// wait the client reads, no call reaches the channel before the announced time, and
// the skew is not added to the wait: the second call commits.
func TestRetryAfterDatesAreReadOnTheChannelsClock(t *testing.T) {
	const storm = 3 * time.Second
	for _, pc := range protocolCases() {
		for _, offset := range []time.Duration{-5 * time.Second, 5 * time.Second} {
			t.Run(fmt.Sprintf("%s/clock %+ds", pc.name, int(offset.Seconds())), func(t *testing.T) {
				t.Parallel() // real time: the cases wait side by side
				h := newProtoHarness(t, pc.cfg(), pc.simCfg, func(c *sim.Config) {
					c.Now, c.ClockOffset, c.RetryAfter = time.Now, offset, sim.RetryAfterDate
					// 503 carries Retry-After on every protocol (Channex's 429 has none).
					c.Faults.StormSeconds, c.Faults.StormStatus = int(storm/time.Second), http.StatusServiceUnavailable
				}, pc.secret)
				start := time.Now()
				calls := 0
				for {
					resp := h.push(t, pc.req)
					calls++
					if resp.Class == channels.ClassCommitted {
						break
					}
					if resp.Class != channels.ClassThrottled || !resp.ServerWait || calls > 3 {
						t.Fatalf("call %d: %s %d (%s) wait %s; %d calls before the announced time", calls, resp.Class, resp.Status, resp.Message, resp.RetryAfter, h.stats().EarlyArrivals)
					}
					time.Sleep(resp.RetryAfter)
				}
				elapsed := time.Since(start)
				st := h.stats()
				t.Logf("clock %s: %d calls, committed after %s, %d early", offset, calls, elapsed.Round(time.Millisecond), st.EarlyArrivals)
				if st.EarlyArrivals != 0 || calls != 2 {
					t.Errorf("%d calls before the announced time, %d calls in all; want 0 and 2", st.EarlyArrivals, calls)
				}
				// The date is rounded up to a whole second and the Date header down:
				// at most 2 s beyond the storm, never the 5 s skew.
				if elapsed > storm+2500*time.Millisecond {
					t.Errorf("committed after %s for a %s storm: the skew was waited", elapsed, storm)
				}
			})
		}
	}
}

// TestAnnouncedTimesAreMeasuredFromTheAnswersDate: Retry-After in each HTTP-date form
// and an X-RateLimit-Reset given as a unix time are measured from the answer's Date
// header, over real HTTP, whatever the skew; without a Date, from our clock.
func TestAnnouncedTimesAreMeasuredFromTheAnswersDate(t *testing.T) {
	forms := map[string]string{
		"IMF-fixdate": http.TimeFormat,
		"RFC 850":     time.RFC850,
		"asctime":     time.ANSIC,
	}
	for name, layout := range forms {
		for _, offset := range []time.Duration{-5 * time.Second, 0, 5 * time.Second} {
			for _, dated := range []bool{true, false} {
				if !dated && offset != 0 {
					continue // without Date a skew cannot be seen
				}
				t.Run(fmt.Sprintf("%s/clock %+ds/Date %v", name, int(offset.Seconds()), dated), func(t *testing.T) {
					srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						now := time.Now().Add(offset).UTC().Truncate(time.Second)
						if dated {
							w.Header().Set("Date", now.Format(http.TimeFormat))
						} else {
							w.Header()["Date"] = nil // net/http would add its own
						}
						at := now.Add(20 * time.Second)
						if layout == time.RFC850 {
							// RFC 850 dates name the zone GMT.
							w.Header().Set("Retry-After", at.Format("Monday, 02-Jan-06 15:04:05 GMT"))
						} else {
							w.Header().Set("Retry-After", at.Format(layout))
						}
						w.Header().Set(models.HeaderRateLimitLimit, "60")
						w.Header().Set(models.HeaderRateLimitRemaining, "0")
						w.Header().Set(models.HeaderRateLimitReset, strconv.FormatInt(now.Add(30*time.Second).Unix(), 10))
						w.WriteHeader(http.StatusTooManyRequests)
					}))
					t.Cleanup(srv.Close)
					cfg := genericConfig()
					c := channels.New(srv.Client(), srv.URL, channels.Credentials{cfg.Slug: channels.StaticCredential("k")},
						[]models.ChannelConfig{cfg}, 5*time.Second)
					req := rates(propA, 1, "100", "EUR", "2030-04-10", "2030-04-10")
					req.Channel = cfg.Slug
					resp, err := c.Push(context.Background(), req)
					if err != nil {
						t.Fatal(err)
					}
					// With Date the waits are exact; from our clock they lose the
					// time since the server's whole second.
					lo := time.Duration(0)
					if !dated {
						lo = -time.Second
					}
					if !resp.ServerWait || resp.RetryAfter < 20*time.Second+lo || resp.RetryAfter > 20*time.Second {
						t.Errorf("Retry-After wait %s (%v), want 20 s", resp.RetryAfter, resp.ServerWait)
					}
					if !resp.HasRateLimit || resp.RateLimit.Reset < 30*time.Second+lo || resp.RateLimit.Reset > 30*time.Second {
						t.Errorf("rate-limit reset %s, want 30 s", resp.RateLimit.Reset)
					}
				})
			}
		}
	}
}
