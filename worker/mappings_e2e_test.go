package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/activities/store/storetest"
	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/dial/redistest"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sim"
)

// TestARunningWorkerPushesAPropertyMappedInTheStore starts the worker app with a
// Channex channel whose file maps one property, then stores another property's
// Channex ids in PostgreSQL (as PUT /v1/properties/{id}/channels does) and runs a
// batch for both: the worker, not restarted, commits both, and the simulator
// received the new property under its stored ids.
func TestARunningWorkerPushesAPropertyMappedInTheStore(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: needs a Temporal dev server")
	}
	t.Parallel()
	srv := startDevServer(t)
	dir := t.TempDir()
	chFile := writeFile(t, dir, "channels.yaml", fmt.Sprintf(protocolChannels,
		writeFile(t, dir, "channex.key", "cx-key\n"), writeFile(t, dir, "ota.secret", "hotel-7:ota-pass\n")))
	redisURL := redistest.Reachable(t)
	opt, err := redis.ParseURL(redisURL)
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	id := uuid.NewString()[:8]
	s := &e2eStack{rdb: rdb, prefix: "paritysync-map-" + id + ":", queue: "paritysync-map-" + id}
	dbURL := storetest.Schema(t, "map")
	s.env = map[string]string{
		"REDIS_URL": redisURL, "TEMPORAL_ADDRESS": srv.FrontendHostPort(), "TEMPORAL_NAMESPACE": srv.Namespace(),
		"PARITYSYNC_TASK_QUEUE": s.queue, "PARITYSYNC_KEY_PREFIX": s.prefix, "PARITYSYNC_TOKEN": "e2e-token",
		"PARITYSYNC_METRICS_ADDR": "127.0.0.1:0", "PARITYSYNC_CHANNELS_FILE": chFile, "PARITYSYNC_DATABASE_URL": dbURL,
	}
	chs, err := config.LoadChannels(chFile, s.getenv)
	require.NoError(t, err)
	// The new property, as Channex knows it (the worker's file does not).
	newProp := models.ChannexProperty{PropertyID: "3b9f2c71-5d4e-4f6a-8b1c-2d3e4f5a6b7c", Currency: "EUR",
		RoomTypes: map[string]string{"DBL": "4c0a3d82-6e5f-4a7b-9c2d-3e4f5a6b7c8d"},
		RatePlans: map[string]string{"DBL/BAR": "5d1b4e93-7f6a-4b8c-8d3e-4f5a6b7c8d9e"}}
	simChs := make([]models.ChannelConfig, len(chs))
	for i, c := range chs {
		if c.Protocol == models.ProtocolChannex {
			require.NotContains(t, c.Channex.Properties, "prop_000000a3")
			props := map[string]models.ChannexProperty{"prop_000000a3": newProp}
			for k, v := range c.Channex.Properties {
				props[k] = v
			}
			c.Channex = models.ChannexMapping{Properties: props}
		}
		simChs[i] = c
	}
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
		_ = rdb.Close()
	})

	// Mapped while the worker runs.
	st, err := store.Open(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(st.Close)
	require.NoError(t, st.SetPropertyMappings(ctx, "prop_000000a3", []store.PropertyChannel{{Channel: "channex_demo", Channex: &newProp}}))

	since := time.Now()
	day := models.DateOf(time.Now().UTC().AddDate(0, 0, 3))
	inv := 4
	ms := []models.Mutation{
		{ID: "old", PropertyID: "prop_000000a1", RoomTypeCode: "DBL", RatePlanCode: "BAR", Channel: "channex_demo", StayDate: day, Values: models.Values{Inventory: &inv}, Version: 1},
		{ID: "new", PropertyID: "prop_000000a3", RoomTypeCode: "DBL", RatePlanCode: "BAR", Channel: "channex_demo", StayDate: day, Values: models.Values{Inventory: &inv}, Version: 1},
	}
	res := s.runBatch(t, "map-"+id, ms)
	require.True(t, res.Done)
	require.Equal(t, 2, res.Totals().Committed, "%+v", res)
	var props []string
	for _, a := range s.sim.Applied("channex_demo") {
		if !a.At.Before(since) {
			props = append(props, a.Property)
		}
	}
	require.Contains(t, props, newProp.PropertyID, "the new property went out under its stored Channex id")
}
