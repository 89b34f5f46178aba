package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/dial/devtest"
	"github.com/paritysync/paritysync/e2e/stack"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sim"
)

// protocolChannels is a channels file with one channel per real protocol, each
// with its own credentials file, beside the generic channels of the defaults; each
// channel of the run has the short test window (testWindow), as the assertions are
// relative to it (no 429, most in any window).
const protocolChannels = `
channels:
  - slug: expedia
    window: 6s
  - slug: channex_demo
    protocol: channex
    window: 6s
    credentials_file: %s
    channex:
      properties:
        prop_000000a1:
          property_id: 716305c4-561a-4561-a187-7f5b8aeb5920
          currency: EUR
          room_types: {DBL: 994d1375-dbbd-4072-8724-b2ab32ce781b}
          rate_plans: {DBL/BAR: bab451e7-9ab1-4cc4-aa16-107bf7bbabb2, DBL/NRF: 5c0d4e1f-8a2b-4c3d-9e4f-1a2b3c4d5e6f}
        prop_000000a2:
          property_id: 0a7a6b3e-3c4f-4c6d-9a0e-2f1b5d8c7e61
          currency: EUR
          room_types: {DBL: e2f3a4b5-c6d7-4e8f-9a0b-1c2d3e4f5a6b}
          rate_plans: {DBL/BAR: 11111111-2222-4333-8444-555555555555, DBL/NRF: 66666666-7777-4888-9999-aaaaaaaaaaaa}
  - slug: ota_demo
    protocol: opentravel
    window: 6s
    credentials_file: %s
`

// protocolMutations are rates, availability and restrictions for two properties,
// two rate plans and five nights on each channel.
func protocolMutations(today models.Date, channels ...string) []models.Mutation {
	var ms []models.Mutation
	n := 0
	for _, ch := range channels {
		for _, prop := range []string{"prop_000000a1", "prop_000000a2"} {
			for _, plan := range []string{"BAR", "NRF"} {
				for night := range 5 {
					n++
					amount := decimal.New(int64(12000+100*night), -2)
					inv, minLOS, stop := night%4, 1+night%3, night == 2
					ms = append(ms, models.Mutation{
						ID: fmt.Sprintf("proto-%d", n), PropertyID: prop, RoomTypeCode: "DBL", RatePlanCode: plan,
						Channel: ch, StayDate: today.AddDays(3 + night), Values: models.Values{Amount: &amount, Currency: "EUR", Inventory: &inv, MinLOS: &minLOS, StopSell: &stop}, Version: time.Now().Unix(),
					})
				}
			}
		}
	}
	return ms
}

// protocolStack starts a stack on protocolChannels at the worker's default chunk
// size; channex changes the simulator's Channex channel.
func protocolStack(t *testing.T, srv *devtest.Env, channex func(*models.ChannelConfig)) *e2eStack {
	t.Helper()
	dir := t.TempDir()
	chFile := stack.WriteFile(t, dir, "channels.yaml", fmt.Sprintf(protocolChannels,
		stack.WriteFile(t, dir, "channex.key", "cx-key\n"), stack.WriteFile(t, dir, "ota.secret", "hotel-7:ota-pass\n")))
	return startStackWith(t, srv, stack.Options{
		// The default chunk size (unset), not the stacks' small one.
		Env: map[string]string{"PARITYSYNC_CHANNELS_FILE": chFile, "PARITYSYNC_CHUNK_SIZE": ""},
		Sim: func(c *sim.Config) {
			for i := range c.Channels {
				if c.Channels[i].Protocol == models.ProtocolChannex {
					channex(&c.Channels[i])
				}
			}
			// Each channel accepts only its own secret; the shared token would fail on
			// the Channex and OpenTravel channels if the worker sent it there.
			c.StaticTokens = append(c.StaticTokens, "cx-key", "ota-pass")
		},
	})
}

// TestEndToEndProtocols runs one batch to a generic, a Channex and an OpenTravel
// channel, each with its own credential, and reconciles them: Channex is read back
// and holds what was committed; OpenTravel cannot be read, so its state is re-sent.
func TestEndToEndProtocols(t *testing.T) {
	srv := parallelDevServer(t)
	s := protocolStack(t, srv, func(c *models.ChannelConfig) {
		c.RatePerMinute = models.ChannexRequestsPerMinute // per property and endpoint
	})
	id := uuid.NewString()[:8]

	today := models.DateOf(time.Now())
	protocols := []string{"expedia", "channex_demo", "ota_demo"}
	ms := protocolMutations(today, protocols...)
	st := s.runBatch(t, "e2e-proto-"+id, ms)
	total := st.Totals()
	t.Logf("batch: %+v", total)
	require.True(t, st.Done)
	// Outcomes count each family's part of a mutation: three per mutation here.
	require.Equal(t, 3*len(ms), total.Committed, "every update committed on every protocol")
	stats := s.Sim.Stats()
	for _, slug := range protocols {
		cs := stats[slug]
		t.Logf("%s: %+v", slug, cs)
		require.Positive(t, cs.Accepted, slug)
		require.Zero(t, cs.AuthFailures, "%s got the wrong credential", slug)
		require.Zero(t, cs.Throttled, slug)
		require.Zero(t, cs.StaleOverwrites, slug)
		require.LessOrEqual(t, cs.MaxWindowRequests, cs.Limit, slug)
	}

	res := s.reconcile(t, "reconcile/e2e-proto-"+id, []string{"channex_demo", "ota_demo"})
	t.Logf("reconcile: %+v", res.Channels)
	cx, ox := res.Channels[0], res.Channels[1]
	require.Positive(t, cx.Checked)
	require.Zero(t, cx.Drifted, "Channex read back what was committed")
	require.Zero(t, cx.Resent)
	require.Equal(t, ox.Checked, ox.Resent, "OpenTravel has no read-back: its state is re-sent")
	require.Positive(t, ox.Resent)
	require.NotNil(t, ox.Repair)
	require.Equal(t, ox.Resent, ox.Repair.Totals().Committed)
}
