package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/activities/store/storetest"
	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/dial/redistest"
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

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

// TestEndToEndProtocols runs one batch to a generic, a Channex and an OpenTravel
// channel, each with its own credential, and reconciles them: Channex is read back
// and holds what was committed; OpenTravel cannot be read, so its state is re-sent.
func TestEndToEndProtocols(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: needs a Temporal dev server")
	}
	t.Parallel() // it waits on its channels' windows; its stack shares nothing
	srv := startDevServer(t)
	dir := t.TempDir()
	chFile := writeFile(t, dir, "channels.yaml", fmt.Sprintf(protocolChannels,
		writeFile(t, dir, "channex.key", "cx-key\n"), writeFile(t, dir, "ota.secret", "hotel-7:ota-pass\n")))

	redisURL := redistest.Reachable(t)
	opt, err := redis.ParseURL(redisURL)
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	id := uuid.NewString()[:8]
	s := &e2eStack{rdb: rdb, prefix: "paritysync-e2e-" + id + ":", queue: "paritysync-e2e-" + id}
	s.env = map[string]string{
		"REDIS_URL": redisURL, "TEMPORAL_ADDRESS": srv.FrontendHostPort(), "TEMPORAL_NAMESPACE": srv.Namespace(),
		"PARITYSYNC_TASK_QUEUE": s.queue,
		"PARITYSYNC_KEY_PREFIX": s.prefix, "PARITYSYNC_TOKEN": "e2e-token", "PARITYSYNC_METRICS_ADDR": "127.0.0.1:0",
		"PARITYSYNC_CHANNELS_FILE": chFile,
		// A schema of its own on the local PostgreSQL, dropped at the end.
		"PARITYSYNC_DATABASE_URL": storetest.Schema(t, "e2e"),
	}
	chs, err := config.LoadChannels(chFile, s.getenv)
	require.NoError(t, err)
	simChs := make([]models.ChannelConfig, len(chs))
	for i, c := range chs {
		if c.Protocol == models.ProtocolChannex {
			c.RatePerMinute = models.ChannexRequestsPerMinute // per property and endpoint
		}
		simChs[i] = c
	}
	// Each channel accepts only its own secret; the shared token would fail on the
	// Channex and OpenTravel channels if the worker sent it there.
	s.sim = sim.New(sim.Config{Channels: simChs, StaticTokens: []string{"e2e-token", "cx-key", "ota-pass"}})
	httpSrv := httptest.NewServer(s.sim)
	s.env["PARITYSYNC_CHANNEL_URL"] = httpSrv.URL
	app := newApp(s.getenv)
	require.NoError(t, app.Err())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	s.tc = srv.Client()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = app.Stop(ctx)
		httpSrv.Close()
		s.sim.Close()
		iter := rdb.Scan(ctx, 0, s.prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		_ = rdb.Close()
	})

	today := models.DateOf(time.Now())
	protocols := []string{"expedia", "channex_demo", "ota_demo"}
	ms := protocolMutations(today, protocols...)
	st := s.runBatch(t, "e2e-proto-"+id, ms)
	total := st.Totals()
	t.Logf("batch: %+v", total)
	require.True(t, st.Done)
	// Outcomes count each family's part of a mutation: three per mutation here.
	require.Equal(t, 3*len(ms), total.Committed, "every update committed on every protocol")
	stats := s.sim.Stats()
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
