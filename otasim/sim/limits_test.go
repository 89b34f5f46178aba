package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paritysync/paritysync/models"
)

func TestLimitEnforcedOverSlidingWindow(t *testing.T) { checkSlidingWindow(t, 0) }

// TestLimitEnforcedOverASixSecondWindow: a channel declaring a 6 s window is held
// to the same steps at a tenth of the times, and says so in its headers.
func TestLimitEnforcedOverASixSecondWindow(t *testing.T) { checkSlidingWindow(t, 6*time.Second) }

// checkSlidingWindow runs one limit of 3 through the steps of a 60 s window scaled
// to window (0: the default, 60 s).
func checkSlidingWindow(t *testing.T, window time.Duration) {
	s, clk := newSim(t, func(c *Config) { c.Channels[0].RatePerMinute, c.Channels[0].Window = 3, window })
	w := window
	if w == 0 {
		w = time.Minute
	}
	at := func(secs float64) time.Duration { return time.Duration(secs / 60 * float64(w)) }
	body := ratesBody("p1", 1, "100.00", "2030-04-01", "2030-04-01")
	steps := []struct {
		at        time.Duration
		status    int
		remaining string
		reset     time.Duration // X-RateLimit-Reset, and Retry-After on a 429
	}{
		{0, 200, "2", w},
		{at(10), 200, "1", w},
		{at(20), 200, "0", w},
		{at(30), 429, "0", at(30)},
		{w - time.Millisecond, 429, "0", time.Second}, // rounded up to a whole second
		{w, 200, "0", w},                              // the request at 0 s has left the window
		{w + at(5), 429, "0", at(5)},
		{w + at(10), 200, "0", w},
	}
	for i, st := range steps {
		clk.Set(t0.Add(st.at))
		rec := post(s, fmt.Sprintf("k%d", i), token, body)
		if rec.Code != st.status {
			t.Fatalf("step %d at %s: status %d, want %d", i, st.at, rec.Code, st.status)
		}
		if got := rec.Header().Get(models.HeaderRateLimitRemaining); got != st.remaining {
			t.Errorf("step %d: remaining %s, want %s", i, got, st.remaining)
		}
		if got := rec.Header().Get(models.HeaderRateLimitLimit); got != "3" {
			t.Errorf("step %d: limit %s, want 3", i, got)
		}
		secs := fmt.Sprint(ceilSeconds(st.reset))
		if got := rec.Header().Get(models.HeaderRateLimitReset); st.status == 200 && got != secs {
			t.Errorf("step %d: reset %s, want %s", i, got, secs)
		}
		if got := rec.Header().Get(models.HeaderRetryAfter); st.status == 429 && i == 3 && got != secs {
			t.Errorf("step %d: Retry-After %s, want %s", i, got, secs)
		}
	}
	stats := s.Stats()["ota"]
	if stats.Accepted != 5 || stats.Throttled != 3 || stats.Requests != 8 {
		t.Errorf("stats %+v", stats)
	}
	// Arrivals in (10 s, 70 s] (scaled): 20, 30, 59.999, 60, 65, 70 — six against a limit of 3.
	if stats.MaxWindowRequests != 6 {
		t.Errorf("max window requests %d, want 6", stats.MaxWindowRequests)
	}
}

func TestRetryAfterAlternatesDeltaSecondsAndHTTPDate(t *testing.T) {
	s, clk := newSim(t, func(c *Config) { c.Channels[0].RatePerMinute = 1 })
	body := ratesBody("p1", 1, "100.00", "2030-04-01", "2030-04-01")
	wantStatus(t, post(s, "a", token, body), 200)

	clk.Set(t0.Add(20*time.Second + 300*time.Millisecond))
	first := post(s, "b", token, body)
	wantStatus(t, first, 429)
	// 39.7 s until the slot frees, rounded up.
	if got := first.Header().Get("Retry-After"); got != "40" {
		t.Errorf("first Retry-After %q, want delta-seconds 40", got)
	}
	second := post(s, "c", token, body)
	wantStatus(t, second, 429)
	at, err := http.ParseTime(second.Header().Get("Retry-After"))
	if err != nil {
		t.Fatalf("second Retry-After %q is not an HTTP-date: %v", second.Header().Get("Retry-After"), err)
	}
	if want := t0.Add(61 * time.Second); !at.Equal(want) {
		t.Errorf("HTTP-date %s, want %s (never before the slot frees)", at, want)
	}
	if got := second.Header().Get("Retry-After"); got != "Sun, 10 Mar 2030 12:01:01 GMT" {
		t.Errorf("not IMF-fixdate: %q", got)
	}
	if third := post(s, "d", token, body); third.Header().Get("Retry-After") != "40" {
		t.Errorf("third Retry-After %q, want delta-seconds again", third.Header().Get("Retry-After"))
	}
}

