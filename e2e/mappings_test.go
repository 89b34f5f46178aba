package e2e

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
)

// TestARunningWorkerPushesAPropertyMappedInTheStore starts the worker app with a
// Channex channel whose file maps one property, then stores another property's
// Channex ids in PostgreSQL (as PUT /v1/properties/{id}/channels does) and runs a
// batch for both: the worker, not restarted, commits both, and the simulator
// received the new property under its stored ids.
func TestARunningWorkerPushesAPropertyMappedInTheStore(t *testing.T) {
	srv := parallelDevServer(t)
	// The new property, as Channex knows it (the worker's file does not).
	newProp := models.ChannexProperty{PropertyID: "3b9f2c71-5d4e-4f6a-8b1c-2d3e4f5a6b7c", Currency: "EUR",
		RoomTypes: map[string]string{"DBL": "4c0a3d82-6e5f-4a7b-9c2d-3e4f5a6b7c8d"},
		RatePlans: map[string]string{"DBL/BAR": "5d1b4e93-7f6a-4b8c-8d3e-4f5a6b7c8d9e"}}
	s := protocolStack(t, srv, func(c *models.ChannelConfig) {
		require.NotContains(t, c.Channex.Properties, "prop_000000a3")
		props := map[string]models.ChannexProperty{"prop_000000a3": newProp}
		maps.Copy(props, c.Channex.Properties)
		c.Channex = models.ChannexMapping{Properties: props}
	})

	// Mapped while the worker runs.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := s.OpenStore(t)
	require.NoError(t, st.SetPropertyMappings(ctx, "prop_000000a3", []store.PropertyChannel{{Channel: "channex_demo", Channex: &newProp}}))
	id := uuid.NewString()[:8]

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
	for _, a := range s.Sim.Applied("channex_demo") {
		if !a.At.Before(since) {
			props = append(props, a.Property)
		}
	}
	require.Contains(t, props, newProp.PropertyID, "the new property went out under its stored Channex id")
}
