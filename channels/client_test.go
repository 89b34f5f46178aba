package channels_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/paritysync/paritysync/channels"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sim"
)

const secret = "s3cr3t-bearer"

// channelCfg is the channel as both the simulator and the client see it.
func channelCfg(mod func(*models.ChannelConfig)) models.ChannelConfig {
	c := models.DefaultChannels()[1] // expedia
	c.MaxRetryAfter = 2 * time.Minute
	if mod != nil {
		mod(&c)
	}
	return c
}

// harness runs the simulator over real HTTP and a client pointed at it.
type harness struct {
	sim    *sim.Simulator
	srv    *httptest.Server
	client *channels.Client
	tokens *countingTokens
	seen   chan http.Header // request headers the simulator received
}

type countingTokens struct {
	token     atomic.Value
	calls     atomic.Int32
	refreshed atomic.Int32
}

func (c *countingTokens) Secret(context.Context) (string, error) {
	c.calls.Add(1)
	return c.token.Load().(string), nil
}

func (c *countingTokens) Refresh(context.Context) error {
	c.refreshed.Add(1)
	c.token.Store(secret)
	return nil
}

func newHarness(t *testing.T, cfg models.ChannelConfig, simMod func(*sim.Config), timeout time.Duration) *harness {
	t.Helper()
	sc := sim.Config{Channels: []models.ChannelConfig{cfg}, StaticTokens: []string{secret}, Seed: 3}
	if simMod != nil {
		simMod(&sc)
	}
	h := &harness{sim: sim.New(sc), tokens: &countingTokens{}, seen: make(chan http.Header, 100)}
	h.tokens.token.Store(secret)
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case h.seen <- r.Header.Clone():
		default:
		}
		h.sim.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { h.sim.Close(); h.srv.Close() })
	h.client = channels.New(h.srv.Client(), h.srv.URL, channels.Credentials{"expedia": h.tokens}, []models.ChannelConfig{cfg}, timeout)
	return h
}

func ratesRequest(version int64, amount string, nights int) models.ChannelRequest {
	a := decimal.RequireFromString(amount)
	from := models.Date{Year: 2030, Month: 4, Day: 1}
	req := models.ChannelRequest{Channel: "expedia", PropertyID: "prop_1", Family: models.FamilyRates, Priority: 3}
	for i := range nights {
		d := from.AddDays(i)
		req.Lines = append(req.Lines, models.ARILine{RoomTypeCode: "DBL", RatePlanCode: "BAR", From: d, To: d,
			Values: models.Values{Amount: &a, Currency: "EUR"}, Version: version})
		req.Refs = append(req.Refs, models.MutationRef{ID: "m" + d.String(), Version: version, Line: i, StayDate: d,
			CorrelationID: "corr-" + d.String()})
	}
	return req
}

func push(t *testing.T, h *harness, req models.ChannelRequest) channels.PushResponse {
	t.Helper()
	resp, err := h.client.Push(context.Background(), req)
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	if strings.Contains(resp.Message, secret) {
		t.Fatalf("message leaks the token: %q", resp.Message)
	}
	return resp
}

func wantClass(t *testing.T, resp channels.PushResponse, class channels.Class, status int) {
	t.Helper()
	if resp.Class != class || resp.Status != status {
		t.Fatalf("class %s status %d (%s), want %s %d", resp.Class, resp.Status, resp.Message, class, status)
	}
}

