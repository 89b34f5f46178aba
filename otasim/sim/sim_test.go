package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/paritysync/paritysync/models"
)

var t0 = time.Date(2030, 3, 10, 12, 0, 0, 0, time.UTC)

const token = "test-token"

// newSim serves one channel "ota" with the given limits on a fake clock.
func newSim(t *testing.T, mod func(*Config)) (*Simulator, *ManualClock) {
	t.Helper()
	clk := NewManualClock(t0)
	cfg := Config{
		Channels: []models.ChannelConfig{{
			Slug: "ota", RatePerMinute: 100, DailyQuota: 1000, MaxLinesPerRequest: 10, HorizonDays: 400,
		}},
		StaticTokens: []string{token},
		Now:          clk.Now,
		Seed:         7,
	}
	if mod != nil {
		mod(&cfg)
	}
	s := New(cfg)
	t.Cleanup(s.Close)
	return s, clk
}

func ratesBody(prop string, version int64, amount string, from, to string) string {
	return fmt.Sprintf(`{"property_id":%q,"family":"rates","lines":[{"room_type_code":"DBL","rate_plan_code":"BAR","from":%q,"to":%q,"amount":%q,"currency":"EUR","version":%d}]}`,
		prop, from, to, amount, version)
}

func post(h http.Handler, key, tok, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/ota/ari", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(models.HeaderIdempotencyKey, key)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func getState(t *testing.T, h http.Handler, prop, from, to string) models.ARIState {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/ota/ari?property_id="+prop+"&from="+from+"&to="+to, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET state: %d %s", rec.Code, rec.Body)
	}
	var st models.ARIState
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func wantStatus(t *testing.T, rec *httptest.ResponseRecorder, status int) {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d: %s", rec.Code, status, rec.Body)
	}
}

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

func TestIdempotentReplayReturnsFirstResponseAndAppliesNothing(t *testing.T) {
	s, clk := newSim(t, nil)
	body := ratesBody("p1", 4, "99.90", "2030-04-01", "2030-04-03")
	first := post(s, "key-1", token, body)
	wantStatus(t, first, 200)
	clk.Add(5 * time.Second)
	second := post(s, "key-1", token, body)
	wantStatus(t, second, 200)
	if first.Body.String() != second.Body.String() {
		t.Errorf("replay body %s, want %s", second.Body, first.Body)
	}
	if a, b := first.Header().Get(models.HeaderConfirmationID), second.Header().Get(models.HeaderConfirmationID); a == "" || a != b {
		t.Errorf("confirmation ids %q and %q", a, b)
	}
	st := s.Stats()["ota"]
	if st.Duplicates != 1 || st.Accepted != 1 || st.NightsApplied != 3 || st.DailyUsed != 1 {
		t.Errorf("stats %+v", st)
	}
	// Same key, different content: a client bug, refused.
	rec := post(s, "key-1", token, ratesBody("p1", 5, "1.00", "2030-04-01", "2030-04-01"))
	wantStatus(t, rec, 400)
	if !strings.Contains(rec.Body.String(), models.HeaderIdempotencyKey) {
		t.Errorf("body %s does not name the header", rec.Body)
	}
	// Past the TTL the key is forgotten and the push applies again.
	clk.Add(DefaultIdempotencyTTL)
	wantStatus(t, post(s, "key-1", token, body), 200)
	if st := s.Stats()["ota"]; st.NightsApplied != 6 {
		t.Errorf("nights applied %d after TTL, want 6", st.NightsApplied)
	}
}

