package channels_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/paritysync/paritysync/channels"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sim"
)

// The protocol tests push real requests over HTTP to the simulator's handler.

const (
	propA   = "prop_0000000a"
	propB   = "prop_0000000b"
	channex = "channex_eu"
	ota     = "ota_xml"
)

func channexMapping() models.ChannexMapping {
	prop := func(id, rt, rp string) models.ChannexProperty {
		return models.ChannexProperty{PropertyID: id, Currency: "EUR",
			RoomTypes: map[string]string{"DBL": rt},
			RatePlans: map[string]string{"DBL/BAR": rp}}
	}
	return models.ChannexMapping{Properties: map[string]models.ChannexProperty{
		propA: prop("aaaaaaaa-0000-4000-8000-000000000001", "aaaaaaaa-0000-4000-8000-000000000002", "aaaaaaaa-0000-4000-8000-000000000003"),
		propB: prop("bbbbbbbb-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-000000000002", "bbbbbbbb-0000-4000-8000-000000000003"),
	}}
}

type protoHarness struct {
	sim    *sim.Simulator
	client *channels.Client
	clock  *sim.ManualClock
	cfg    models.ChannelConfig
}

// newProtoHarness serves cfg from a simulator on a test clock; the simulator's copy
// may differ (simCfg), as a Channex channel's limit is per property there.
func newProtoHarness(t *testing.T, cfg models.ChannelConfig, simCfg func(*models.ChannelConfig), simMod func(*sim.Config), secret string) *protoHarness {
	t.Helper()
	clk := sim.NewManualClock(time.Date(2030, 4, 1, 12, 0, 0, 0, time.UTC))
	sc := cfg
	if simCfg != nil {
		simCfg(&sc)
	}
	conf := sim.Config{Channels: []models.ChannelConfig{sc}, StaticTokens: []string{"sim-secret"}, Now: clk.Now, Seed: 5}
	if simMod != nil {
		simMod(&conf)
	}
	s := sim.New(conf)
	srv := httptest.NewServer(s)
	t.Cleanup(func() { s.Close(); srv.Close() })
	c := channels.New(srv.Client(), srv.URL, channels.Credentials{cfg.Slug: channels.StaticCredential(secret)},
		[]models.ChannelConfig{cfg}, 5*time.Second)
	return &protoHarness{sim: s, client: c, clock: clk, cfg: cfg}
}

func channexHarness(t *testing.T, simMod func(*sim.Config), secret string) *protoHarness {
	return newProtoHarness(t, models.NewChannexChannel(channex, channexMapping()),
		func(c *models.ChannelConfig) { c.RatePerMinute = models.ChannexRequestsPerMinute }, simMod, secret)
}

func (h *protoHarness) push(t *testing.T, req models.ChannelRequest) channels.PushResponse {
	t.Helper()
	req.Channel = h.cfg.Slug
	resp, err := h.client.Push(context.Background(), req)
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	return resp
}

func (h *protoHarness) stats() sim.ChannelStats { return h.sim.Stats()[h.cfg.Slug] }

func want(t *testing.T, resp channels.PushResponse, class channels.Class, status int) {
	t.Helper()
	if resp.Class != class || resp.Status != status {
		t.Fatalf("class %s status %d (%s), want %s %d", resp.Class, resp.Status, resp.Message, class, status)
	}
}

func d(s string) models.Date {
	v, err := models.ParseDate(s)
	if err != nil {
		panic(err)
	}
	return v
}

func ip(v int) *int   { return &v }
func bp(v bool) *bool { return &v }
func money(s string) *decimal.Decimal {
	v := decimal.RequireFromString(s)
	return &v
}

func rates(prop string, version int64, amount, currency, from, to string) models.ChannelRequest {
	return models.ChannelRequest{PropertyID: prop, Family: models.FamilyRates, Priority: 3, Lines: []models.ARILine{{
		RoomTypeCode: "DBL", RatePlanCode: "BAR", From: d(from), To: d(to), Values: models.Values{Amount: money(amount), Currency: currency}, Version: version}}}
}

func restrictions(prop string, lines ...models.ARILine) models.ChannelRequest {
	return models.ChannelRequest{PropertyID: prop, Family: models.FamilyRestrictions, Priority: 3, Lines: lines}
}

func availability(prop string, version int64, n int, from, to string) models.ChannelRequest {
	return models.ChannelRequest{PropertyID: prop, Family: models.FamilyAvailability, Priority: 3, Lines: []models.ARILine{{
		RoomTypeCode: "DBL", RatePlanCode: "BAR", From: d(from), To: d(to), Values: models.Values{Inventory: ip(n)}, Version: version}}}
}

func restrictionLine(version int64, from, to string, mod func(*models.ARILine)) models.ARILine {
	l := models.ARILine{RoomTypeCode: "DBL", RatePlanCode: "BAR", From: d(from), To: d(to), Version: version}
	mod(&l)
	return l
}

func failedLines(resp channels.PushResponse) []int {
	var out []int
	for _, f := range resp.Failed {
		out = append(out, f.Line)
	}
	return out
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func newServer(t *testing.T, s *sim.Simulator) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(func() { s.Close(); srv.Close() })
	return srv
}