func TestPushCommitted(t *testing.T) {
	h := newHarness(t, channelCfg(nil), nil, 5*time.Second)
	req := ratesRequest(4, "129.90", 3)
	resp := push(t, h, req)
	wantClass(t, resp, channels.ClassCommitted, 200)
	if resp.ConfirmationID == "" || resp.Accepted != 3 || len(resp.Failed) != 0 || resp.Message != "" {
		t.Errorf("response %+v", resp)
	}
	if !resp.HasRateLimit || resp.RateLimit.Limit != 60 || resp.RateLimit.Remaining != 59 || resp.RateLimit.Reset != time.Minute {
		t.Errorf("rate limit %+v (has %v)", resp.RateLimit, resp.HasRateLimit)
	}
	hdr := <-h.seen
	if got := hdr.Get("Authorization"); got != "Bearer "+secret {
		t.Errorf("Authorization %q", got)
	}
	if got := hdr.Get(models.HeaderIdempotencyKey); got != req.IdempotencyKey() {
		t.Errorf("idempotency key %q, want %q", got, req.IdempotencyKey())
	}
	if got := hdr.Get(models.HeaderCorrelationID); got != "corr-2030-04-01" {
		t.Errorf("correlation id %q, want the first ref's", got)
	}
	st, err := h.client.ReadBack(context.Background(), "expedia", "prop_1", models.Date{Year: 2030, Month: 4, Day: 1}, models.Date{Year: 2030, Month: 4, Day: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Cells) != 3 || st.Cells[2].Version != 4 || !st.Cells[2].Amount.Equal(decimal.RequireFromString("129.90")) {
		t.Errorf("state %+v", st)
	}
}

func TestPushTakesTheTokenOnEveryCall(t *testing.T) {
	h := newHarness(t, channelCfg(nil), nil, 5*time.Second)
	push(t, h, ratesRequest(1, "10.00", 1))
	push(t, h, ratesRequest(2, "10.00", 1))
	if got := h.tokens.calls.Load(); got != 2 {
		t.Errorf("token asked %d times, want 2", got)
	}
}

func TestPushCorrelationFallsBackToIdempotencyKey(t *testing.T) {
	h := newHarness(t, channelCfg(nil), nil, 5*time.Second)
	req := ratesRequest(1, "10.00", 1)
	req.Refs = nil
	push(t, h, req)
	if got := (<-h.seen).Get(models.HeaderCorrelationID); got != req.IdempotencyKey() {
		t.Errorf("correlation id %q, want the idempotency key", got)
	}
}

func TestPushPartial(t *testing.T) {
	h := newHarness(t, channelCfg(nil), func(c *sim.Config) { c.Faults = sim.Faults{PartialRatio: 1} }, 5*time.Second)
	resp := push(t, h, ratesRequest(1, "10.00", 5))
	wantClass(t, resp, channels.ClassPartial, 207)
	if resp.ConfirmationID == "" || len(resp.Failed) == 0 || resp.Accepted+len(resp.Failed) != 5 {
		t.Fatalf("response %+v", resp)
	}
	for _, f := range resp.Failed {
		if f.Line < 0 || f.Line >= 5 || f.Code == "" {
			t.Errorf("failure %+v", f)
		}
	}
}

func TestPushThrottledBothRetryAfterForms(t *testing.T) {
	for _, maxWait := range []time.Duration{2 * time.Minute, 30 * time.Second} {
		t.Run(maxWait.String(), func(t *testing.T) {
			cfg := channelCfg(func(c *models.ChannelConfig) { c.RatePerMinute, c.Burst, c.MaxRetryAfter = 1, 1, maxWait })
			h := newHarness(t, cfg, nil, 5*time.Second)
			wantClass(t, push(t, h, ratesRequest(1, "10.00", 1)), channels.ClassCommitted, 200)
			for form := range 2 { // the simulator alternates delta-seconds and HTTP-date
				resp := push(t, h, ratesRequest(int64(2+form), "10.00", 1))
				wantClass(t, resp, channels.ClassThrottled, 429)
				if !resp.ServerWait {
					t.Fatalf("form %d: Retry-After not usable", form)
				}
				lo, hi := 58*time.Second, 61*time.Second
				if maxWait < lo {
					lo, hi = maxWait, maxWait
				}
				if resp.RetryAfter < lo || resp.RetryAfter > hi {
					t.Errorf("form %d: RetryAfter %s, want in [%s, %s]", form, resp.RetryAfter, lo, hi)
				}
				if !resp.HasRateLimit || resp.RateLimit.Remaining != 0 {
					t.Errorf("form %d: rate limit %+v", form, resp.RateLimit)
				}
			}
		})
	}
}

func TestPushThrottledBy503Storm(t *testing.T) {
	h := newHarness(t, channelCfg(nil), func(c *sim.Config) { c.Faults = sim.Faults{StormSeconds: 20, StormStatus: 503} }, 5*time.Second)
	resp := push(t, h, ratesRequest(1, "10.00", 1))
	wantClass(t, resp, channels.ClassThrottled, 503)
	if !resp.ServerWait || resp.RetryAfter < 18*time.Second || resp.RetryAfter > 20*time.Second {
		t.Errorf("wait %s server %v", resp.RetryAfter, resp.ServerWait)
	}
}

// A channel that says 429 or 503 without a usable Retry-After leaves the wait to the
// caller's backoff; the simulator always sends one, so a stub stands in.
func TestPushRetryAfterMissingOrGarbage(t *testing.T) {
	cases := []struct {
		status int
		ra     string
		class  channels.Class
	}{
		{429, "", channels.ClassThrottled},
		{429, "soon", channels.ClassThrottled},
		{429, "-3", channels.ClassThrottled},
		{503, "", channels.ClassTransient},
		{503, "later", channels.ClassTransient},
	}
	for _, c := range cases {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c.ra != "" {
				w.Header().Set("Retry-After", c.ra)
			}
			w.WriteHeader(c.status)
		}))
		client := channels.New(srv.Client(), srv.URL, channels.Credentials{"expedia": channels.StaticCredential(secret)}, []models.ChannelConfig{channelCfg(nil)}, time.Second)
		resp, err := client.Push(context.Background(), ratesRequest(1, "10.00", 1))
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.Class != c.class || resp.ServerWait || resp.RetryAfter != 0 || resp.HasRateLimit {
			t.Errorf("%d %q: %+v", c.status, c.ra, resp)
		}
	}
}