func TestStaleOverwriteCountedAndNotApplied(t *testing.T) {
	s, _ := newSim(t, nil)
	wantStatus(t, post(s, "a", token, ratesBody("p1", 5, "120.00", "2030-04-01", "2030-04-02")), 200)
	// Version 3 over nights that hold version 5 (and one new night).
	wantStatus(t, post(s, "b", token, ratesBody("p1", 3, "80.00", "2030-04-02", "2030-04-03")), 200)
	// Equal versions re-apply: a retry is not stale.
	wantStatus(t, post(s, "c", token, ratesBody("p1", 5, "120.00", "2030-04-01", "2030-04-01")), 200)
	// Another family's version does not make a rates line stale and vice versa.
	wantStatus(t, post(s, "d", token, `{"property_id":"p1","family":"availability","lines":[{"room_type_code":"DBL","rate_plan_code":"BAR","from":"2030-04-01","to":"2030-04-01","inventory":4,"version":2}]}`), 200)

	if got := s.Stats()["ota"].StaleOverwrites; got != 1 {
		t.Fatalf("stale overwrites %d, want 1", got)
	}
	st := getState(t, s, "p1", "2030-04-01", "2030-04-03")
	if len(st.Cells) != 3 {
		t.Fatalf("cells %+v", st.Cells)
	}
	want := []struct {
		amount  string
		version int64
	}{{"120", 5}, {"120", 5}, {"80", 3}}
	for i, w := range want {
		c := st.Cells[i]
		if c.Amount == nil || !c.Amount.Equal(decimal.RequireFromString(w.amount)) || c.Version != w.version {
			t.Errorf("cell %s: amount %v version %d, want %s v%d", c.Date, c.Amount, c.Version, w.amount, w.version)
		}
	}
	if c := st.Cells[0]; c.Inventory == nil || *c.Inventory != 4 || c.Currency != "EUR" {
		t.Errorf("cell 0 lost a family: %+v", c)
	}
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

func TestBearerTokens(t *testing.T) {
	s, _ := newSim(t, func(c *Config) { c.TokenMaxAge = time.Hour })
	body := ratesBody("p1", 1, "1.00", "2030-04-01", "2030-04-01")
	cases := []struct {
		name  string
		token string
		want  int
	}{
		{"static", token, 200},
		{"fresh", IssueToken(t0.Add(-time.Minute)), 200},
		{"at max age", IssueToken(t0.Add(-time.Hour)), 200},
		{"expired", IssueToken(t0.Add(-time.Hour - time.Second)), 401},
		{"issued in the future", IssueToken(t0.Add(5 * time.Minute)), 401},
		{"unknown", "nope", 401},
		{"garbage time", TokenPrefix + "12x", 401},
		{"missing", "", 401},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := post(s, fmt.Sprint(i), c.token, body)
			wantStatus(t, rec, c.want)
			if rec.Header().Get(models.HeaderRateLimitLimit) == "" {
				t.Error("no X-RateLimit-Limit")
			}
		})
	}
	if got := s.Stats()["ota"].AuthFailures; got != 5 {
		t.Errorf("auth failures %d, want 5", got)
	}
}

func TestFaultErrorRatioAnswers5xxWithoutApplying(t *testing.T) {
	s, _ := newSim(t, func(c *Config) { c.Faults = Faults{ErrorRatio: 1} })
	for i := range 20 {
		rec := post(s, fmt.Sprint(i), token, ratesBody("p1", 1, "1.00", "2030-04-01", "2030-04-01"))
		if rec.Code < 500 || rec.Code > 504 || rec.Code == 501 {
			t.Fatalf("status %d, want 500/502/503/504", rec.Code)
		}
		if rec.Header().Get("Retry-After") != "" {
			t.Fatal("injected 5xx carries Retry-After")
		}
	}
	st := s.Stats()["ota"]
	if st.ServerErrors != 20 || st.FaultsInjected != 20 || st.NightsApplied != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestFaultStorm(t *testing.T) {
	for _, status := range []int{0, 503} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			s, clk := newSim(t, nil)
			if err := s.SetFaults(Faults{StormSeconds: 10, StormStatus: status}); err != nil {
				t.Fatal(err)
			}
			want := status
			if want == 0 {
				want = 429
			}
			body := ratesBody("p1", 1, "1.00", "2030-04-01", "2030-04-01")
			clk.Add(2500 * time.Millisecond)
			rec := post(s, "a", token, body)
			wantStatus(t, rec, want)
			if got := rec.Header().Get("Retry-After"); got != "8" {
				t.Errorf("Retry-After %q, want 8 (storm left, rounded up)", got)
			}
			if s.Faults().StormUntil == nil {
				t.Error("GET faults does not show the storm")
			}
			clk.Add(7500 * time.Millisecond)
			wantStatus(t, post(s, "a", token, body), 200)
			if s.Faults().StormUntil != nil {
				t.Error("storm still shown after it ended")
			}
		})
	}
}

