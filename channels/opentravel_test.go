package channels_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/paritysync/paritysync/channels"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sim"
)

func otaConfig() models.ChannelConfig {
	c := models.NewChannelConfig(ota, 30)
	c.Protocol, c.ReadBack = models.ProtocolOpenTravel, false
	return c
}

func otaHarness(t *testing.T, simMod func(*sim.Config), secret string) *protoHarness {
	return newProtoHarness(t, otaConfig(), nil, simMod, secret)
}

func TestOpenTravelPushesEachFamily(t *testing.T) {
	h := otaHarness(t, nil, "hotel-user:sim-secret")
	resp := h.push(t, rates(propA, 2, "45.125", "KWD", "2030-04-10", "2030-04-12"))
	want(t, resp, channels.ClassCommitted, 200)
	if resp.ConfirmationID == "" || resp.Accepted != 1 {
		t.Errorf("confirmation %q accepted %d", resp.ConfirmationID, resp.Accepted)
	}
	want(t, h.push(t, rates(propA, 2, "12000", "JPY", "2030-04-13", "2030-04-13")), channels.ClassCommitted, 200)
	want(t, h.push(t, availability(propA, 2, 0, "2030-04-10", "2030-04-11")), channels.ClassCommitted, 200)
	want(t, h.push(t, restrictions(propA,
		restrictionLine(2, "2030-04-10", "2030-04-10", func(l *models.ARILine) {
			l.StopSell, l.CTA, l.CTD, l.MinLOS, l.MaxLOS = bp(true), bp(true), bp(false), ip(2), ip(5)
		}))), channels.ClassCommitted, 200)
	if s := h.stats(); s.Accepted != 4 || s.NightsApplied != 3+1+2+3 {
		// The restrictions line travels as three messages, each applying its night.
		t.Errorf("accepted %d nights %d, want 4 and 9", s.Accepted, s.NightsApplied)
	}
	if _, err := h.client.ReadBack(context.Background(), ota, propA, d("2030-04-10"), d("2030-04-10")); !errors.Is(err, channels.ErrNoReadBack) {
		t.Errorf("read-back: %v, want ErrNoReadBack", err)
	}
}

// TestOpenTravelWarningsArePartial: a message the channel refuses is a <Warning
// RPH=> beside <Success/>; the line it belongs to fails, the others commit.
func TestOpenTravelWarningsArePartial(t *testing.T) {
	h := otaHarness(t, nil, "hotel-user:sim-secret")
	resp := h.push(t, restrictions(propA,
		restrictionLine(3, "2030-04-10", "2030-04-10", func(l *models.ARILine) { l.StopSell, l.CTA = bp(true), bp(true) }), // messages 1, 2
		restrictionLine(3, "2030-04-11", "2030-04-11", func(l *models.ARILine) { l.MinLOS = ip(0) }),                       // message 3, refused
		restrictionLine(3, "2030-04-12", "2030-04-12", func(l *models.ARILine) { l.CTD = bp(true) }),                       // message 4
	))
	want(t, resp, channels.ClassPartial, 200)
	if got := failedLines(resp); !slices.Equal(got, []int{1}) || resp.Accepted != 2 {
		t.Errorf("failed %v accepted %d, want line 1 only", got, resp.Accepted)
	}
	// JPY has no minor units: 12000.50 is never rounded into another price and
	// sent; it is refused before any call.
	before := h.stats().Requests
	want(t, h.push(t, rates(propA, 4, "12000.50", "JPY", "2030-04-10", "2030-04-10")), channels.ClassRejected, 0)
	if h.stats().Requests != before {
		t.Error("a JPY amount with minor units reached the channel")
	}
}