func TestPushTransientServerError(t *testing.T) {
	h := newHarness(t, channelCfg(nil), func(c *sim.Config) { c.Faults = sim.Faults{ErrorRatio: 1} }, 5*time.Second)
	for i := range 8 {
		resp := push(t, h, ratesRequest(int64(i+1), "10.00", 1))
		if resp.Class != channels.ClassTransient || resp.Status < 500 || resp.ServerWait {
			t.Fatalf("response %+v", resp)
		}
		if !strings.Contains(resp.Message, "injected server error") {
			t.Errorf("message %q lacks the channel's", resp.Message)
		}
	}
}

func TestPushTransientTimeoutOnHang(t *testing.T) {
	h := newHarness(t, channelCfg(nil), func(c *sim.Config) { c.Faults = sim.Faults{Hang: true} }, 100*time.Millisecond)
	start := time.Now()
	resp := push(t, h, ratesRequest(1, "10.00", 1))
	wantClass(t, resp, channels.ClassTransient, 0)
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("gave up after %s", el)
	}
	if !strings.Contains(resp.Message, "no answer within 100ms") {
		t.Errorf("message %q", resp.Message)
	}
}

func TestPushTransientWhenChannelUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	client := channels.New(nil, url, channels.Credentials{"expedia": channels.StaticCredential(secret)}, []models.ChannelConfig{channelCfg(nil)}, time.Second)
	resp, err := client.Push(context.Background(), ratesRequest(1, "10.00", 1))
	if err != nil || resp.Class != channels.ClassTransient || resp.Message == "" {
		t.Fatalf("%+v, %v", resp, err)
	}
}

func TestPushCallerCancellationIsAnError(t *testing.T) {
	h := newHarness(t, channelCfg(nil), func(c *sim.Config) { c.Faults = sim.Faults{Hang: true} }, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := h.client.Push(ctx, ratesRequest(1, "10.00", 1))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the caller's deadline", err)
	}
}

func TestPushAuthExpired(t *testing.T) {
	h := newHarness(t, channelCfg(nil), func(c *sim.Config) { c.TokenMaxAge = time.Hour }, 5*time.Second)
	h.tokens.token.Store(sim.IssueToken(time.Now().Add(-2 * time.Hour)))
	resp := push(t, h, ratesRequest(1, "10.00", 1))
	wantClass(t, resp, channels.ClassAuthExpired, 401)
	// The caller refreshes once and pushes again.
	if err := h.tokens.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantClass(t, push(t, h, ratesRequest(1, "10.00", 1)), channels.ClassCommitted, 200)
}

func TestPushQuotaExhausted(t *testing.T) {
	h := newHarness(t, channelCfg(func(c *models.ChannelConfig) { c.DailyQuota = 1 }), nil, 5*time.Second)
	wantClass(t, push(t, h, ratesRequest(1, "10.00", 1)), channels.ClassCommitted, 200)
	resp := push(t, h, ratesRequest(2, "10.00", 1))
	wantClass(t, resp, channels.ClassQuotaExhausted, 400)
	if !strings.Contains(resp.Message, "quota") {
		t.Errorf("message %q", resp.Message)
	}
}