// TestClockOffsetDatesAnswersAndCountsEarlyCalls: a channel 5 s behind its clients
// stamps Date and Retry-After dates on its own clock, and counts a call before the
// time it announced as early.
func TestClockOffsetDatesAnswersAndCountsEarlyCalls(t *testing.T) {
	s, clk := newSim(t, func(c *Config) {
		c.Channels[0].RatePerMinute, c.ClockOffset, c.RetryAfter = 1, -5*time.Second, RetryAfterDate
	})
	body := ratesBody("p1", 1, "100.00", "2030-04-01", "2030-04-01")
	first := post(s, "a", token, body)
	wantStatus(t, first, 200)
	if got, want := first.Header().Get("Date"), t0.Add(-5*time.Second).Format(http.TimeFormat); got != want {
		t.Errorf("Date %q, want the channel's clock %q", got, want)
	}
	clk.Set(t0.Add(20 * time.Second))
	for i, key := range []string{"b", "c"} {
		rec := post(s, key, token, body)
		wantStatus(t, rec, 429)
		// The slot frees at the channel's t0-5s+60s, whichever form it is given in.
		if got, want := rec.Header().Get("Retry-After"), t0.Add(55*time.Second).Format(http.TimeFormat); got != want {
			t.Errorf("Retry-After %q, want the date %q", got, want)
		}
		if st := s.Stats()["ota"]; st.EarlyArrivals != i {
			t.Errorf("after %d calls inside the wait, %d early; want %d", i, st.EarlyArrivals, i)
		}
	}
	clk.Set(t0.Add(60 * time.Second)) // the channel's t0+55s
	wantStatus(t, post(s, "d", token, body), 200)
	if st := s.Stats()["ota"]; st.EarlyArrivals != 1 {
		t.Errorf("a call at the announced time counted early: %d", st.EarlyArrivals)
	}
	if err := (Config{RetryAfter: "sometimes"}).Validate(); err == nil || !strings.Contains(err.Error(), "retry_after") {
		t.Errorf("unknown retry_after: %v", err)
	}
}

func TestLimitPerPropertyScope(t *testing.T) {
	s, _ := newSim(t, func(c *Config) {
		c.Channels[0].RatePerMinute = 1
		c.Channels[0].Scope = models.ScopeProperty
	})
	wantStatus(t, post(s, "a", token, ratesBody("p1", 1, "1.00", "2030-04-01", "2030-04-01")), 200)
	wantStatus(t, post(s, "b", token, ratesBody("p2", 1, "1.00", "2030-04-01", "2030-04-01")), 200)
	wantStatus(t, post(s, "c", token, ratesBody("p1", 2, "1.00", "2030-04-01", "2030-04-01")), 429)
}

func TestDailyQuotaExhausted(t *testing.T) {
	s, clk := newSim(t, func(c *Config) {
		c.Channels[0].DailyQuota = 3
		c.Channels[0].QuotaUnit = models.QuotaLines
	})
	two := `{"property_id":"p1","family":"availability","lines":[` +
		`{"room_type_code":"A","rate_plan_code":"B","from":"2030-04-01","to":"2030-04-01","inventory":1,"version":1},` +
		`{"room_type_code":"A","rate_plan_code":"B","from":"2030-04-02","to":"2030-04-02","inventory":1,"version":1}]}`
	wantStatus(t, post(s, "a", token, two), 200)
	rec := post(s, "b", token, two) // 2 + 2 > 3
	wantStatus(t, rec, 400)
	var e models.ARIError
	_ = json.Unmarshal(rec.Body.Bytes(), &e)
	if e.Error != models.ErrorQuotaExhausted {
		t.Fatalf("error %q, want quota_exhausted", e.Error)
	}
	clk.Set(time.Date(2030, 3, 11, 0, 0, 0, 0, time.UTC)) // UTC midnight resets
	wantStatus(t, post(s, "b", token, two), 200)
	if st := s.Stats()["ota"]; st.QuotaExhausted != 1 || st.DailyUsed != 2 {
		t.Errorf("stats %+v", st)
	}
}

func TestConcurrentPushesRespectTheLimit(t *testing.T) {
	s, _ := newSim(t, func(c *Config) { c.Channels[0].RatePerMinute = 10 })
	var wg sync.WaitGroup
	codes := make(chan int, 50)
	for i := range 50 {
		wg.Go(func() {
			codes <- post(s, fmt.Sprint(i), token, ratesBody("p1", int64(i+1), "1.00", "2030-04-01", "2030-04-01")).Code
		})
	}
	wg.Wait()
	close(codes)
	ok := 0
	for c := range codes {
		if c == 200 {
			ok++
		}
	}
	if ok != 10 {
		t.Errorf("%d accepted in one window, want 10", ok)
	}
}

// Reads share the push window: a read past the limit is a 429 with Retry-After, and
// pushes after reads that filled the window are refused too.
func TestStateReadsCountInTheWindow(t *testing.T) {
	s, clk := newSim(t, func(c *Config) { c.Channels[0].RatePerMinute = 3 })
	getState(t, s, "p1", "2030-03-11", "2030-03-12")
	getState(t, s, "p1", "2030-03-11", "2030-03-12")
	wantStatus(t, post(s, "k1", token, ratesBody("p1", 1, "80.00", "2030-03-11", "2030-03-11")), http.StatusOK)
	req := httptest.NewRequest(http.MethodGet, "/ota/ari?property_id=p1&from=2030-03-11&to=2030-03-12", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	wantStatus(t, rec, http.StatusTooManyRequests)
	if rec.Header().Get(models.HeaderRetryAfter) == "" {
		t.Error("a throttled read carries no Retry-After")
	}
	wantStatus(t, post(s, "k2", token, ratesBody("p1", 2, "81.00", "2030-03-11", "2030-03-11")), http.StatusTooManyRequests)
	st := s.Stats()["ota"]
	if st.Reads != 2 || st.Throttled != 2 || st.MaxWindowRequests != 5 {
		t.Errorf("stats %+v: want 2 reads, 2 throttled, 5 arrivals in the window", st)
	}
	clk.Add(61 * time.Second)
	getState(t, s, "p1", "2030-03-11", "2030-03-12")
}
