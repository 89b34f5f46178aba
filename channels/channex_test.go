package channels_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/paritysync/paritysync/channels"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sim"
)

func TestChannexPushesEachFamilyAndReadsItBack(t *testing.T) {
	h := channexHarness(t, nil, "sim-secret")
	want(t, h.push(t, rates(propA, 4, "120.5", "EUR", "2030-04-10", "2030-04-12")), channels.ClassCommitted, 200)
	want(t, h.push(t, availability(propA, 4, 7, "2030-04-11", "2030-04-11")), channels.ClassCommitted, 200)
	resp := h.push(t, restrictions(propA, restrictionLine(4, "2030-04-12", "2030-04-13", func(l *models.ARILine) {
		l.StopSell, l.MinLOS, l.MaxLOS, l.CTA, l.CTD = bp(true), ip(2), ip(9), bp(false), bp(true)
	})))
	want(t, resp, channels.ClassCommitted, 200)
	if resp.ConfirmationID == "" || resp.Accepted != 1 {
		t.Errorf("confirmation %q accepted %d: want the task id and 1", resp.ConfirmationID, resp.Accepted)
	}

	st, err := h.client.ReadBack(context.Background(), channex, propA, d("2030-04-10"), d("2030-04-13"))
	if err != nil {
		t.Fatal(err)
	}
	byDate := map[string]models.ARICell{}
	for _, c := range st.Cells {
		if c.RoomTypeCode != "DBL" || c.RatePlanCode != "BAR" {
			t.Errorf("cell in foreign codes: %+v", c)
		}
		byDate[c.Date.String()] = c
	}
	c10, c11, c13 := byDate["2030-04-10"], byDate["2030-04-11"], byDate["2030-04-13"]
	switch {
	case c10.Amount == nil || !c10.Amount.Equal(*money("120.50")) || c10.Currency != "EUR":
		t.Errorf("2030-04-10 rate %v %s, want 120.50 EUR", c10.Amount, c10.Currency)
	case c11.Inventory == nil || *c11.Inventory != 7:
		t.Errorf("2030-04-11 availability %v, want 7", c11.Inventory)
	case c13.StopSell == nil || !*c13.StopSell || *c13.MinLOS != 2 || *c13.MaxLOS != 9 || *c13.CTA || !*c13.CTD:
		t.Errorf("2030-04-13 restrictions %+v", c13)
	}
	if s := h.stats(); s.Accepted != 3 || s.NightsApplied != 3+1+2 {
		t.Errorf("simulator accepted %d nights %d, want 3 and 6", s.Accepted, s.NightsApplied)
	}
}

// TestChannexWarningsInA200ArePartial: a change object the channel refuses is
// reported under meta.warnings of a 200 while the others apply.
func TestChannexWarningsInA200ArePartial(t *testing.T) {
	h := channexHarness(t, nil, "sim-secret")
	resp := h.push(t, restrictions(propA,
		restrictionLine(3, "2030-04-10", "2030-04-10", func(l *models.ARILine) { l.StopSell = bp(true) }),
		restrictionLine(3, "2030-04-11", "2030-04-11", func(l *models.ARILine) { l.MinLOS = ip(0) }), // refused
		restrictionLine(3, "2030-04-12", "2030-04-14", func(l *models.ARILine) { l.CTA = bp(true) }),
	))
	want(t, resp, channels.ClassPartial, 200)
	if got := failedLines(resp); !slices.Equal(got, []int{1}) || resp.Accepted != 2 || !contains(resp.Failed[0].Message, "min_stay_arrival") {
		t.Errorf("failed %v accepted %d (%+v), want line 1 refused for min_stay_arrival", got, resp.Accepted, resp.Failed)
	}
	if s := h.stats(); s.NightsApplied != 4 || s.Partial != 1 {
		t.Errorf("nights %d partial %d, want 4 and 1", s.NightsApplied, s.Partial)
	}

	all := h.push(t, restrictions(propA, restrictionLine(4, "2030-04-10", "2030-04-10", func(l *models.ARILine) { l.MaxLOS = ip(0) })))
	want(t, all, channels.ClassRejected, 200)
	if !slices.Equal(failedLines(all), []int{0}) {
		t.Errorf("every change object refused: failed %v", failedLines(all))
	}
}