// TestOpenTravelRefusesCodesItCannotCarry: a HotelCode or InvTypeCode over
// OpenTravel's 16 characters is refused before any call, naming the field.
func TestOpenTravelRefusesCodesItCannotCarry(t *testing.T) {
	h := otaHarness(t, nil, "hotel-user:sim-secret")
	long := rates("prop_0123456789ab", 1, "100", "EUR", "2030-04-10", "2030-04-10")
	resp := h.push(t, long)
	want(t, resp, channels.ClassRejected, 0)
	if !contains(resp.Message, "HotelCode prop_0123456789ab: 17 characters, OpenTravel allows 16") {
		t.Errorf("message %q", resp.Message)
	}
	room := availability(propA, 1, 3, "2030-04-10", "2030-04-10")
	room.Lines[0].RoomTypeCode = "DOUBLE_0123456789"
	resp = h.push(t, room)
	want(t, resp, channels.ClassRejected, 0)
	if !contains(resp.Message, "lines[0]: InvTypeCode DOUBLE_0123456789: 17 characters") {
		t.Errorf("message %q", resp.Message)
	}
	if s := h.stats(); s.Requests != 0 {
		t.Errorf("%d requests reached the channel", s.Requests)
	}
}

func TestOpenTravelClassifiesFailures(t *testing.T) {
	t.Run("wrong password is an authentication error inside a 200", func(t *testing.T) {
		h := otaHarness(t, nil, "hotel-user:wrong")
		resp := h.push(t, rates(propA, 1, "10", "EUR", "2030-04-10", "2030-04-10"))
		want(t, resp, channels.ClassAuthExpired, 200)
		if contains(resp.Message, "wrong") {
			t.Errorf("message %q holds the credential", resp.Message)
		}
	})
	t.Run("injected errors are transient, inside a 200 or not", func(t *testing.T) {
		h := otaHarness(t, func(c *sim.Config) { c.Faults.ErrorRatio = 1 }, "hotel-user:sim-secret")
		statuses := map[int]bool{}
		for i := range 12 {
			resp := h.push(t, rates(propA, int64(i+1), "10", "EUR", "2030-04-10", "2030-04-10"))
			if resp.Class != channels.ClassTransient && !(resp.Class == channels.ClassThrottled && resp.Status == 503) {
				t.Fatalf("injected error classified %s (%d %s)", resp.Class, resp.Status, resp.Message)
			}
			statuses[resp.Status] = true
		}
		if !statuses[200] {
			t.Errorf("statuses %v: want at least one processing error inside a 200", statuses)
		}
	})
	t.Run("over the limit is throttled with Retry-After", func(t *testing.T) {
		h := otaHarness(t, nil, "hotel-user:sim-secret")
		for i := range 30 {
			want(t, h.push(t, availability(propA, int64(i+1), 1, "2030-04-10", "2030-04-10")), channels.ClassCommitted, 200)
		}
		resp := h.push(t, availability(propA, 40, 1, "2030-04-10", "2030-04-10"))
		want(t, resp, channels.ClassThrottled, 429)
		if !resp.ServerWait || resp.RetryAfter <= 0 || resp.RetryAfter > time.Minute {
			t.Errorf("wait %s %v", resp.RetryAfter, resp.ServerWait)
		}
	})
	t.Run("a retry after a lost answer replays under the same EchoToken", func(t *testing.T) {
		h := otaHarness(t, func(c *sim.Config) { c.Faults.CommitThen500Ratio = 1 }, "hotel-user:sim-secret")
		req := rates(propA, 1, "10", "EUR", "2030-04-10", "2030-04-10")
		want(t, h.push(t, req), channels.ClassTransient, 500)
		if err := h.sim.SetFaults(sim.Faults{}); err != nil {
			t.Fatal(err)
		}
		h.clock.Add(time.Second) // a new TimeStamp on the retry
		want(t, h.push(t, req), channels.ClassCommitted, 200)
		if s := h.stats(); s.Duplicates != 1 || s.NightsApplied != 1 {
			t.Errorf("duplicates %d nights %d", s.Duplicates, s.NightsApplied)
		}
	})
	t.Run("older version does not overwrite", func(t *testing.T) {
		h := otaHarness(t, nil, "hotel-user:sim-secret")
		want(t, h.push(t, availability(propA, 5, 3, "2030-04-10", "2030-04-10")), channels.ClassCommitted, 200)
		want(t, h.push(t, availability(propA, 4, 9, "2030-04-10", "2030-04-10")), channels.ClassCommitted, 200)
		if s := h.stats(); s.StaleOverwrites != 1 {
			t.Errorf("stale overwrites %d, want 1", s.StaleOverwrites)
		}
	})
}
