package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
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