// TestChannexLimitIsPerPropertyAndEndpoint: the 11th price-and-restriction request of
// a property in a minute gets Channex's 429 body without headers; another property
// and the availability endpoint keep their own 10.
func TestChannexLimitIsPerPropertyAndEndpoint(t *testing.T) {
	h := channexHarness(t, nil, "sim-secret")
	for i := range 5 {
		want(t, h.push(t, rates(propA, int64(i+1), "100", "EUR", "2030-04-10", "2030-04-10")), channels.ClassCommitted, 200)
		want(t, h.push(t, restrictions(propA, restrictionLine(int64(i+1), "2030-04-10", "2030-04-10", func(l *models.ARILine) { l.StopSell = bp(false) }))), channels.ClassCommitted, 200)
	}
	resp := h.push(t, rates(propA, 9, "100", "EUR", "2030-04-10", "2030-04-10"))
	want(t, resp, channels.ClassThrottled, http.StatusTooManyRequests)
	if resp.ServerWait || resp.HasRateLimit || !contains(resp.Message, "http_too_many_requests") {
		t.Errorf("429 %+v: want no Retry-After, no rate-limit headers, Channex's code", resp)
	}
	want(t, h.push(t, rates(propB, 1, "100", "EUR", "2030-04-10", "2030-04-10")), channels.ClassCommitted, 200)
	for i := range 10 {
		want(t, h.push(t, availability(propA, int64(i+1), 3, "2030-04-10", "2030-04-10")), channels.ClassCommitted, 200)
	}
	want(t, h.push(t, availability(propA, 20, 3, "2030-04-10", "2030-04-10")), channels.ClassThrottled, 429)
	h.clock.Add(time.Minute)
	want(t, h.push(t, rates(propA, 10, "100", "EUR", "2030-04-10", "2030-04-10")), channels.ClassCommitted, 200)
	if s := h.stats(); s.MaxWindowRequests != 11 || s.Throttled != 2 {
		// 11: arrivals per property and endpoint, the refused 11th included.
		t.Errorf("max window %d throttled %d", s.MaxWindowRequests, s.Throttled)
	}
}