func TestPushRejectedWithChannelMessage(t *testing.T) {
	h := newHarness(t, channelCfg(nil), nil, 5*time.Second)
	resp := push(t, h, ratesRequest(1, "10.005", 1))
	wantClass(t, resp, channels.ClassRejected, 400)
	if !strings.Contains(resp.Message, "lines[0].amount") {
		t.Errorf("message %q does not carry the channel's", resp.Message)
	}
	if resp.ServerWait || resp.RetryAfter != 0 {
		t.Errorf("a rejection carries a wait: %+v", resp)
	}
}

func TestPushIdempotentReplay(t *testing.T) {
	h := newHarness(t, channelCfg(nil), func(c *sim.Config) { c.Faults = sim.Faults{CommitThen500Ratio: 1} }, 5*time.Second)
	req := ratesRequest(3, "55.00", 2)
	wantClass(t, push(t, h, req), channels.ClassTransient, 500) // applied, answer lost
	if err := h.sim.SetFaults(sim.Faults{}); err != nil {
		t.Fatal(err)
	}
	retry := push(t, h, req)
	wantClass(t, retry, channels.ClassCommitted, 200)
	again := push(t, h, req)
	if retry.ConfirmationID == "" || again.ConfirmationID != retry.ConfirmationID || again.Accepted != 2 {
		t.Errorf("replays %+v and %+v", retry, again)
	}
	st := h.sim.Stats()["expedia"]
	if st.Duplicates != 2 || st.NightsApplied != 2 {
		t.Errorf("simulator stats %+v", st)
	}
}

func TestPushUnknownChannel(t *testing.T) {
	h := newHarness(t, channelCfg(nil), nil, time.Second)
	req := ratesRequest(1, "10.00", 1)
	req.Channel = "nope"
	if _, err := h.client.Push(context.Background(), req); err == nil {
		t.Fatal("no error for an unknown channel")
	}
}

type failingTokens struct{}

func (failingTokens) Secret(context.Context) (string, error) { return "", errors.New("vault sealed") }
func (failingTokens) Refresh(context.Context) error          { return nil }

func TestPushWithoutTokenMakesNoCall(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls.Add(1) }))
	defer srv.Close()
	client := channels.New(srv.Client(), srv.URL, channels.Credentials{"expedia": failingTokens{}}, []models.ChannelConfig{channelCfg(nil)}, time.Second)
	if _, err := client.Push(context.Background(), ratesRequest(1, "10.00", 1)); err == nil || calls.Load() != 0 {
		t.Fatalf("err %v, calls %d", err, calls.Load())
	}
}

func TestReadBackErrorCarriesClass(t *testing.T) {
	h := newHarness(t, channelCfg(nil), func(c *sim.Config) { c.TokenMaxAge = time.Hour }, 5*time.Second)
	h.tokens.token.Store(sim.IssueToken(time.Now().Add(-2 * time.Hour)))
	_, err := h.client.ReadBack(context.Background(), "expedia", "prop_1", models.Date{Year: 2030, Month: 4, Day: 1}, models.Date{Year: 2030, Month: 4, Day: 1})
	var ce *channels.ChannelError
	if !errors.As(err, &ce) || ce.Response.Class != channels.ClassAuthExpired {
		t.Fatalf("err %v", err)
	}
	if strings.Contains(err.Error(), "simtoken") {
		t.Errorf("error leaks the token: %v", err)
	}
}

func TestPushConcurrentSharedClient(t *testing.T) {
	h := newHarness(t, channelCfg(func(c *models.ChannelConfig) { c.RatePerMinute = 5 }), nil, 5*time.Second)
	var wg sync.WaitGroup
	var committed, throttled atomic.Int32
	for i := range 12 {
		wg.Go(func() {
			resp, err := h.client.Push(context.Background(), ratesRequest(int64(i+1), "10.00", 1))
			switch {
			case err != nil:
				t.Error(err)
			case resp.Class == channels.ClassCommitted:
				committed.Add(1)
			case resp.Class == channels.ClassThrottled:
				throttled.Add(1)
			}
		})
	}
	wg.Wait()
	if committed.Load() != 5 || throttled.Load() != 7 {
		t.Errorf("committed %d throttled %d, want 5 and 7", committed.Load(), throttled.Load())
	}
}
