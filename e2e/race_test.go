package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/e2e/stack"
	"github.com/paritysync/paritysync/models"
)

// TestRacingBatchesNeverSendAnOlderVersion runs two batches over the same cells at
// once on three workers, each carrying the newer version of half the cells: the
// channel must never receive a version older than one it already received, every
// update gets one outcome, and the channel ends on the newest value of every cell.
func TestRacingBatchesNeverSendAnOlderVersion(t *testing.T) {
	srv := parallelDevServer(t)
	s := startStackWith(t, srv, stack.Options{Workers: 3,
		Channels: map[string]stack.Channel{"agoda": {PerMinute: 3000, Burst: 50, MaxLines: 1}}})
	const cells = 60
	day := models.DateOf(time.Now()).AddDays(10)
	base := time.Now().UnixNano()
	want := map[string]decimal.Decimal{}
	var a, b []models.Mutation
	for i := range cells {
		prop := fmt.Sprintf("prop_%08x", i%3+1)
		night := day.AddDays(i / 3)
		mk := func(v int64) models.Mutation {
			amt := decimal.New(100+v-base, 0)
			return models.Mutation{ID: uuid.NewString(), Channel: "agoda", PropertyID: prop, RoomTypeCode: "DBL",
				RatePlanCode: "BAR", StayDate: night, Values: models.Values{Amount: &amt, Currency: "EUR"}, Version: v, Priority: 3}
		}
		older, newer := mk(base+1), mk(base+2)
		if i%2 == 0 {
			a, b = append(a, newer), append(b, older)
		} else {
			a, b = append(a, older), append(b, newer)
		}
		want[prop+"/"+night.String()] = *newer.Amount
	}
	ra := s.startMutations(t, "race-a-"+uuid.NewString()[:8], a)
	rb := s.startMutations(t, "race-b-"+uuid.NewString()[:8], b)
	for _, st := range []models.BatchStatus{waitBatch(t, ra, 5*time.Minute), waitBatch(t, rb, 5*time.Minute)} {
		tot := st.Totals()
		t.Logf("%s: %+v", st.BatchID, tot)
		require.Equal(t, cells, tot.Total)
		require.Equal(t, cells, tot.Committed+tot.Superseded, "every update committed or superseded")
		require.Zero(t, tot.DeadLettered)
	}
	stats := s.Sim.Stats()["agoda"]
	t.Logf("agoda: %+v", stats)
	require.Zero(t, stats.StaleReceived, "the channel received an older version after a newer one")
	require.Zero(t, stats.StaleOverwrites)
	for _, prop := range []string{"prop_00000001", "prop_00000002", "prop_00000003"} {
		st, err := s.Acts.Client.ReadBack(context.Background(), "agoda", prop, day, day.AddDays(cells/3))
		require.NoError(t, err)
		for _, c := range st.Cells {
			w := want[prop+"/"+c.Date.String()]
			require.NotNil(t, c.Amount)
			require.True(t, w.Equal(*c.Amount), "%s %s holds %s, want the newest %s", prop, c.Date, c.Amount, w)
		}
	}
}