func TestChannexClassifiesFailures(t *testing.T) {
	t.Run("wrong key is auth", func(t *testing.T) {
		h := channexHarness(t, nil, "not-the-key")
		want(t, h.push(t, rates(propA, 1, "100", "EUR", "2030-04-10", "2030-04-10")), channels.ClassAuthExpired, 401)
	})
	t.Run("server errors are transient", func(t *testing.T) {
		h := channexHarness(t, func(c *sim.Config) { c.Faults.ErrorRatio = 1 }, "sim-secret")
		resp := h.push(t, rates(propA, 1, "100", "EUR", "2030-04-10", "2030-04-10"))
		if resp.Class != channels.ClassTransient && resp.Class != channels.ClassThrottled || resp.Status < 500 {
			t.Errorf("injected error: %+v", resp)
		}
	})
	t.Run("a 503 storm with Retry-After throttles", func(t *testing.T) {
		h := channexHarness(t, func(c *sim.Config) { c.Faults.StormSeconds, c.Faults.StormStatus = 30, 503 }, "sim-secret")
		resp := h.push(t, rates(propA, 1, "100", "EUR", "2030-04-10", "2030-04-10"))
		want(t, resp, channels.ClassThrottled, 503)
		if !resp.ServerWait || resp.RetryAfter != 30*time.Second {
			t.Errorf("wait %s %v, want 30s", resp.RetryAfter, resp.ServerWait)
		}
	})
	t.Run("unmapped rate plan is rejected without a call", func(t *testing.T) {
		h := channexHarness(t, nil, "sim-secret")
		req := rates(propA, 1, "100", "EUR", "2030-04-10", "2030-04-10")
		req.Lines[0].RatePlanCode = "NRF"
		want(t, h.push(t, req), channels.ClassRejected, 0)
		want(t, h.push(t, rates(propA, 1, "100", "USD", "2030-04-10", "2030-04-10")), channels.ClassRejected, 0)
		if s := h.stats(); s.Requests != 0 {
			t.Errorf("%d requests reached the channel", s.Requests)
		}
	})
	t.Run("commit then 500, retry replays", func(t *testing.T) {
		h := channexHarness(t, func(c *sim.Config) { c.Faults.CommitThen500Ratio = 1 }, "sim-secret")
		req := rates(propA, 1, "100", "EUR", "2030-04-10", "2030-04-10")
		want(t, h.push(t, req), channels.ClassTransient, 500)
		if err := h.sim.SetFaults(sim.Faults{}); err != nil {
			t.Fatal(err)
		}
		want(t, h.push(t, req), channels.ClassCommitted, 200)
		if s := h.stats(); s.Duplicates != 1 || s.NightsApplied != 1 {
			t.Errorf("duplicates %d nights %d, want the replay and one night", s.Duplicates, s.NightsApplied)
		}
	})
	t.Run("older version does not overwrite", func(t *testing.T) {
		h := channexHarness(t, nil, "sim-secret")
		want(t, h.push(t, rates(propA, 5, "150", "EUR", "2030-04-10", "2030-04-10")), channels.ClassCommitted, 200)
		want(t, h.push(t, rates(propA, 3, "90", "EUR", "2030-04-10", "2030-04-10")), channels.ClassCommitted, 200)
		st, err := h.client.ReadBack(context.Background(), channex, propA, d("2030-04-10"), d("2030-04-10"))
		if err != nil {
			t.Fatal(err)
		}
		if s := h.stats(); s.StaleOverwrites != 1 || len(st.Cells) != 1 || !st.Cells[0].Amount.Equal(*money("150")) {
			t.Errorf("stale overwrites %d, cells %+v; want the version 5 rate kept", s.StaleOverwrites, st.Cells)
		}
	})
	t.Run("read-back of an unauthorized key is a ChannelError", func(t *testing.T) {
		h := channexHarness(t, nil, "not-the-key")
		_, err := h.client.ReadBack(context.Background(), channex, propA, d("2030-04-10"), d("2030-04-10"))
		var ce *channels.ChannelError
		if !errors.As(err, &ce) || ce.Response.Class != channels.ClassAuthExpired || contains(err.Error(), "not-the-key") {
			t.Errorf("read-back error %v", err)
		}
	})
}

// TestChannexSendsALineWithDaysAsOneChangeObject: a rates line kept to weekends
// goes as one change object with Channex's days, accepted as one, and the
// simulator sets exactly April's eight weekend nights, read back at the price,
// the weekdays between untouched.
func TestChannexSendsALineWithDaysAsOneChangeObject(t *testing.T) {
	h := channexHarness(t, nil, "sim-secret")
	resp := h.push(t, weekends(rates(propA, 4, "99", "EUR", "2030-04-01", "2030-04-30")))
	want(t, resp, channels.ClassCommitted, 200)
	if resp.Accepted != 1 {
		t.Errorf("accepted %d, want 1 change object", resp.Accepted)
	}
	if s := h.stats(); s.NightsApplied != 8 {
		t.Errorf("simulator applied %d nights, want April 2030's 8 weekend nights", s.NightsApplied)
	}
	st, err := h.client.ReadBack(context.Background(), channex, propA, d("2030-04-01"), d("2030-04-30"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range st.Cells {
		wd := c.Date.Time().Weekday()
		weekend := wd == time.Saturday || wd == time.Sunday
		if set := c.Amount != nil; set != weekend {
			t.Errorf("%s (%s): rate %v", c.Date, wd, c.Amount)
		}
	}
}