func TestFaultPartialFailsLinesAndSkipsThem(t *testing.T) {
	s, _ := newSim(t, func(c *Config) { c.Faults = Faults{PartialRatio: 1} })
	var lines []string
	for d := 1; d <= 6; d++ {
		lines = append(lines, fmt.Sprintf(`{"room_type_code":"A","rate_plan_code":"B","from":"2030-04-0%d","to":"2030-04-0%d","inventory":%d,"version":1}`, d, d, d))
	}
	rec := post(s, "a", token, `{"property_id":"p1","family":"availability","lines":[`+strings.Join(lines, ",")+`]}`)
	wantStatus(t, rec, http.StatusMultiStatus)
	var p models.ARIPartial
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.ConfirmationID == "" || len(p.Results) != 6 {
		t.Fatalf("207 body %s: %v", rec.Body, err)
	}
	failed := map[models.Date]bool{}
	for _, r := range p.Results {
		if r.Status == models.LineError {
			failed[models.Date{Year: 2030, Month: 4, Day: r.Line + 1}] = true
		}
	}
	if len(failed) == 0 {
		t.Fatal("207 without a failed line")
	}
	st := getState(t, s, "p1", "2030-04-01", "2030-04-06")
	if len(st.Cells) != 6-len(failed) {
		t.Errorf("%d cells stored, want %d", len(st.Cells), 6-len(failed))
	}
	for _, c := range st.Cells {
		if failed[c.Date] {
			t.Errorf("failed line %s applied", c.Date)
		}
	}
}

