package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paritysync/paritysync/models"
)

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

func TestFaultStormFromFirstPushStartsAtThePush(t *testing.T) {
	s, clk := newSim(t, nil)
	if err := s.SetFaults(Faults{StormSeconds: 10, StormFromFirstPush: true}); err != nil {
		t.Fatal(err)
	}
	if s.Faults().StormUntil != nil {
		t.Error("GET faults shows a storm no push has met")
	}
	clk.Add(30 * time.Second) // longer than the storm: a storm counted from SetFaults is over
	body := ratesBody("p1", 1, "1.00", "2030-04-01", "2030-04-01")
	rec := post(s, "a", token, body)
	wantStatus(t, rec, 429)
	if got := rec.Header().Get("Retry-After"); got != "10" {
		t.Errorf("Retry-After %q, want 10 (the whole storm)", got)
	}
	clk.Add(9 * time.Second)
	wantStatus(t, post(s, "a", token, body), 429)
	clk.Add(time.Second)
	wantStatus(t, post(s, "a", token, body), 200)
	if st := s.Stats()["ota"]; st.Throttled != 2 {
		t.Errorf("throttled %d, want 2", st.Throttled)
	}
	if err := s.SetFaults(Faults{StormFromFirstPush: true}); err == nil ||
		!strings.Contains(err.Error(), "storm_from_first_push") {
		t.Errorf("a first-push storm without seconds: %v", err)
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
