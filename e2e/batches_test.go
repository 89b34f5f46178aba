package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
)

// The changes the tests send, and how they count what a batch ended with.

// benchDay is the first stay date the scenarios use: far enough ahead that no run
// meets "today" and close enough for every channel's horizon.
func benchDay() models.Date { return models.DateOf(time.Now()).AddDays(30) }

// rateChanges is one rate change per (property, night) for n properties × nights,
// each its own request when the channel carries one line per request: the price
// differs from night to night, so no two nights merge into one line.
func rateChanges(channel string, props, nights int, version int64, priority int, amount string) []models.Mutation {
	var out []models.Mutation
	for p := range props {
		for n := range nights {
			a := decimal.RequireFromString(amount).Add(decimal.New(int64(n), 0))
			out = append(out, models.Mutation{
				ID: uuid.NewString(), Channel: channel, PropertyID: fmt.Sprintf("prop_%08x", p+1),
				RoomTypeCode: "DBL", RatePlanCode: "BAR", StayDate: benchDay().AddDays(n),
				Values: models.Values{Amount: &a, Currency: "EUR"}, Version: version, Priority: priority,
			})
		}
	}
	return out
}

// rateCells is one rate mutation per property of channel, at version v and amount.
func rateCells(channel string, properties int, night models.Date, v int64, amount string) []models.Mutation {
	var ms []models.Mutation
	for p := range properties {
		a := decimal.RequireFromString(amount)
		ms = append(ms, models.Mutation{ID: fmt.Sprintf("%s-p%02d-v%d", channel, p, v),
			PropertyID: fmt.Sprintf("prop_%08d", p+1), RoomTypeCode: "DLXKING", RatePlanCode: "BAR_FLEX",
			Channel: channel, StayDate: night, Values: models.Values{Amount: &a, Currency: "EUR"}, Version: v})
	}
	return ms
}

// newPrices is up to n valid rate changes of one channel from ms, each raised by
// step and at step versions later, so the channel sees new content.
func newPrices(ms []models.Mutation, v *models.Validator, channel string, n int, step int64) []models.Mutation {
	var out []models.Mutation
	for _, m := range ms {
		if m.Channel == channel && m.Amount != nil && len(v.Validate(m)) == 0 && len(out) < n {
			a := m.Amount.Add(decimal.New(step, 0))
			m.Amount, m.Version = &a, m.Version+step
			out = append(out, m)
		}
	}
	return out
}

// expectedUpdates is how many outcomes a batch of ms must end with: one per family
// of a valid mutation, one per rejected mutation.
func expectedUpdates(t *testing.T, ms []models.Mutation) int {
	t.Helper()
	v, err := models.NewValidator(models.DefaultChannels(), "", time.Now)
	require.NoError(t, err)
	n := 0
	for _, m := range ms {
		if len(v.Validate(m)) > 0 {
			n++
		} else {
			n += len(m.Families())
		}
	}
	return n
}

// storedTotal sums a batch's recorded outcomes over its channels.
func storedTotal(t *testing.T, st *store.Store, batchID string) models.ChannelCounts {
	t.Helper()
	counts, err := st.BatchCounts(context.Background(), batchID)
	require.NoError(t, err)
	var total models.ChannelCounts
	for _, c := range counts {
		total.Add(c)
	}
	return total
}