func TestFaultCommitThen500AppliesAndReplays200(t *testing.T) {
	s, _ := newSim(t, func(c *Config) { c.Faults = Faults{CommitThen500Ratio: 1} })
	body := ratesBody("p1", 2, "70.00", "2030-04-01", "2030-04-01")
	wantStatus(t, post(s, "a", token, body), 500)
	if st := getState(t, s, "p1", "2030-04-01", "2030-04-01"); len(st.Cells) != 1 {
		t.Fatalf("commit-then-500 did not apply: %+v", st)
	}
	// The retry under the same key learns the lost answer.
	rec := post(s, "a", token, body)
	wantStatus(t, rec, 200)
	if rec.Header().Get(models.HeaderConfirmationID) == "" {
		t.Error("replay lacks the confirmation id")
	}
	if st := s.Stats()["ota"]; st.NightsApplied != 1 || st.Duplicates != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestFaultDriftAcceptsWithoutApplying(t *testing.T) {
	s, _ := newSim(t, func(c *Config) { c.Faults = Faults{DriftRatio: 1} })
	wantStatus(t, post(s, "a", token, ratesBody("p1", 2, "70.00", "2030-04-01", "2030-04-01")), 200)
	if st := getState(t, s, "p1", "2030-04-01", "2030-04-01"); len(st.Cells) != 0 {
		t.Errorf("drift applied %+v", st.Cells)
	}
	if st := s.Stats()["ota"]; st.FaultsInjected != 1 || st.Accepted != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestFaultBadBodyAnswers200ThatConfirmsNothing(t *testing.T) {
	good := `{"confirmation_id":"ota-000001","accepted":1}`
	for _, tc := range []struct{ kind, ctype, body string }{
		{BadBodyHTML, "text/html; charset=utf-8", proxyPage},
		{BadBodyEmpty, "application/json", ""},
		{BadBodyTruncated, "application/json", good[:(len(good)+1)/2]},
		{BadBodyError, "application/json", `{"error":"invalid","message":"injected error inside a 200"}` + "\n"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			s, _ := newSim(t, func(c *Config) { c.Faults = Faults{BadBodyRatio: 1, BadBody: tc.kind} })
			rec := post(s, "a", token, ratesBody("p1", 2, "70.00", "2030-04-01", "2030-04-01"))
			wantStatus(t, rec, 200)
			if got := rec.Body.String(); got != tc.body || rec.Header().Get("Content-Type") != tc.ctype {
				t.Errorf("body %q (%s), want %q (%s)", got, rec.Header().Get("Content-Type"), tc.body, tc.ctype)
			}
			if st := getState(t, s, "p1", "2030-04-01", "2030-04-01"); len(st.Cells) != 0 {
				t.Errorf("bad body applied %+v", st.Cells)
			}
			// Not remembered: the same key once the fault is gone applies.
			if err := s.SetFaults(Faults{}); err != nil {
				t.Fatal(err)
			}
			wantStatus(t, post(s, "a", token, ratesBody("p1", 2, "70.00", "2030-04-01", "2030-04-01")), 200)
			if st := s.Stats()["ota"]; st.FaultsInjected != 1 || st.Accepted != 1 || st.NightsApplied != 1 || st.Duplicates != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
	if err := (Faults{BadBodyRatio: 1, BadBody: "xml"}).Validate(); err == nil || !strings.Contains(err.Error(), "bad_body") {
		t.Errorf("unknown bad_body: %v", err)
	}
}

func TestFaultLatencyDelaysResponse(t *testing.T) {
	s, _ := newSim(t, func(c *Config) { c.Faults = Faults{LatencyMS: 80} })
	start := time.Now()
	wantStatus(t, post(s, "a", token, ratesBody("p1", 1, "1.00", "2030-04-01", "2030-04-01")), 200)
	if el := time.Since(start); el < 80*time.Millisecond {
		t.Errorf("answered after %s, want >= 80ms", el)
	}
}

func TestFaultHangHoldsUntilClientGivesUp(t *testing.T) {
	s, _ := newSim(t, func(c *Config) { c.Faults = Faults{Hang: true} })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/ota/ari", strings.NewReader("{}"))
	done := make(chan struct{})
	go func() { s.ServeHTTP(httptest.NewRecorder(), req); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("hanging request did not end with its context")
	}
	if st := s.Stats()["ota"]; st.FaultsInjected != 1 || st.Requests != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestFaultsLimitedToChannels(t *testing.T) {
	s, _ := newSim(t, func(c *Config) { c.Faults = Faults{ErrorRatio: 1, Channels: []string{"other"}} })
	wantStatus(t, post(s, "a", token, ratesBody("p1", 1, "1.00", "2030-04-01", "2030-04-01")), 200)
}

func TestAdminFaultsEndpoint(t *testing.T) {
	s, _ := newSim(t, nil)
	do := func(method, body string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(method, "/admin/faults", strings.NewReader(body)))
		return rec
	}
	wantStatus(t, do(http.MethodPost, `{"error_ratio":2}`), 400)
	wantStatus(t, do(http.MethodPost, `{"eror_ratio":0.5}`), 400)
	wantStatus(t, do(http.MethodPost, `{"error_ratio":0.25,"latency_ms":5,"storm_seconds":3}`), 200)
	rec := do(http.MethodGet, "")
	wantStatus(t, rec, 200)
	var f Faults
	if err := json.Unmarshal(rec.Body.Bytes(), &f); err != nil {
		t.Fatal(err)
	}
	if f.ErrorRatio != 0.25 || f.LatencyMS != 5 || f.StormUntil == nil || !f.StormUntil.Equal(t0.Add(3*time.Second)) {
		t.Errorf("faults %+v", f)
	}
	wantStatus(t, do(http.MethodDelete, ""), 405)
}

func TestMalformedBodiesRejectedNamingTheField(t *testing.T) {
	s, _ := newSim(t, func(c *Config) { c.MaxBodyBytes = 2048 })
	line := func(extra string) string {
		return `{"property_id":"p1","family":"rates","lines":[{"room_type_code":"DBL","rate_plan_code":"BAR","from":"2030-04-01","to":"2030-04-02","version":1` + extra + `}]}`
	}
	cases := []struct {
		name   string
		body   string
		status int
		field  string
	}{
		{"bad json", `{"property_id":`, 400, "body"},
		{"not an object", `[1,2]`, 400, "body"},
		{"trailing data", line(`,"amount":"1.00","currency":"EUR"`) + `{}`, 400, "body"},
		{"unknown top field", `{"property_id":"p1","family":"rates","lines":[],"x":1}`, 400, "x: unknown field"},
		{"missing property", `{"family":"rates","lines":[]}`, 400, "property_id: required"},
		{"unknown family", `{"property_id":"p1","family":"prices","lines":[{}]}`, 400, "family: unknown family"},
		{"no lines", `{"property_id":"p1","family":"rates","lines":[]}`, 400, "lines:"},
		{"missing room type", `{"property_id":"p1","family":"availability","lines":[{"rate_plan_code":"B","from":"2030-04-01","to":"2030-04-01","inventory":1,"version":1}]}`, 400, "lines[0].room_type_code: required"},
		{"missing amount", line(`,"currency":"EUR"`), 400, "lines[0].amount: required"},
		{"amount three places", line(`,"amount":"1.005","currency":"EUR"`), 400, "lines[0].amount"},
		{"amount not a number", line(`,"amount":"abc","currency":"EUR"`), 400, "lines[0].amount"},
		{"amount huge exponent", line(`,"amount":"1e-999999999","currency":"EUR"`), 400, "lines[0].amount"},
		{"bad currency", line(`,"amount":"1.00","currency":"eur"`), 400, "lines[0].currency"},
		{"bad date", `{"property_id":"p1","family":"rates","lines":[{"room_type_code":"DBL","rate_plan_code":"BAR","from":"2030-02-30","to":"2030-04-02","amount":"1.00","currency":"EUR","version":1}]}`, 400, "lines[0].from"},
		{"to before from", `{"property_id":"p1","family":"rates","lines":[{"room_type_code":"DBL","rate_plan_code":"BAR","from":"2030-04-03","to":"2030-04-02","amount":"1.00","currency":"EUR","version":1}]}`, 400, "lines[0].to"},
		{"version as string", `{"property_id":"p1","family":"rates","lines":[{"room_type_code":"DBL","rate_plan_code":"BAR","from":"2030-04-01","to":"2030-04-02","amount":"1.00","currency":"EUR","version":"1"}]}`, 400, "lines[0].version"},
		{"version zero", `{"property_id":"p1","family":"rates","lines":[{"room_type_code":"DBL","rate_plan_code":"BAR","from":"2030-04-01","to":"2030-04-02","amount":"1.00","currency":"EUR","version":0}]}`, 400, "lines[0].version"},
		{"wrong family field", line(`,"amount":"1.00","currency":"EUR","inventory":3`), 400, "lines[0]: availability"},
		{"inventory out of range", `{"property_id":"p1","family":"availability","lines":[{"room_type_code":"A","rate_plan_code":"B","from":"2030-04-01","to":"2030-04-01","inventory":1000,"version":1}]}`, 400, "lines[0].inventory"},
		{"min above max los", `{"property_id":"p1","family":"restrictions","lines":[{"room_type_code":"A","rate_plan_code":"B","from":"2030-04-01","to":"2030-04-01","min_los":5,"max_los":2,"version":1}]}`, 400, "lines[0].max_los"},
		{"no restriction", `{"property_id":"p1","family":"restrictions","lines":[{"room_type_code":"A","rate_plan_code":"B","from":"2030-04-01","to":"2030-04-01","version":1}]}`, 400, "no restriction set"},
		{"too many lines", `{"property_id":"p1","family":"rates","lines":[` + strings.Repeat(`{},`, 10) + `{}]}`, 400, "lines: 11 lines"},
		{"span over horizon", `{"property_id":"p1","family":"rates","lines":[{"room_type_code":"DBL","rate_plan_code":"BAR","from":"2030-01-01","to":"2031-12-31","amount":"1.00","currency":"EUR","version":1}]}`, 400, "lines[0].to"},
		{"oversized body", `{"property_id":"` + strings.Repeat("x", 4096) + `"}`, 413, "body: larger than 2048 bytes"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := post(s, fmt.Sprint("k", i), token, c.body)
			wantStatus(t, rec, c.status)
			var e models.ARIError
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error != models.ErrorInvalid {
				t.Fatalf("body %s", rec.Body)
			}
			if !strings.Contains(e.Message, c.field) {
				t.Errorf("message %q does not name %q", e.Message, c.field)
			}
		})
	}
	if st := s.Stats()["ota"]; st.Invalid != len(cases) || st.DailyUsed != 0 || st.NightsApplied != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestRequestHeadersRequired(t *testing.T) {
	s, _ := newSim(t, nil)
	body := ratesBody("p1", 1, "1.00", "2030-04-01", "2030-04-01")
	wantStatus(t, post(s, "", token, body), 400)
	req := httptest.NewRequest(http.MethodPost, "/ota/ari", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(models.HeaderIdempotencyKey, "k")
	req.Header.Set("Content-Type", "text/plain")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	wantStatus(t, rec, http.StatusUnsupportedMediaType)
}

func TestGetStateValidatesAndSorts(t *testing.T) {
	s, _ := newSim(t, nil)
	wantStatus(t, post(s, "a", token, `{"property_id":"p1","family":"availability","lines":[`+
		`{"room_type_code":"SGL","rate_plan_code":"BAR","from":"2030-04-02","to":"2030-04-03","inventory":2,"version":7},`+
		`{"room_type_code":"DBL","rate_plan_code":"BAR","from":"2030-04-01","to":"2030-04-02","inventory":1,"version":7}]}`), 200)
	st := getState(t, s, "p1", "2030-04-02", "2030-04-03")
	var got []string
	for _, c := range st.Cells {
		got = append(got, c.RoomTypeCode+"/"+c.Date.String())
	}
	if want := "DBL/2030-04-02 SGL/2030-04-02 SGL/2030-04-03"; strings.Join(got, " ") != want {
		t.Errorf("cells %v, want %s", got, want)
	}
	if st.PropertyID != "p1" || st.Cells[0].Version != 7 {
		t.Errorf("state %+v", st)
	}
	for _, q := range []string{"from=2030-04-01&to=2030-04-02", "property_id=p1&from=x&to=2030-04-02",
		"property_id=p1&from=2030-04-03&to=2030-04-02", "property_id=p1&from=2030-01-01&to=2033-01-01"} {
		req := httptest.NewRequest(http.MethodGet, "/ota/ari?"+q, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		wantStatus(t, rec, 400)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ota/ari?property_id=p1&from=2030-04-01&to=2030-04-02", nil))
	wantStatus(t, rec, 401)
}

func TestStatsEndpoint(t *testing.T) {
	s, _ := newSim(t, nil)
	wantStatus(t, post(s, "a", token, ratesBody("p1", 1, "1.00", "2030-04-01", "2030-04-01")), 200)
	wantStatus(t, post(s, "a", token, ratesBody("p1", 1, "1.00", "2030-04-01", "2030-04-01")), 200)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/stats", nil))
	wantStatus(t, rec, 200)
	var got map[string]ChannelStats
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := ChannelStats{Limit: 100, Requests: 2, Accepted: 1, Duplicates: 1, NightsApplied: 1,
		MaxWindowRequests: 2, DailyUsed: 1, DailyQuota: 1000}
	if got["ota"] != want {
		t.Errorf("stats %+v, want %+v", got["ota"], want)
	}
}

func TestUnknownPathAndMethod(t *testing.T) {
	s, _ := newSim(t, nil)
	for _, c := range []struct{ method, path string }{{"POST", "/nope/ari"}, {"GET", "/ota"}, {"GET", "/"}} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
		wantStatus(t, rec, 404)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/ota/ari", nil))
	wantStatus(t, rec, 405)
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

func FuzzHandler(f *testing.F) {
	f.Add("POST", "/ota/ari", "application/json", "k", ratesBody("p1", 1, "1.00", "2030-04-01", "2030-04-02"))
	f.Add("POST", "/ota/ari", "application/json", "k", `{"property_id":"p","family":"restrictions","lines":[{"room_type_code":"A","rate_plan_code":"B","from":"2030-04-01","to":"2030-04-01","min_los":1,"version":1}]}`)
	f.Add("POST", "/ota/ari", "application/json", "k", `{"lines":[{"amount":1e400}]}`)
	f.Add("GET", "/ota/ari?property_id=p&from=2030-01-01&to=2030-01-02", "", "", "")
	f.Add("POST", "/admin/faults", "", "", `{"partial_ratio":0.5}`)
	f.Fuzz(func(t *testing.T, method, path, ctype, key, body string) {
		s, _ := newSim(t, func(c *Config) { c.MaxBodyBytes = 4096 })
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		req, err := http.NewRequest(method, "http://sim"+path, strings.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Content-Type", ctype)
		req.Header.Set(models.HeaderIdempotencyKey, key)
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code < 200 || rec.Code > 599 {
			t.Fatalf("status %d", rec.Code)
		}
		if rec.Code >= 400 && !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("error body is not JSON: %q", rec.Body)
		}
	})
}

func TestStaleReceivedCountsOlderVersionsWhetherAppliedOrNot(t *testing.T) {
	s, clk := newSim(t, func(c *Config) {
		c.Faults = Faults{DriftRatio: 1} // accept without applying: received, not applied
	})
	wantStatus(t, post(s, "a", token, ratesBody("p1", 5, "120.00", "2030-04-01", "2030-04-02")), 200)
	// Equal version again: a retry, not stale.
	wantStatus(t, post(s, "b", token, ratesBody("p1", 5, "120.00", "2030-04-02", "2030-04-02")), 200)
	// Another property's older version is not stale for p1.
	wantStatus(t, post(s, "c", token, ratesBody("p2", 1, "80.00", "2030-04-01", "2030-04-01")), 200)
	if got := s.Stats()["ota"]; got.StaleReceived != 0 || got.StaleOverwrites != 0 {
		t.Fatalf("after equal versions: stale_received %d stale_overwrites %d, want 0 0", got.StaleReceived, got.StaleOverwrites)
	}
	clk.Add(time.Second)
	// Version 4 over a night that received 5 (never applied, because of the drift fault).
	wantStatus(t, post(s, "d", token, ratesBody("p1", 4, "90.00", "2030-04-02", "2030-04-03")), 200)
	if got := s.Stats()["ota"].StaleReceived; got != 1 {
		t.Fatalf("stale_received %d, want 1", got)
	}

	log := s.Requests("ota", t0.Add(time.Second))
	if len(log) != 1 {
		t.Fatalf("requests since t0+1s: %+v", log)
	}
	if r := log[0]; r.Property != "p1" || r.Family != models.FamilyRates || r.Lines != 1 || r.Nights != 2 || r.Status != 200 {
		t.Errorf("request record %+v", r)
	}
}

func TestRequestLogEndpointIsBoundedAndFilters(t *testing.T) {
	s, _ := newSim(t, func(c *Config) { c.MaxLogRecords = 3 })
	for i := range 5 {
		wantStatus(t, post(s, strconv.Itoa(i), token, ratesBody("p1", int64(i+1), "100.00", "2030-04-01", "2030-04-01")), 200)
	}
	wantStatus(t, post(s, "", token, ratesBody("p1", 9, "100.00", "2030-04-01", "2030-04-01")), 400)
	req := httptest.NewRequest(http.MethodGet, "/requests?channel=ota&since="+t0.Format(time.RFC3339), nil)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	wantStatus(t, rec, 200)
	var got []RequestRecord
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[2].Status != 400 || got[0].Status != 200 {
		t.Fatalf("log %+v, want the newest 3 ending with the 400", got)
	}
	bad := httptest.NewRecorder()
	s.ServeHTTP(bad, httptest.NewRequest(http.MethodGet, "/requests?since=yesterday", nil))
	wantStatus(t, bad, 400)
	if !strings.Contains(bad.Body.String(), "since") {
		t.Errorf("error does not name the parameter: %s", bad.Body)
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

// A delayed apply answers only once applied, so a client with a shorter timeout
// gives up first; the push is applied all the same, last-writer-wins: a newer
// version applied meanwhile is overwritten, and counted.
func TestFaultApplyDelayAppliesAfterTheClientGaveUp(t *testing.T) {
	s := New(Config{
		Channels: []models.ChannelConfig{{
			Slug: "ota", BasePath: "/ota", RatePerMinute: 100, DailyQuota: 1000, MaxLinesPerRequest: 10, HorizonDays: 400,
		}},
		StaticTokens: []string{token}, Seed: 7, Faults: Faults{ApplyDelayMS: 300},
	})
	srv := httptest.NewServer(s)
	t.Cleanup(func() { s.Close(); srv.Close() })
	night := models.DateOf(time.Now().UTC()).AddDays(5).String()
	send := func(key string, version int64, amount string, timeout time.Duration) error {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/ota/ari", strings.NewReader(ratesBody("p1", version, amount, night, night)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(models.HeaderIdempotencyKey, key)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := (&http.Client{Timeout: timeout}).Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := send("v1", 1, "100.00", 50*time.Millisecond); err == nil {
		t.Fatal("v1 answered before the apply delay, want the client to time out")
	}
	if st := getState(t, s, "p1", night, night); len(st.Cells) != 0 {
		t.Fatalf("v1 applied before its delay: %+v", st.Cells)
	}
	if err := s.SetFaults(Faults{}); err != nil {
		t.Fatal(err)
	}
	if err := send("v2", 2, "200.00", time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	st := getState(t, s, "p1", night, night)
	if len(st.Cells) != 1 || st.Cells[0].Version != 1 {
		t.Fatalf("cells %+v, want v1 written last (last writer wins)", st.Cells)
	}
	if got := s.Stats()["ota"].OlderApplied; got != 1 {
		t.Errorf("older applied %d, want 1", got)
	}
	log := s.Applied("ota")
	if len(log) != 2 || log[0].Version != 2 || log[1].Version != 1 || !log[1].Late || log[0].Late {
		t.Errorf("apply log %+v, want v2 then v1 (late)", log)
	}
}

func TestFaultApplyDelayValidated(t *testing.T) {
	for _, ms := range []int{-1, 600_001} {
		if err := (Faults{ApplyDelayMS: ms}).Validate(); err == nil || !strings.Contains(err.Error(), "apply_delay_ms") {
			t.Errorf("apply_delay_ms %d: %v, want an error naming apply_delay_ms", ms, err)
		}
	}
}
